"""Administration for the demo and the tests: databases, vhosts and queues of their own.

Administration for the demo and the tests, never for a pass: databases and vhosts of their
own, the demo's seeding queries (``scenario.sql``), queues declared on the broker.

Through the same seams as the reaper itself (:mod:`reaper.jobqueue.database`,
:mod:`reaper.broker.http`), so their errors read the same and carry no password.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from reaper.broker.client import ManagementClient
from reaper.broker.http import api_path
from reaper.errors import BrokerUnavailable
from reaper.jobqueue.database import Record, execute_once
from reaper.jobqueue.postgres import PostgresStore
from reaper.jobqueue.sql import load_queries

__all__ = [
    "SCENARIO_QUERIES",
    "create_database",
    "create_vhost",
    "declare_queue",
    "delete_vhost",
    "drop_database",
    "run_scenario_query",
]

#: The demo's seeding and inspection queries, named as in ``queries.sql``.
SCENARIO_QUERIES: Final = load_queries("reaper.demo", "scenario.sql")


async def create_database(admin_dsn: str, name: str, *, password: str | None = None) -> None:
    """Create the database ``name`` on the server ``admin_dsn`` points at. Raises
    :class:`~reaper.errors.StoreUnavailable` with a one-line reason if it cannot."""
    await execute_once(
        admin_dsn,
        "CREATE DATABASE {database}",
        doing=f"creating database {name}",
        password=password,
        database=name,
    )


async def drop_database(admin_dsn: str, name: str, *, password: str | None = None) -> None:
    """Drop the database ``name`` (if it exists, closing its sessions): only ever a database
    the demo or a test created for itself."""
    await execute_once(
        admin_dsn,
        "DROP DATABASE IF EXISTS {database} WITH (FORCE)",
        doing=f"dropping database {name}",
        password=password,
        database=name,
    )


async def run_scenario_query(store: PostgresStore, name: str, *args: object) -> list[Record]:
    """Run the query ``name`` of ``scenario.sql`` in a transaction of its own; its rows."""
    query = SCENARIO_QUERIES[name]
    doing = f"running the scenario query {name}"
    async with store.database.session(doing) as conn, conn.transaction():
        rows: list[Record] = await conn.fetch(query, *args)
    return rows


async def create_vhost(client: ManagementClient, name: str) -> None:
    """Create the vhost ``name`` (idempotent) and give the client's user every permission on
    it."""
    await client.api.request("PUT", api_path("vhosts", name), json={})
    await client.api.request(
        "PUT",
        api_path("permissions", name, client.username),
        json={"configure": ".*", "write": ".*", "read": ".*"},
    )


async def delete_vhost(client: ManagementClient, name: str) -> None:
    """Delete the vhost ``name`` with everything in it: only ever a vhost the demo or a test
    created for itself. A vhost already gone is not an error."""
    try:
        await client.api.request("DELETE", api_path("vhosts", name), missing=f"vhost {name!r}")
    except BrokerUnavailable as exc:
        if exc.status != 404:
            raise


async def declare_queue(
    client: ManagementClient,
    name: str,
    *,
    queue_type: str = "classic",
    arguments: Mapping[str, object] | None = None,
    vhost: str | None = None,
) -> None:
    """Declare a durable queue of ``queue_type`` with ``arguments`` (idempotent when the
    queue exists with the same ones; a 400 otherwise)."""
    queue = {
        "durable": True,
        "auto_delete": False,
        "arguments": {"x-queue-type": queue_type, **dict(arguments or {})},
    }
    path = api_path("queues", client.vhost if vhost is None else vhost, name)
    await client.api.request("PUT", path, json=queue)

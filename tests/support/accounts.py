"""Accounts of a test's own on the real services: a RabbitMQ user with the tags and vhost
permissions given, a PostgreSQL login role holding nothing; each removed afterwards."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from urllib.parse import quote

import asyncpg

from tests.support.services import PG_ADMIN_DSN, BrokerUnderTest

#: Every permission on the vhost.
ALL_PERMISSIONS = {"configure": ".*", "write": ".*", "read": ".*"}
#: What the README asks for the reaper's own user: tags to read everything and write
#: policies; no configure, write only to the default exchange (a replay), read every queue.
README_TAGS = "monitoring,policymaker"
README_PERMISSIONS = {"configure": "^$", "write": "^amq\\.default$", "read": ".*"}


def set_user(
    broker: BrokerUnderTest,
    name: str,
    password: str,
    tags: str,
    permissions: Mapping[str, str] | None = None,
) -> None:
    """Create or change the user ``name``; give it ``permissions`` on the test's vhost."""
    user = quote(name, safe="")
    with broker.admin() as admin:
        admin.put(
            f"/api/users/{user}", json={"password": password, "tags": tags}
        ).raise_for_status()
        if permissions is not None:
            admin.put(
                f"/api/permissions/{broker.vhost_path}/{user}", json=dict(permissions)
            ).raise_for_status()


@contextmanager
def broker_user(
    broker: BrokerUnderTest,
    prefix: str,
    tags: str,
    permissions: Mapping[str, str] = ALL_PERMISSIONS,
) -> Iterator[tuple[str, str]]:
    """A user named ``prefix-<random>`` with a random password, deleted afterwards."""
    name, password = f"{prefix}-{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex}"
    set_user(broker, name, password, tags, permissions)
    try:
        yield name, password
    finally:
        with broker.admin() as admin:
            admin.delete(f"/api/users/{quote(name, safe='')}")


def as_role(pg_dsn: str, role: str) -> str:
    """``pg_dsn`` logging in as ``role`` rather than as the tests' superuser."""
    return pg_dsn.replace("postgresql://postgres@", f"postgresql://{role}@", 1)


@asynccontextmanager
async def login_role(pg_dsn: str, prefix: str) -> AsyncIterator[str]:
    """A login role named ``prefix_<random>`` holding nothing; afterwards what it was granted
    or came to own in ``pg_dsn``'s database is dropped, its sessions still open are ended,
    then the role is dropped."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(PG_ADMIN_DSN)
    try:
        await admin.execute(f'CREATE ROLE "{name}" LOGIN')
        try:
            yield name
        finally:
            conn = await asyncpg.connect(pg_dsn)
            try:
                await conn.execute(f'DROP OWNED BY "{name}"')
            finally:
                await conn.close()
    finally:
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", name
        )
        await admin.execute(f'DROP ROLE IF EXISTS "{name}"')
        await admin.close()

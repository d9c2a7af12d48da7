"""``reaper demo``: the whole product on the configured services, in under a minute.

It makes a database and a vhost of its own on the configured PostgreSQL server and broker
(named ``queue_reaper_demo_<random>``, both), migrates the database, seeds the scenario of
:mod:`reaper.demo.scenario` on both sides, then runs what an operator runs:

1. a dry-run audit (``reaper reap --dry-run``): everything judged, nothing written;
2. a real pass (``reaper reap``): leases requeued, poison and dead letters parked, the drifted
   policy put back, every finding recorded in the ledger;
3. a second real pass: nothing new to record (the ledger's event count does not move);
4. outbox dispatch (:mod:`reaper.demo.outbox`): the same database given the schema of a host
   that dispatches through RabbitMQ, where a job whose worker died is requeued at a new
   dispatch generation, published again by the host's relay and run by another worker.

Each pass's report is printed as ``reaper reap`` prints it, with the ledger's event count
before and after. By default the database and vhost are kept for a person to look at, and the
end says where to look and how to remove them; with ``cleanup`` (``reaper demo --cleanup``)
both are removed at the end, and the end says so.

Exit 0 when the demo ran (its passes find problems on purpose); 1, with a one-line reason,
when a service cannot be reached or the scenario cannot be seeded.
"""

from __future__ import annotations

import secrets
import shlex
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from urllib.parse import quote, urlsplit, urlunsplit

from reaper.broker.client import ManagementClient
from reaper.config import Settings
from reaper.demo.admin import (
    create_database,
    create_vhost,
    delete_vhost,
    drop_database,
    run_scenario_query,
)
from reaper.demo.outbox import outbox_step
from reaper.demo.scenario import Scenario
from reaper.demo.seed import seed
from reaper.edges.report import render_text
from reaper.errors import ReaperError
from reaper.jobqueue.postgres import PostgresStore
from reaper.reap.result import PassResult
from reaper.reap.run import reap_once
from reaper.schema.migrations import migrate

__all__ = ["demo_dsn", "run_demo"]

EXIT_OK, EXIT_NOT_OK = 0, 1

_WIDTH = 92


def demo_dsn(dsn: str, database: str) -> str:
    """``dsn`` pointing at ``database`` instead (user, host, port and options kept)."""
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path="/" + database))


def _banner(title: str) -> str:
    return f"\n{'=' * 3} {title} {'=' * max(3, _WIDTH - len(title) - 5)}"


async def run_demo(
    settings: Settings, *, out: Callable[[str], None] = print, cleanup: bool = False
) -> int:
    """Run the demo against the services ``settings`` names; see the module docstring."""
    started = time.monotonic()
    name = f"queue_reaper_demo_{secrets.token_hex(3)}"
    db = settings.database
    bus = settings.bus
    password = db.password.get_secret_value() if db.password else None
    dsn = demo_dsn(db.dsn, name)
    demo = settings.model_copy(
        update={
            "database": db.model_copy(update={"dsn": dsn}),
            "bus": bus.model_copy(update={"vhost": name}),
        }
    )
    where_db = urlsplit(db.dsn).netloc or "the configured server"

    out(_banner("queue-reaper demo").lstrip("\n"))  # the first line of the output, not a blank
    out(f"PostgreSQL {where_db}, RabbitMQ {bus.urls_in_force()[0]}: database and vhost {name}")

    try:
        await create_database(db.dsn, name, password=password)
    except ReaperError as exc:
        print(f"reaper demo: cannot create the demo database: {exc.reason}", file=sys.stderr)
        return EXIT_NOT_OK
    client = ManagementClient(
        bus.urls_in_force(),
        bus.username,
        bus.password.get_secret_value(),
        vhost=name,
        timeout_seconds=bus.timeout_seconds,
    )
    try:
        try:
            await _check_administrator(client)
            await create_vhost(client, name)
        except ReaperError as exc:
            await _drop_quietly(db.dsn, name, password)
            print(f"reaper demo: cannot create the demo vhost: {exc.reason}", file=sys.stderr)
            return EXIT_NOT_OK
        try:
            seeded = await _prepare(demo, client, dsn, password)
        except ReaperError as exc:
            await _drop_quietly(db.dsn, name, password)
            await _delete_quietly(client, name)
            print(f"reaper demo: cannot seed the scenario: {exc.reason}", file=sys.stderr)
            return EXIT_NOT_OK
    finally:
        await client.aclose()

    first, *rest = seeded.describe()
    out(f"\nSeeded in {time.monotonic() - started:.1f} s: {first}")
    for line in rest:
        out(f"  {line}")

    steps = (
        ("1. Dry-run audit: reaper reap --dry-run (judges everything, writes nothing)", True),
        ("2. A real pass: reaper reap", False),
        ("3. A second real pass, moments later: reaper reap", False),
    )
    counts: list[tuple[int, int]] = []
    for title, dry_run in steps:
        out(_banner(title))
        before = await _event_count(dsn, password)
        result = await reap_once(demo, dry_run=dry_run)
        after = await _event_count(dsn, password)
        counts.append((before, after))
        text = render_text(result)
        # the second pass finds what the first did: its status says so, and the ledger line
        out(text if dry_run or len(counts) == 2 else text.splitlines()[0])
        out(_ledger_line(before, after, result))

    out(_banner("4. Outbox dispatch: a requeued job is dispatched again and runs"))
    client = ManagementClient(
        bus.urls_in_force(),
        bus.username,
        bus.password.get_secret_value(),
        vhost=name,
        timeout_seconds=bus.timeout_seconds,
    )
    try:
        await outbox_step(demo, client, password, out)
    except ReaperError as exc:
        print(f"reaper demo: the outbox step failed: {exc.reason}", file=sys.stderr)
        if cleanup:
            await _remove(settings, client, name, password, out)
        return EXIT_NOT_OK
    finally:
        if not cleanup:
            await client.aclose()

    if cleanup:
        try:
            return await _remove(settings, client, name, password, out)
        finally:
            await client.aclose()
    out(_banner("Where to look"))
    for line in _where_to_look(settings, name, dsn, counts, time.monotonic() - started):
        out(line)
    return EXIT_OK


async def _remove(
    settings: Settings,
    client: ManagementClient,
    name: str,
    password: str | None,
    out: Callable[[str], None],
) -> int:
    """``--cleanup``: drop the demo's database and delete its vhost; 1 if either remains."""
    out(_banner("Cleanup: --cleanup removes the demo's database and vhost"))
    removed = True
    try:
        await drop_database(settings.database.dsn, name, password=password)
        out(f"database {name}: dropped")
    except ReaperError as exc:
        removed = False
        print(f"reaper demo: could not drop database {name}: {exc.reason}", file=sys.stderr)
    try:
        await delete_vhost(client, name)
        out(f"vhost {name}: deleted")
    except ReaperError as exc:
        removed = False
        print(f"reaper demo: could not delete vhost {name}: {exc.reason}", file=sys.stderr)
    return EXIT_OK if removed else EXIT_NOT_OK


async def _check_administrator(client: ManagementClient) -> None:
    """A wrong password is told as such (a refused write would blame the user's tags), and
    a user who may not create a vhost is told so before anything is tried."""
    me = await client.whoami()
    tags = me.get("tags")
    names = tags if isinstance(tags, list) else str(tags or "").split(",")
    if "administrator" not in [str(t).strip() for t in names]:
        raise ReaperError(
            f"user {client.username!r} cannot create the demo's vhost: it needs the "
            "'administrator' tag (or run the demo as a user that has it)"
        )


async def _prepare(
    demo: Settings, client: ManagementClient, dsn: str, password: str | None
) -> Scenario:
    store = await PostgresStore.connect(dsn, password=password, pool_size=2)
    try:
        await migrate(store.database)
        return await seed(store, client, now=datetime.now(UTC), settings=demo)
    finally:
        await store.close()


async def _event_count(dsn: str, password: str | None) -> int:
    store = await PostgresStore.connect(dsn, password=password, pool_size=1)
    try:
        rows = await run_scenario_query(store, "scenario_count_events")
    finally:
        await store.close()
    return int(rows[0]["events"])


def _ledger_line(before: int, after: int, result: PassResult) -> str:
    new = after - before
    if result.dry_run:
        verdict = "nothing written, as promised" if new == 0 else f"{new} WRITTEN (a defect)"
    elif new == 0:
        verdict = "no new event: every finding is already on record, nothing left to move"
    else:
        verdict = f"{new} new event(s)"
    return f"Ledger: {before} event(s) before, {after} after: {verdict}"


def _where_to_look(
    settings: Settings, name: str, dsn: str, counts: list[tuple[int, int]], elapsed: float
) -> list[str]:
    env = f"export REAPER_DATABASE__DSN={shlex.quote(dsn)} REAPER_BUS__VHOST={name}"
    url = settings.bus.urls_in_force()[0].rstrip("/")
    admin = shlex.quote(settings.database.dsn)
    dry, first, second = (after - before for before, after in counts)
    return [
        f"Finished in {elapsed:.1f} s; ledger events by pass: {dry}, {first}, {second}. Kept: "
        f"database and vhost {name} (`reaper demo --cleanup` removes them)",
        f"  {env}",
        "  then: reaper events (the ledger), reaper gates list (what waits for a person), "
        "reaper reap -o wide --metrics-textfile demo.prom (every detail, metrics)",
        f"  to remove them: psql {admin} -c {shlex.quote(f'DROP DATABASE {name} WITH (FORCE)')}",
        f"                  curl -u {shlex.quote(settings.bus.username)} -X DELETE "
        f"{url}/api/vhosts/{quote(name, safe='')}",
    ]


async def _drop_quietly(admin_dsn: str, name: str, password: str | None) -> None:
    try:
        await drop_database(admin_dsn, name, password=password)
    except ReaperError as exc:
        print(f"reaper demo: could not drop database {name}: {exc.reason}", file=sys.stderr)


async def _delete_quietly(client: ManagementClient, name: str) -> None:
    try:
        await delete_vhost(client, name)
    except ReaperError as exc:
        print(f"reaper demo: could not delete vhost {name}: {exc.reason}", file=sys.stderr)

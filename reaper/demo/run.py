"""``reaper demo``: the whole product on the configured services, in under a minute.

It makes a database and a vhost of its own (``queue_reaper_demo_<random>``, both), seeds the
scenario of :mod:`reaper.demo.scenario`, then runs what an operator runs: a dry-run audit, a
real pass, a second real pass that records nothing new, and outbox dispatch
(:mod:`reaper.demo.outbox`). It yields what happens as it happens, as values (a line said, a
pass and its ledger count, the exit code); the edge prints them, each pass's report as ``reaper
reap`` prints it. The database and vhost are kept for a person to look at unless ``cleanup``.
Exit 0 when the demo ran (its passes find problems on purpose), 1 when a service cannot be
reached or the scenario cannot be seeded. ``docs/architecture.md`` ("The demo") says more.
"""

from __future__ import annotations

import secrets
import shlex
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import quote, urlsplit, urlunsplit

from reaper.broker.client import ManagementClient
from reaper.config import Settings
from reaper.config.connections import BusSettings
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
from reaper.errors import ReaperError
from reaper.jobqueue.postgres import PostgresStore
from reaper.reap.result import PassResult
from reaper.reap.run import reap_once
from reaper.schema.migrations import migrate

__all__ = ["DemoPass", "DemoStep", "Finished", "Said", "demo_dsn", "run_demo"]

EXIT_OK, EXIT_NOT_OK = 0, 1

_WIDTH = 92


@dataclass(frozen=True)
class Said:
    """A line the demo says; ``trouble``: what went wrong (the edge writes it to stderr)."""

    text: str
    trouble: bool = False


@dataclass(frozen=True)
class DemoPass:
    """One of the demo's passes: its result, shown whole or by its status line alone, and
    what the ledger counted before and after it."""

    result: PassResult
    whole: bool
    ledger: str


@dataclass(frozen=True)
class Finished:
    """The demo's end, with its exit code."""

    exit_code: int


DemoStep = Said | DemoPass | Finished


def demo_dsn(dsn: str, database: str) -> str:
    """``dsn`` pointing at ``database`` instead (user, host, port and options kept)."""
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path="/" + database))


def _banner(title: str) -> str:
    return f"\n{'=' * 3} {title} {'=' * max(3, _WIDTH - len(title) - 5)}"


def _trouble(text: str) -> Said:
    return Said(f"reaper demo: {text}", trouble=True)


def _client(bus: BusSettings, vhost: str) -> ManagementClient:
    return ManagementClient(
        bus.urls_in_force(),
        bus.username,
        bus.password.get_secret_value(),
        vhost=vhost,
        timeout_seconds=bus.timeout_seconds,
    )


async def run_demo(settings: Settings, *, cleanup: bool = False) -> AsyncIterator[DemoStep]:
    """Run the demo against the services ``settings`` names, yielding each step as it
    happens; the last is :class:`Finished`. See the module docstring."""
    started = time.monotonic()
    name = f"queue_reaper_demo_{secrets.token_hex(3)}"
    db, bus = settings.database, settings.bus
    password = db.password.get_secret_value() if db.password else None
    dsn = demo_dsn(db.dsn, name)
    demo = settings.model_copy(
        update={
            "database": db.model_copy(update={"dsn": dsn}),
            "bus": bus.model_copy(update={"vhost": name}),
        }
    )
    where_db = urlsplit(db.dsn).netloc or "the configured server"
    yield Said(_banner("queue-reaper demo").lstrip("\n"))  # the first line, not a blank
    yield Said(
        f"PostgreSQL {where_db}, the broker's management API {bus.urls_in_force()[0]}: "
        f"database and vhost {name}"
    )

    seeded = await _set_up(settings, demo, name, password)
    if not isinstance(seeded, Scenario):
        for said in seeded:
            yield said
        yield Finished(EXIT_NOT_OK)
        return
    first, *rest = seeded.describe()
    yield Said(f"\nSeeded in {time.monotonic() - started:.1f} s: {first}")
    for line in rest:
        yield Said(f"  {line}")

    counts: list[tuple[int, int]] = []
    async for step in _passes(demo, password, counts):
        yield step

    yield Said(_banner("4. Outbox dispatch: a requeued job is dispatched again and runs"))
    client = _client(bus, name)
    try:
        failed = False
        try:
            async for line in outbox_step(demo, client, password):
                yield Said(line)
        except ReaperError as exc:
            failed = True
            yield _trouble(f"the outbox step failed: {exc.reason}")
        if cleanup:
            removed = True
            async for said in _remove(settings, client, name, password):
                removed = removed and not said.trouble
                yield said
            yield Finished(EXIT_NOT_OK if failed or not removed else EXIT_OK)
            return
    finally:
        await client.aclose()
    if failed:
        yield Finished(EXIT_NOT_OK)
        return
    yield Said(_banner("Where to look"))
    for line in _where_to_look(settings, name, dsn, counts, time.monotonic() - started):
        yield Said(line)
    yield Finished(EXIT_OK)


async def _set_up(
    settings: Settings, demo: Settings, name: str, password: str | None
) -> Scenario | list[Said]:
    """Create the demo's database and vhost and seed the scenario; or why not (and nothing of
    the demo's left behind)."""
    db = settings.database
    try:
        await create_database(db.dsn, name, password=password)
    except ReaperError as exc:
        return [_trouble(f"cannot create the demo database: {exc.reason}")]
    client = _client(settings.bus, name)
    try:
        try:
            await _check_administrator(client)
            await create_vhost(client, name)
        except ReaperError as exc:
            dropped = await _drop_quietly(db.dsn, name, password)
            return [*dropped, _trouble(f"cannot create the demo vhost: {exc.reason}")]
        try:
            return await _prepare(demo, client, demo.database.dsn, password)
        except ReaperError as exc:
            left = await _drop_quietly(db.dsn, name, password)
            left += await _delete_quietly(client, name)
            return [*left, _trouble(f"cannot seed the scenario: {exc.reason}")]
    finally:
        await client.aclose()


async def _passes(
    demo: Settings, password: str | None, counts: list[tuple[int, int]]
) -> AsyncIterator[DemoStep]:
    """The dry-run audit and two real passes, each with the ledger's count around it."""
    steps = (
        ("1. Dry-run audit: reaper reap --dry-run (judges everything, writes nothing)", True),
        ("2. A real pass: reaper reap", False),
        ("3. A second real pass, moments later: reaper reap", False),
    )
    dsn = demo.database.dsn
    for title, dry_run in steps:
        yield Said(_banner(title))
        before = await _event_count(dsn, password)
        result = await reap_once(demo, dry_run=dry_run)
        after = await _event_count(dsn, password)
        counts.append((before, after))
        # the second pass finds what the first did: its status says so, and the ledger line
        yield DemoPass(result, dry_run or len(counts) == 2, _ledger_line(before, after, result))


async def _remove(
    settings: Settings, client: ManagementClient, name: str, password: str | None
) -> AsyncIterator[Said]:
    """``--cleanup``: drop the demo's database and delete its vhost; trouble if either remains."""
    yield Said(_banner("Cleanup: --cleanup removes the demo's database and vhost"))
    try:
        await drop_database(settings.database.dsn, name, password=password)
        yield Said(f"database {name}: dropped")
    except ReaperError as exc:
        yield _trouble(f"could not drop database {name}: {exc.reason}")
    try:
        await delete_vhost(client, name)
        yield Said(f"vhost {name}: deleted")
    except ReaperError as exc:
        yield _trouble(f"could not delete vhost {name}: {exc.reason}")


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
        f"database and vhost {name} (`reaper demo --cleanup` removes its own at the end)",
        f"  {env}",
        "  then: reaper events (the ledger), reaper gates list (what waits for a person), "
        "reaper reap -o wide --metrics-textfile demo.prom (every detail, metrics)",
        f"  to remove them: psql {admin} -c {shlex.quote(f'DROP DATABASE {name} WITH (FORCE)')}",
        f"                  curl -u {shlex.quote(settings.bus.username)} -X DELETE "
        f"{url}/api/vhosts/{quote(name, safe='')}",
    ]


async def _drop_quietly(admin_dsn: str, name: str, password: str | None) -> list[Said]:
    try:
        await drop_database(admin_dsn, name, password=password)
    except ReaperError as exc:
        return [_trouble(f"could not drop database {name}: {exc.reason}")]
    return []


async def _delete_quietly(client: ManagementClient, name: str) -> list[Said]:
    try:
        await delete_vhost(client, name)
    except ReaperError as exc:
        return [_trouble(f"could not delete vhost {name}: {exc.reason}")]
    return []

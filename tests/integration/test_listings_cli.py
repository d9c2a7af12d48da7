"""``reaper events`` and ``reaper gates list`` as a person reads them, on real PostgreSQL: every
id option takes the short id the outputs print (``fleet`` for the fleet's stream), a prefix
two share is refused naming both, a word outside the vocabulary is refused with the nearest,
a listing cut at its limit says how many it left out and how to see them, and ``-o`` gives a
table with a header row, whole ids (wide), JSON with UTC ``Z`` times, or bare names."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest

from reaper.core.canonical import canonical_json, digest_of
from reaper.core.domain import FLEET_PROJECT_ID
from reaper.jobqueue.ledger import Event, append
from reaper.jobqueue.postgres import PostgresStore
from tests.integration.test_gates_cli import park
from tests.support.cli import Cli
from tests.support.store import query

pytestmark = pytest.mark.postgres

ONE = uuid.UUID("0bf57da4-0000-4000-8000-000000000001")
TWIN = uuid.UUID("0bf57da5-0000-4000-8000-000000000002")


async def verdicts(store: PostgresStore, stream: uuid.UUID, n: int, condition: str) -> None:
    """``n`` QueueReaped events on ``stream``, as a pass appends them."""
    events = []
    for i in range(n):
        canonical = canonical_json(
            {"source": "broker", "condition": condition, "action": "surface", "object": f"q{i}"}
        )
        events.append(Event(stream, canonical, digest_of(canonical), True))
    now = (await store.database_facts()).now - timedelta(minutes=5)
    async with store.database.session("appending test events") as conn, conn.transaction():
        await append(conn, events, now)


@pytest.fixture
async def ledger(store: PostgresStore, pg_dsn: str) -> uuid.UUID:
    """Two projects whose ids share 7 hex digits, the fleet's stream, and a poison park: the
    parked job's id."""
    await verdicts(store, ONE, 3, "stale_ready")
    await verdicts(store, TWIN, 2, "stale_ready")
    await verdicts(store, FLEET_PROJECT_ID, 4, "unbounded")
    gate = await park(store, pg_dsn, 2, "render.video")
    [(job,)] = await query(pg_dsn, "SELECT job_id FROM human_gate WHERE id = $1", gate)
    return job  # type: ignore[no-any-return]


async def test_events_take_the_ids_the_outputs_print(
    ledger: uuid.UUID,
    pg_dsn: str,
    db_cli: Cli,
) -> None:
    lines = (await db_cli.out("events", "--project", "0bf57da4")).splitlines()
    assert lines[-1] == "3 events, newest last"
    assert all(line.split()[1].startswith("0bf57da4#") for line in lines[:-1])

    err = await db_cli.err("events", "--project", "0bf57da")
    assert "'0bf57da' names more than one project" in err and str(ONE) in err and str(TWIN) in err
    err = await db_cli.err("events", "--project", "0bf57da9")
    assert "no project in the ledger has an id starting '0bf57da9'" in err

    lines = (await db_cli.out("events", "--project", "fleet")).splitlines()
    assert lines[-1] == "4 events, newest last"
    assert all(line.split()[1].startswith("fleet#") for line in lines[:-1])
    assert "00000000-0000" not in "".join(lines)

    # the park's event names the job: its 8-hex prefix finds it, and only it
    short = ledger.hex[:8]
    lines = (await db_cli.out("events", "--object", short)).splitlines()
    assert lines[-1] == "1 event, newest last" and f"poison park  {short}" in lines[0]
    *_, last = (await db_cli.out("events", "--object", "q1")).splitlines()
    assert last == "3 events, newest last"


async def test_an_event_kind_outside_the_ledger_is_refused_with_the_nearest(
    ledger: uuid.UUID,
    pg_dsn: str,
    db_cli: Cli,
) -> None:
    err = await db_cli.err("events", "--kind", "gateanswered")
    assert "no event kind 'gateanswered': did you mean GateAnswered?" in err
    # a host's own kind is taken where the ledger holds it
    await query(
        pg_dsn,
        "INSERT INTO event (project_id, seq, kind, payload, digest) "
        "VALUES ($1, 99, 'JobCreated', '{}', repeat('ab', 32))",
        ONE,
    )
    *_, last = (await db_cli.out("events", "--kind", "JobCreated")).splitlines()
    assert last == "1 event, newest last"


async def test_a_listing_cut_at_its_limit_says_so_and_how_to_see_the_rest(
    ledger: uuid.UUID,
    pg_dsn: str,
    db_cli: Cli,
) -> None:
    [(total,)] = await query(pg_dsn, "SELECT count(*) FROM event")
    assert total == 10

    lines = (await db_cli.out("events", "--limit", "4")).splitlines()
    assert len(lines) == 5
    assert lines[-1] == (
        "showing the newest 4 of 10 events, newest last: --limit 10 shows them all "
        "(or narrow with --since, --project, --kind, --object)"
    )
    *_, last = (await db_cli.out("events", "--source", "broker")).splitlines()
    assert last == "9 events, newest last"
    *_, last = (await db_cli.out("events", "--action", "park")).splitlines()
    assert last == "1 event, newest last"


async def test_events_in_each_output(
    ledger: uuid.UUID,
    pg_dsn: str,
    db_cli: Cli,
) -> None:
    wide = await db_cli.out("events", "-o", "wide")
    assert f"{ONE}#1" in wide and f"poison park  {ledger}" in wide and "fleet#1" in wide
    names = (await db_cli.out("events", "-o", "name")).split()
    assert len(names) == 10 and f"{ONE}#3" in names and f"{FLEET_PROJECT_ID}#4" in names
    listed = json.loads(await db_cli.out("events", "-o", "json"))
    assert all(e["created_at"].endswith("Z") for e in listed)
    assert {e["project"] for e in listed if e["project_id"] == str(FLEET_PROJECT_ID)} == {"fleet"}


async def test_gates_list_in_each_output(
    ledger: uuid.UUID,
    store: PostgresStore,
    pg_dsn: str,
    db_cli: Cli,
) -> None:
    [(gate, project)] = await query(pg_dsn, "SELECT id, project_id FROM human_gate")

    out = (await db_cli.out("gates", "list", "--kind", "poison")).splitlines()
    assert out[0].split() == ["GATE", "AGE", "PROJECT", "KIND", "JOB", "KIND", "STATE"]
    assert out[1].split()[:4] == [gate.hex[:8], "2h00m", project.hex[:8], "delivery_exhausted"]
    assert "1 open gate, the oldest 2h00m old (--kind delivery_exhausted)" in out

    args = ("gates", "list", "--project", project.hex[:8], "-o", "wide")
    wide = await db_cli.out(*args)
    assert wide.splitlines()[1].startswith(f"{gate}  2h00m  {project}  delivery_exhausted")

    assert (await db_cli.out("gates", "list", "-o", "name")).split() == [str(gate)]
    [listed] = json.loads(await db_cli.out("gates", "list", "-o", "json"))
    assert listed["created_at"].endswith("Z") and listed["project"] == str(project)

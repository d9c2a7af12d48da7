"""``reaper gates list|show|answer`` and ``reaper events`` on real PostgreSQL, as a person runs
them: oldest first with a short id, its age and the command for each answer; any unique prefix
names a gate and an ambiguous one is refused naming both; an answer is one ledger line; the
ledger is read from its indexes whatever its age."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from reaper.jobqueue.postgres import PostgresStore
from reaper.jobqueue.sql import QUERIES
from tests.support.cli import Cli
from tests.support.store import insert_jobs, leased, query, reap_page

pytestmark = pytest.mark.postgres


async def park(store: PostgresStore, dsn: str, hours_ago: float, kind: str) -> uuid.UUID:
    """A poison job parked ``hours_ago`` (by the database's clock): its gate's id."""
    now = (await store.database_facts()).now - timedelta(hours=hours_ago)
    job = replace(leased(uuid.uuid4(), attempts=7, max_attempts=7, now=now), kind=kind)
    await insert_jobs(dsn, [job])
    await reap_page(store, now, project_id=job.project_id)  # this job's project alone
    [(gate_id,)] = await query(dsn, "SELECT id FROM human_gate WHERE job_id = $1", job.id)
    return gate_id  # type: ignore[no-any-return]


def old_identity(shown: str) -> str:
    """The identity line of ``gates show``: a gate's identity keeps its first-written form."""
    return next(line for line in shown.splitlines() if line.startswith("  identity:"))


async def test_a_person_works_through_the_gates(
    pg_dsn: str, store: PostgresStore, db_cli: Cli
) -> None:
    old = await park(store, pg_dsn, 3, "render.video")
    new = await park(store, pg_dsn, 0.1, "mail.send")

    out = await db_cli.out("gates", "list")
    assert out.index(old.hex[:8]) < out.index(new.hex[:8])  # oldest first
    assert f"reaper gates answer {old.hex[:8]} --choice retry" in out
    assert f"reaper gates answer {old.hex[:8]} --choice cancel" in out
    assert out.startswith("GATE      AGE    PROJECT   KIND                JOB KIND")
    assert "  3h00m  " in out and '  "render.video"  open' in out
    assert "2 open gates, the oldest 3h00m old" in out

    out = await db_cli.out("gates", "list", "--older-than", "1h")
    assert old.hex[:8] in out and new.hex[:8] not in out
    assert "1 open gate, the oldest 3h00m old (--older-than 1h)" in out
    assert "not a duration: '1x'" in await db_cli.err("gates", "list", "--older-than", "1x")
    listed = json.loads(await db_cli.out("gates", "list", "--json"))
    assert [g["short_id"] for g in listed] == [old.hex[:8], new.hex[:8]]
    assert listed[0]["choices"] == ["retry", "cancel"] and listed[0]["job_kind"] == "render.video"
    out = await db_cli.out("gates", "list", "--kind", "bus_dead_lettered")
    assert out.startswith("0 open gates")

    shown = await db_cli.out("gates", "show", old.hex[:6])
    assert f"gate {old} (short {old.hex[:8]})" in shown and "Answer 'retry'" in shown

    # --dry-run: says what it would do, writes nothing
    before = await query(pg_dsn, "SELECT count(*) FROM event")
    out = await db_cli.out("gates", "answer", old.hex[:8], "--choice", "cancel", "--dry-run")
    assert "would end cancelled, never delivered again" in out
    assert await query(pg_dsn, "SELECT count(*) FROM event") == before
    [(open_,)] = await query(
        pg_dsn, "SELECT answered_at IS NULL FROM human_gate WHERE id = $1", old
    )
    assert open_

    args = ("gates", "answer", old.hex[:8], "--choice", "cancel")
    out = await db_cli.out(*args, "--by", "ana@ops", "--reason", "upstream deleted")
    assert "cancelled; it is never delivered again" in out
    [(by, state, finished)] = await query(
        pg_dsn,
        "SELECT g.answered_by, j.state, j.finished_at IS NOT NULL FROM human_gate g "
        "JOIN job j ON j.id = g.job_id WHERE g.id = $1",
        old,
    )
    assert (by, state, finished) == ("ana@ops", "cancelled", True)
    # every time a person reads is UTC with Z, the answer's and the refusal's alike
    shown = await db_cli.out("gates", "show", old.hex[:8])
    assert re.search(r"raised:   \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(3h00m ago\)", shown)
    assert re.search(r"answered 'cancel' at \S+Z by ana@ops", shown)
    assert "+00:00" not in shown.replace(old_identity(shown), "")
    args = ("gates", "answer", old.hex[:8], "--choice", "retry")
    assert re.search(r"already answered at \S+Z with 'cancel'", await db_cli.err(*args))

    # the default answerer is the OS user and host
    await db_cli.out("gates", "answer", str(new), "--choice", "retry")
    [(by,)] = await query(pg_dsn, "SELECT answered_by FROM human_gate WHERE id = $1", new)
    assert "@" in by

    lines = (await db_cli.out("events", "--kind", "GateAnswered")).splitlines()
    assert len(lines) == 3 and lines[-1] == "2 events, newest last"
    assert f"gate {old.hex[:8]} (delivery_exhausted) cancel by ana@ops" in lines[0]
    assert 'reason "upstream deleted"' in lines[0]
    assert f"gate {new.hex[:8]} (delivery_exhausted) retry by {by}" in lines[1]
    recent = json.loads(await db_cli.out("events", "--since", "1h", "--json"))
    assert [e["kind"] for e in recent] == ["QueueReaped", "GateAnswered", "GateAnswered"]
    assert "not an age" in await db_cli.err("events", "--since", "soon")


async def test_an_ambiguous_prefix_is_refused_naming_the_candidates(
    pg_dsn: str, db_cli: Cli
) -> None:
    one = uuid.UUID("abcdef01-0000-4000-8000-000000000001")
    two = uuid.UUID("abcdef02-0000-4000-8000-000000000002")
    for gate_id in (one, two):
        await query(
            pg_dsn,
            "INSERT INTO human_gate (id, project_id, kind, prompt, choices) "
            "VALUES ($1, $2, 'delivery_exhausted', 'q', '[\"retry\"]') RETURNING id",
            gate_id,
            uuid.uuid4(),
        )

    err = await db_cli.err("gates", "answer", "abcdef0", "--choice", "retry")

    assert "'abcdef0' names more than one gate" in err and str(one) in err and str(two) in err
    [(events,)] = await query(pg_dsn, "SELECT count(*) FROM event")
    assert events == 0
    assert f"gate {two}" in await db_cli.out("gates", "show", "abcdef02")
    err = await db_cli.err("gates", "show", "abcdef03")
    assert "gate with an id starting 'abcdef03' does not exist" in err
    assert "not a gate id or a prefix" in await db_cli.err("gates", "show", "xyz")


QUIET = uuid.UUID("11111111-0000-4000-8000-000000000000")

READS = [
    ("newest", {}, "event_created_idx"),
    ("since", {"since": True}, "event_created_idx"),
    ("a quiet project", {"project_id": QUIET}, "event_project_created_idx"),
    ("answers", {"kind": "GateAnswered"}, "event_not_verdict_idx"),
    ("a rare condition", {"condition": "poison"}, "event_condition_idx"),
    ("one object", {"object": "job-59000"}, "event_object_idx"),
]


@pytest.mark.parametrize(("what", "chosen", "index"), READS, ids=[r[0] for r in READS])
async def test_the_ledger_is_read_from_its_indexes(
    pg_dsn: str, what: str, chosen: dict[str, object], index: str
) -> None:
    # a ledger with history: 60,000 verdicts over 60 days across 50 streams, and a project
    # that went quiet two months ago
    await query(
        pg_dsn,
        "INSERT INTO event (project_id, seq, kind, payload, digest, created_at) "
        "SELECT ('00000000-0000-4000-8000-' || lpad((i % 50)::text, 12, '0'))::uuid, "
        "       i / 50 + 1, 'QueueReaped', "
        "       jsonb_build_object('object', 'job-' || i, 'condition', 'lease_expired'), "
        "       repeat('ab', 32), now() - make_interval(secs => (60000 - i) * 86.4) "
        "FROM generate_series(0, 59999) AS i "
        "UNION ALL "
        "SELECT $1::uuid, i, 'QueueReaped', '{}'::jsonb, repeat('ab', 32), "
        "       now() - interval '59 days' "
        "FROM generate_series(1, 10) AS i",
        QUIET,
    )
    await query(pg_dsn, "ANALYZE event")
    params = (
        datetime.now(UTC) - timedelta(hours=1) if chosen.get("since") else None,
        chosen.get("project_id"),
        chosen.get("kind"),
        chosen.get("condition"),
        chosen.get("object"),
        None,
        None,
        20,
    )
    plan = await query(pg_dsn, f"EXPLAIN (FORMAT JSON) {QUERIES['read_events']}", *params)
    text = json.dumps(json.loads(plan[0][0]))
    assert index in text, text
    assert "Seq Scan" not in text, text


async def test_a_pass_that_parks_twenty_gives_the_commands_that_list_and_answer_exactly_them(
    pg_dsn: str, store: PostgresStore, db_cli: Cli
) -> None:
    earlier = await park(store, pg_dsn, 1, "render.video")  # an earlier pass's gate
    now = (await store.database_facts()).now
    project = uuid.uuid4()
    await insert_jobs(
        pg_dsn,
        [leased(project, attempts=7, max_attempts=7, now=now) for _ in range(20)],
    )
    # the broker is unreachable (the pass is not ok), and the parks are done all the same
    report = (await db_cli.out("reap", code=1)).splitlines()
    assert any("park     poison        20 job(s) in 1 project(s)" in line for line in report)
    listed = [line.strip() for line in report if line.strip().startswith("their gates: ")]
    answer = [line.strip() for line in report if line.strip().startswith("answer them at once:")]
    assert len(listed) == len(answer) == 1
    command = listed[0].split(": ", 1)[1].removesuffix(" (with any raised since)").split()
    assert command[:5] == ["reaper", "gates", "list", "--kind", "poison"]

    names = {uuid.UUID(line) for line in (await db_cli.out(*command[1:], "-o", "name")).split()}
    raised = await query(
        pg_dsn, "SELECT g.id FROM human_gate g JOIN job j ON j.id = g.job_id "
        "WHERE j.project_id = $1", project,
    )  # fmt: skip
    assert names == {gate_id for (gate_id,) in raised} and len(names) == 20
    assert earlier not in names

    take = answer[0].split(": ", 1)[1].removesuffix(" (or cancel)").split()
    assert take[-2:] == ["--choice", "retry"]
    out = await db_cli.out(*take[1:], "--yes", "--by", "ana")
    assert "20 of 20 gate(s) answered 'retry'" in out
    [(still_open,)] = await query(
        pg_dsn, "SELECT answered_at IS NULL FROM human_gate WHERE id = $1", earlier
    )
    assert still_open


async def _expire_and_reap(store: PostgresStore, dsn: str, job: uuid.UUID, owner: str) -> None:
    """``job`` claimed by ``owner`` (one more attempt spent), its lease run out, then reaped."""
    now = (await store.database_facts()).now
    await query(
        dsn,
        "UPDATE job SET state = 'leased', lease_owner = $2, attempts = attempts + 1, "
        "lease_expires_at = $3 WHERE id = $1",
        job,
        owner,
        now - timedelta(minutes=2),
    )
    await reap_page(store, now)  # the only expired lease


async def test_gates_show_of_a_poison_job_tells_its_history_from_the_ledger(
    pg_dsn: str, store: PostgresStore, db_cli: Cli
) -> None:
    job = replace(leased(uuid.uuid4(), attempts=4, max_attempts=7), kind="render.video")
    await insert_jobs(pg_dsn, [replace(job, state="ready", lease_owner=None)])
    for owner in ("worker-a/pid-1", "worker-b/pid-2", "worker-c/pid-3\x1b[2J"):
        await _expire_and_reap(store, pg_dsn, job.id, owner)  # requeue, requeue, park
    [(gate,)] = await query(pg_dsn, "SELECT id FROM human_gate WHERE job_id = $1", job.id)
    args = ("gates", "answer", gate.hex[:8], "--choice", "retry", "--by", "ana@ops")
    await db_cli.out(*args, "--reason", "disk full, fixed")

    shown = (await db_cli.out("gates", "show", gate.hex[:8])).splitlines()
    start = shown.index(f"  history of job {job.id.hex[:8]} (the ledger, oldest first):")
    history = [line.strip() for line in shown[start + 1 : start + 5]]
    z = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"

    def q(owner: str) -> str:  # the holder as the judge quotes it, in either quote
        return f"(?:'{owner}'|\"{owner}\")"

    assert re.fullmatch(
        z
        + r"  requeue  lease_expired: lease of render.video job held by "
        + q("worker-a/pid-1")
        + r" "
        r"expired 120(\.\d+)?s ago, past the grace of 0s: requeue \(attempt 5 of 7 spent\)",
        history[0],
    ), history[0]
    assert re.search("held by " + q("worker-b/pid-2"), history[1])
    assert "(attempt 6 of 7 spent)" in history[1]
    # the third holder's name drives no terminal: its escape is shown, not obeyed
    assert re.fullmatch(
        z
        + r"  park     poison: lease of render.video job held by "
        + q(r"worker-c/pid-3\\(?:x1b|u001b)\[2J")
        + r" "
        r"expired 120(\.\d+)?s ago with 7 of 7 attempts spent: park for a person "
        r"\(delivery_exhausted gate\)",
        history[2],
    ), history[2]
    assert re.fullmatch(
        z + f'  answered retry by ana@ops \\(gate {gate.hex[:8]}\\); reason "disk full, fixed"',
        history[3],
    ), history[3]
    assert shown[start + 5] == "  question:"
    assert "\x1b" not in "\n".join(shown)

    shown_json = json.loads(await db_cli.out("gates", "show", gate.hex[:8], "--json"))
    assert [e["payload"].get("action") or e["kind"] for e in shown_json["history"]] == [
        "requeue",
        "requeue",
        "park",
        "GateAnswered",
    ]
    assert shown_json["history_total"] == 4

    # a host's own events about the job count too; past 20, the newest and the command for all
    stream = uuid.uuid4()
    for seq in range(1, 21):
        await query(
            pg_dsn,
            "INSERT INTO event (project_id, seq, kind, payload, digest, trusted, created_at) "
            "VALUES ($1, $2, 'HostRetried', jsonb_build_object('object', $3::text), "
            "repeat('0', 64), false, now())",
            stream,
            seq,
            str(job.id),
        )
    shown = (await db_cli.out("gates", "show", gate.hex[:8])).splitlines()
    start = shown.index(f"  history of job {job.id.hex[:8]} (the ledger, oldest first):")
    assert shown[start + 21].strip() == (
        f"showing the newest 20 of 24: reaper events --object {job.id.hex[:8]} --limit 24"
    )
    assert "  HostRetried  " in shown[start + 20]

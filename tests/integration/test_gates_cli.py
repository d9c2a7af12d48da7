"""``reaper gates list|show|answer`` and ``reaper events`` on real PostgreSQL, as a person runs
them: oldest first with a short id, its age and the command for each answer; any unique prefix
names a gate and an ambiguous one is refused naming both; an answer is one ledger line; the
ledger is read from its indexes whatever its age."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from reaper.jobqueue.postgres import PostgresStore
from reaper.jobqueue.sql import QUERIES
from tests.support.cli import run_cli
from tests.support.store import insert_jobs, leased, query, reap_page

pytestmark = pytest.mark.postgres


def env_of(dsn: str) -> dict[str, str]:
    # no broker is needed to list, show or answer a poison gate: an unreachable URL proves it
    return {"REAPER_DATABASE__DSN": dsn, "REAPER_BUS__MANAGEMENT_URL": "http://127.0.0.1:9"}


async def park(store: PostgresStore, dsn: str, hours_ago: float, kind: str) -> uuid.UUID:
    """A poison job parked ``hours_ago`` (by the database's clock): its gate's id."""
    now = (await store.database_facts()).now - timedelta(hours=hours_ago)
    job = replace(leased(uuid.uuid4(), attempts=7, max_attempts=7, now=now), kind=kind)
    await insert_jobs(dsn, [job])
    await reap_page(store, now, project_id=job.project_id)  # this job's project alone
    [(gate_id,)] = await query(dsn, "SELECT id FROM human_gate WHERE job_id = $1", job.id)
    return gate_id  # type: ignore[no-any-return]


async def test_a_person_works_through_the_gates(
    pg_dsn: str,
    store: PostgresStore,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    old = await park(store, pg_dsn, 3, "render.video")
    new = await park(store, pg_dsn, 0.1, "mail.send")
    env = env_of(pg_dsn)

    assert await run_cli(monkeypatch, tmp_path, env, "gates", "list") == 0
    out = capsys.readouterr().out
    assert out.index(old.hex[:8]) < out.index(new.hex[:8])  # oldest first
    assert f"reaper gates answer {old.hex[:8]} --choice retry" in out
    assert f"reaper gates answer {old.hex[:8]} --choice cancel" in out
    assert out.startswith("GATE      AGE    PROJECT   KIND                JOB KIND")
    assert "  3h00m  " in out and '  "render.video"  open' in out
    assert "2 open gates, the oldest 3h00m old" in out

    assert await run_cli(monkeypatch, tmp_path, env, "gates", "list", "--older-than", "1h") == 0
    out = capsys.readouterr().out
    assert old.hex[:8] in out and new.hex[:8] not in out
    assert "1 open gate, the oldest 3h00m old (--older-than 1h)" in out
    assert await run_cli(monkeypatch, tmp_path, env, "gates", "list", "--older-than", "1x") == 2
    assert "not a duration: '1x'" in capsys.readouterr().err
    assert await run_cli(monkeypatch, tmp_path, env, "gates", "list", "--json") == 0
    listed = json.loads(capsys.readouterr().out)
    assert [g["short_id"] for g in listed] == [old.hex[:8], new.hex[:8]]
    assert listed[0]["choices"] == ["retry", "cancel"] and listed[0]["job_kind"] == "render.video"
    assert (
        await run_cli(monkeypatch, tmp_path, env, "gates", "list", "--kind", "bus_dead_lettered")
        == 0
    )
    assert capsys.readouterr().out.startswith("0 open gates")

    assert await run_cli(monkeypatch, tmp_path, env, "gates", "show", old.hex[:6]) == 0
    shown = capsys.readouterr().out
    assert f"gate {old} (short {old.hex[:8]})" in shown and "Answer 'retry'" in shown

    # --dry-run: says what it would do, writes nothing
    before = await query(pg_dsn, "SELECT count(*) FROM event")
    code = await run_cli(
        monkeypatch,
        tmp_path,
        env,
        "gates",
        "answer",
        old.hex[:8],
        "--choice",
        "cancel",
        "--dry-run",
    )
    assert code == 0
    assert "would end cancelled, never delivered again" in capsys.readouterr().out
    assert await query(pg_dsn, "SELECT count(*) FROM event") == before
    [(open_,)] = await query(
        pg_dsn, "SELECT answered_at IS NULL FROM human_gate WHERE id = $1", old
    )
    assert open_

    code = await run_cli(
        monkeypatch,
        tmp_path,
        env,
        "gates",
        "answer",
        old.hex[:8],
        "--choice",
        "cancel",
        "--by",
        "ana@ops",
        "--reason",
        "upstream deleted",
    )
    assert code == 0
    assert "cancelled; it is never delivered again" in capsys.readouterr().out
    [(by, state, finished)] = await query(
        pg_dsn,
        "SELECT g.answered_by, j.state, j.finished_at IS NOT NULL FROM human_gate g "
        "JOIN job j ON j.id = g.job_id WHERE g.id = $1",
        old,
    )
    assert (by, state, finished) == ("ana@ops", "cancelled", True)

    # the default answerer is the OS user and host
    assert (
        await run_cli(monkeypatch, tmp_path, env, "gates", "answer", str(new), "--choice", "retry")
        == 0
    )
    capsys.readouterr()
    [(by,)] = await query(pg_dsn, "SELECT answered_by FROM human_gate WHERE id = $1", new)
    assert "@" in by

    assert await run_cli(monkeypatch, tmp_path, env, "events", "--kind", "GateAnswered") == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and lines[-1] == "2 events, newest last"
    assert f"gate {old.hex[:8]} (delivery_exhausted) cancel by ana@ops" in lines[0]
    assert 'reason "upstream deleted"' in lines[0]
    assert f"gate {new.hex[:8]} (delivery_exhausted) retry by {by}" in lines[1]
    assert await run_cli(monkeypatch, tmp_path, env, "events", "--since", "1h", "--json") == 0
    recent = json.loads(capsys.readouterr().out)
    assert [e["kind"] for e in recent] == ["QueueReaped", "GateAnswered", "GateAnswered"]
    assert await run_cli(monkeypatch, tmp_path, env, "events", "--since", "soon") == 2
    assert "not an age" in capsys.readouterr().err


async def test_an_ambiguous_prefix_is_refused_naming_the_candidates(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
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
    env = env_of(pg_dsn)

    code = await run_cli(
        monkeypatch, tmp_path, env, "gates", "answer", "abcdef0", "--choice", "retry"
    )

    assert code == 2
    err = capsys.readouterr().err
    assert "'abcdef0' names more than one gate" in err and str(one) in err and str(two) in err
    [(events,)] = await query(pg_dsn, "SELECT count(*) FROM event")
    assert events == 0
    assert await run_cli(monkeypatch, tmp_path, env, "gates", "show", "abcdef02") == 0
    assert f"gate {two}" in capsys.readouterr().out
    assert await run_cli(monkeypatch, tmp_path, env, "gates", "show", "abcdef03") == 2
    assert "gate with an id starting 'abcdef03' does not exist" in capsys.readouterr().err
    assert await run_cli(monkeypatch, tmp_path, env, "gates", "show", "xyz") == 2
    assert "not a gate id or a prefix" in capsys.readouterr().err


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
        20,
        None,
        None,
    )
    plan = await query(pg_dsn, f"EXPLAIN (FORMAT JSON) {QUERIES['read_events']}", *params)
    text = json.dumps(json.loads(plan[0][0]))
    assert index in text, text
    assert "Seq Scan" not in text, text

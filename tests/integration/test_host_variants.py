"""Whole passes inside a host whose schema is its own (SPEC §10): ``state`` and ``phase`` are
enum types, every ``project_id`` references a ``project`` table, and the host created it all
before the reaper ever ran. On real PostgreSQL and one broker, through the command line: the
migration, a pass that requeues, parks, surfaces and parks dead letters, a gate answered, and a
second pass that moves nothing new."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from reaper.core.domain import FLEET_PROJECT_ID
from tests.support.cli import reaper_env, run_cli
from tests.support.host_schema import HOST_WITH_PROJECTS
from tests.support.invariants import wait_for_depth
from tests.support.services import BrokerUnderTest, on_one_broker
from tests.support.store import query

#: The host's schema is the subject; the broker side of a pass is tested per version elsewhere.
pytestmark = [pytest.mark.broker, pytest.mark.postgres, on_one_broker]

DEAD_LETTER_QUEUE = "vibey.jobs.dead"

#: The host's jobs, by name: (phase, state, attempts, lease expired how long ago, or None).
JOBS: dict[str, tuple[str, str, int, str | None]] = {
    "expired": ("build", "leased", 1, "10 minutes"),
    "poison": ("test", "leased", 7, "10 minutes"),
    "live": ("build", "leased", 1, None),
    "stale": ("test", "ready", 0, None),
}


async def host_database(dsn: str) -> dict[str, uuid.UUID]:
    """The host's schema, its project, and its jobs, written as the host writes them."""
    project = uuid.uuid4()
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(HOST_WITH_PROJECTS.replace("PROJECT_COLUMNS", "name text"))
        await conn.execute("INSERT INTO project (id, name) VALUES ($1, 'host')", project)
        ids = {}
        for name, (phase, state, attempts, expired) in JOBS.items():
            ids[name] = await conn.fetchval(
                "INSERT INTO job (project_id, kind, phase, state, attempts, lease_owner,"
                " lease_expires_at, run_after)"
                " VALUES ($1, 'build', $2::job_phase, $3::job_state, $4, $5,"
                " CASE WHEN $3::text = 'leased' THEN now() - coalesce($6::text::interval, '-1 day')"
                " END,"
                " now() - interval '2 hours') RETURNING id",
                project,
                phase,
                state,
                attempts,
                "host-worker" if state == "leased" else None,
                expired,
            )
    finally:
        await conn.close()
    return {"project": project, **ids}


async def test_a_host_with_enum_states_and_a_project_table_is_reaped_end_to_end(
    pg_empty_dsn: str,
    broker: BrokerUnderTest,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ids = await host_database(pg_empty_dsn)
    broker.declare_queue(DEAD_LETTER_QUEUE)
    for n in range(2):
        broker.publish(DEAD_LETTER_QUEUE, f'{{"n": {n}}}', properties={"message_id": f"m-{n}"})
    # The pass judges the queue as the listing shows it, so it is waited for there: a GET of
    # the one queue may show it while a listing asked for soon after an earlier one is the
    # management plugin's cached copy, from before the queue was declared.
    await wait_for_depth(broker, DEAD_LETTER_QUEUE, 2)
    env = reaper_env(
        pg_empty_dsn,
        broker.management_url,
        broker.vhost,
        REAPER_QUEUE__REAP__KNOWN_PHASES='["build", "test"]',
    )

    assert await run_cli(monkeypatch, tmp_path, env, "db", "migrate") == 0
    capsys.readouterr()
    await run_cli(monkeypatch, tmp_path, env, "reap", "--json")
    report: dict[str, Any] = json.loads(capsys.readouterr().out)

    assert report["unreadable"] == [] and report["problems"] is not None
    assert not [p for p in report["problems"] if p["kind"] == "row_not_moved"], report["problems"]
    moved = {
        (v["object"], v["condition"], v["action"])
        for v in report["verdicts"]
        if v["source"] == "job_queue"
    }
    assert moved == {
        (str(ids["expired"]), "lease_expired", "requeue"),
        (str(ids["poison"]), "poison", "park"),
        (str(ids["stale"]), "stale_ready", "surface"),
    }
    (outcome,) = report["dead_letters"]
    assert (outcome["queue"], outcome["parked_new"], outcome["read_blocked"]) == (
        DEAD_LETTER_QUEUE,
        2,
        None,
    )
    states = {
        r["id"]: r["state"]
        for r in await query(
            pg_empty_dsn, "SELECT id, state::text FROM job WHERE project_id = $1", ids["project"]
        )
    }
    assert states == {
        ids["expired"]: "ready",
        ids["poison"]: "awaiting_human",
        ids["live"]: "leased",
        ids["stale"]: "ready",
    }
    fleet_jobs = await query(
        pg_empty_dsn,
        "SELECT kind, state::text AS state FROM job WHERE project_id = $1",
        FLEET_PROJECT_ID,
    )
    assert [(r["kind"], r["state"]) for r in fleet_jobs] == [
        ("bus.dead_letter", "awaiting_human")
    ] * 2

    # The poison job's gate, answered retry: the enum state moves back to ready.
    (gate,) = await query(
        pg_empty_dsn,
        "SELECT id FROM human_gate WHERE job_id = $1 AND answered_at IS NULL",
        ids["poison"],
    )
    assert (
        await run_cli(
            monkeypatch, tmp_path, env, "gates", "answer", str(gate["id"]), "--choice", "retry"
        )
        == 0
    )
    (row,) = await query(
        pg_empty_dsn, "SELECT state::text AS state, attempts FROM job WHERE id = $1", ids["poison"]
    )
    assert (row["state"], row["attempts"]) == ("ready", 6)

    # A second pass finds nothing new to move or record.
    events = await query(pg_empty_dsn, "SELECT count(*) AS n FROM event")
    capsys.readouterr()
    await run_cli(monkeypatch, tmp_path, env, "reap", "--json")
    again = json.loads(capsys.readouterr().out)
    assert again["unreadable"] == []
    assert not [v for v in again["verdicts"] if v["action"] in ("requeue", "park")]
    assert again["dead_letters"][0]["parked_new"] == 0
    assert (await query(pg_empty_dsn, "SELECT count(*) AS n FROM event"))[0]["n"] == events[0]["n"]

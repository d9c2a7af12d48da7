"""The dry-run proof (SPEC's second use): ``reaper reap --dry-run`` judges everything and
writes nothing, on a scenario where a real pass acts on every condition it can be given.

What is compared, before and after the dry run, and why it is honest:

- PostgreSQL: every row of every table in the schema (``job``, ``job_dependency``,
  ``human_gate``, ``event``, ``ledger_stream``, ``reaper_migration`` and whatever a later
  migration adds), as text, in order; every sequence's value; and the cumulative counts of
  rows inserted, updated and deleted per table (``pg_stat_user_tables``), which also count a
  write that was rolled back. A backend flushes those counts before it leaves
  ``pg_stat_activity``, so the snapshot waits for the pass's connections to be gone.
- RabbitMQ: the vhost's definitions (``GET /api/definitions/{vhost}``: queues, arguments,
  exchanges, bindings, policies) byte for byte, and per queue its counts, consumers and the
  policy in force. Those come from statistics a queue emits every ``STATS_INTERVAL_SECONDS``
  (``collect_statistics_interval``), so each snapshot first waits a few of those. The message
  counters of ``message_stats`` (published, got, redelivered) are not compared: measured here,
  the counters of a short-lived channel (such as the management API's own get) are sometimes
  never collected, so they could neither prove nor disprove a read.
- The messages themselves: reading a message with a requeueing get changes it (it becomes
  ``redelivered``; on a quorum queue the read counts as a delivery), so they are read once,
  at the very end, after the after-snapshot: each queue must hold exactly what was seeded,
  none of it ever delivered. A dry run that had read, published or removed one would show.

Then a real pass runs and the same snapshots must differ: the proof can fail.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any
from urllib.parse import quote

import asyncpg
import httpx
import pytest

from tests.support.cli import (
    Seeded,
    assert_ok_but_for_what_the_version_does_not_enforce,
    run_cli,
    seed_scenario,
    validate_report,
    verdicts,
)
from tests.support.services import STATS_SETTLE_SECONDS, BrokerUnderTest

pytestmark = [pytest.mark.broker, pytest.mark.postgres]

# --------------------------------------------------------------------------- snapshots


async def database_snapshot(dsn: str) -> dict[str, Any]:
    """Every table's rows as text, every sequence's value, and the write counters."""
    conn = await asyncpg.connect(dsn)
    try:
        await _wait_alone(conn)
        tables = [
            r["table_name"]
            for r in await conn.fetch(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY 1"
            )
        ]
        rows = {
            t: [r[0] for r in await conn.fetch(f'SELECT t::text FROM "{t}" AS t ORDER BY 1')]
            for t in tables
        }
        sequences = {
            r["name"]: r["value"]
            for r in await conn.fetch(
                "SELECT sequencename AS name, last_value AS value FROM pg_sequences "
                "WHERE schemaname = 'public'"
            )
        }
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        writes = {
            r["relname"]: (r["n_tup_ins"], r["n_tup_upd"], r["n_tup_del"])
            for r in await conn.fetch(
                "SELECT relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables "
                "WHERE schemaname = 'public'"
            )
        }
    finally:
        await conn.close()
    assert set(tables) >= {"job", "job_dependency", "human_gate", "event", "ledger_stream"}
    return {"rows": rows, "sequences": sequences, "writes": writes}


async def _wait_alone(conn: asyncpg.Connection) -> None:
    """Until no other session is connected to this database: a leaving backend flushes its
    statistics before it disappears from pg_stat_activity."""
    deadline = time.monotonic() + 30
    while await conn.fetchval(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
    ):
        assert time.monotonic() < deadline, "the pass's sessions did not go away"
        await asyncio.sleep(0.1)


def broker_snapshot(broker: BrokerUnderTest) -> dict[str, Any]:
    """The vhost's definitions and, per queue, its counts, consumers and policy in force."""
    with broker.admin() as admin:
        definitions = _ok(admin.get(f"/api/definitions/{broker.vhost_path}")).json()
        queues = _ok(admin.get(f"/api/queues/{broker.vhost_path}")).json()
    per_queue = {
        q["name"]: {
            "messages": q.get("messages"),
            "messages_ready": q.get("messages_ready"),
            "messages_unacknowledged": q.get("messages_unacknowledged"),
            "consumers": q.get("consumers"),
            "policy": q.get("policy"),
            "effective_policy_definition": q.get("effective_policy_definition"),
        }
        for q in queues
    }
    return {"definitions": _canonical(definitions), "queues": per_queue}


def _canonical(definitions: dict[str, Any]) -> str:
    """The definitions with every list in a fixed order: a broker lists queues and bindings in
    its tables' order, which other vhosts' queues (the tests beside this one) may reshuffle."""

    def ordered(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: ordered(v) for k, v in value.items()}
        if isinstance(value, list):
            return sorted((ordered(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
        return value

    return json.dumps(ordered(definitions), sort_keys=True)


def _ok(response: httpx.Response) -> httpx.Response:
    response.raise_for_status()
    return response


async def snapshot(seeded: Seeded) -> dict[str, Any]:
    await asyncio.sleep(STATS_SETTLE_SECONDS)
    return {
        "database": await database_snapshot(seeded.pg_dsn),
        "broker": broker_snapshot(seeded.broker),
    }


def differing(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The snapshot parts that differ, named (``database.rows.job``, ``broker.queues.X``)."""
    found = []
    for side in ("database", "broker"):
        for part, value in before[side].items():
            other = after[side][part]
            if isinstance(value, dict) and isinstance(other, dict):
                found += [
                    f"{side}.{part}.{k}"
                    for k in sorted(set(value) | set(other))
                    if value.get(k) != other.get(k)
                ]
            elif value != other:
                found.append(f"{side}.{part}")
    return found


def read_every_message(broker: BrokerUnderTest, queue: str, expected: int) -> list[dict[str, Any]]:
    """Every message of ``queue``, read once and put back (only ever after the snapshots)."""
    with broker.admin() as admin:
        response = admin.post(
            f"/api/queues/{broker.vhost_path}/{quote(queue, safe='')}/get",
            json={"count": expected + 10, "ackmode": "reject_requeue_true", "encoding": "auto"},
        )
    messages: list[dict[str, Any]] = _ok(response).json()
    return messages


# --------------------------------------------------------------------------- the proof


@pytest.fixture
async def seeded(pg_dsn: str, broker: BrokerUnderTest) -> Seeded:
    return await seed_scenario(pg_dsn, broker)  # which waits for the queues' statistics


async def test_a_dry_run_writes_nothing_and_a_real_pass_would_act_on_everything(
    seeded: Seeded,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scenario, expected = seeded.scenario, seeded.scenario.expected
    before = await snapshot(seeded)

    code = await run_cli(monkeypatch, tmp_path, seeded.env, "reap", "--dry-run", "--json")
    report = json.loads(capsys.readouterr().out)

    after = await snapshot(seeded)
    assert differing(before, after) == []
    assert after == before

    # ...and the messages were never read, published or removed: each queue holds exactly the
    # messages seeded, not one of them delivered before this read.
    for queue, count in scenario.messages.items():
        messages = read_every_message(seeded.broker, queue, count)
        assert len(messages) == count, queue
        assert not [m for m in messages if m["redelivered"]], queue
        headers = [(m["properties"] or {}).get("headers") or {} for m in messages]
        # a quorum queue counts earlier deliveries (3.10 says 0 on the first, 4.x nothing)
        assert not [h for h in headers if h.get("x-delivery-count", 0) != 0], queue

    # The report says everything a real pass would do, and that it recorded nothing.
    validate_report(report)
    assert report["dry_run"] is True
    assert report["unreadable"] == []
    assert not [v for v in report["verdicts"] if v["recorded"]]
    requeue = verdicts(report, condition="lease_expired", action="requeue")
    assert {v["object"] for v in requeue} == expected.requeued
    park = verdicts(report, condition="poison", action="park")
    assert {v["object"] for v in park} == expected.parked
    stale = verdicts(report, source="job_queue", condition="stale_ready", action="surface")
    assert {v["project_id"]: v["object"] for v in stale} == dict(expected.stale_heads)
    surfaced = {(v["condition"], v["queue"]) for v in verdicts(report, source="broker")}
    assert surfaced >= expected.surfaced_queues
    assert report["dead_letters"] == [
        {
            "queue": scenario.dead_letter_queue,
            "depth": len(scenario.dead_letters),
            "parked_new": 0,
            "already_parked": 0,
            "unread": len(scenario.dead_letters),
            "read_blocked": None,
            "stale_pointers": 0,
            "bodies_read": 0,
        }
    ]
    assert any("a real pass would read" in n for n in report["notes"]), report["notes"]
    policies = {p["name"]: p for p in report["policies"]}
    assert {p["action"] for p in report["policies"]} <= {"planned", "unsupported"}
    assert {n for n, p in policies.items() if p["action"] == "planned"} == set(
        scenario.policies_written
    )
    drifted = policies[scenario.drifted_policy]
    assert drifted["verified"] is False and "would update" in drifted["detail"]
    assert drifted["reason"] == "WouldUpdate"
    # a planned write is what the dry run would do, not a failure: the audit is ok
    assert code == 0 and report["ok"] is True, report["problems"]

    # The proof can fail: after a real pass the same snapshots differ in every part: the rows,
    # the write counters, the definitions and the queues' policy in force (the drifted policy
    # put back); and a message read once shows it (the read above made them redelivered).
    code = await run_cli(monkeypatch, tmp_path, seeded.env, "reap", "--json")
    real = json.loads(capsys.readouterr().out)
    assert_ok_but_for_what_the_version_does_not_enforce(code, real, seeded.broker)
    assert real["dead_letters"][0]["parked_new"] == len(scenario.dead_letters)
    changed = set(differing(after, await snapshot(seeded)))
    assert {
        "database.rows.job",
        "database.rows.human_gate",
        "database.rows.event",
        "database.writes.job",
        "database.writes.event",
        "broker.definitions",
        *(f"broker.queues.{p.work_queue}" for p in scenario.projects),
    } <= changed, changed
    for queue, count in scenario.messages.items():
        messages = read_every_message(seeded.broker, queue, count)
        assert len(messages) == count and all(m["redelivered"] for m in messages), queue

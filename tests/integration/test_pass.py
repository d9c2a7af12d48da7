"""A whole pass end to end, through the command line, on real PostgreSQL and every broker:
the seeded scenario (reaper/scenario.py) reaped once, then again with nothing new; the JSON
report against its schema; and every way a source can fail, each named in ``unreadable`` with
exit 1 and no password anywhere.

The helpers (``reaper_env``, ``run_cli``, the ``seeded`` fixture's parts) are in
``tests/support/cli.py``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.cli import (
    CLOSED_BROKER_URL,
    CLOSED_PG_DSN,
    Seeded,
    assert_ok_but_for_what_the_version_does_not_enforce,
    event_count,
    reaper_env,
    run_cli,
    seed_scenario,
    validate_report,
    verdicts,
)
from tests.support.services import BrokerUnderTest, on_one_broker
from tests.support.store import query

pytestmark = [pytest.mark.broker, pytest.mark.postgres]


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
async def seeded(pg_dsn: str, broker: BrokerUnderTest) -> AsyncIterator[Seeded]:
    yield await seed_scenario(pg_dsn, broker)


# --------------------------------------------------------------------------- a real pass


async def test_a_real_pass_does_everything_once_and_the_next_records_nothing_new(
    seeded: Seeded,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scenario, expected = seeded.scenario, seeded.scenario.expected
    dsn = seeded.pg_dsn

    code = await run_cli(monkeypatch, tmp_path, seeded.env, "reap", "--json")
    out = capsys.readouterr().out
    report = json.loads(out)
    validate_report(report)
    assert_ok_but_for_what_the_version_does_not_enforce(code, report, seeded.broker)
    assert report["dry_run"] is False and report["unreadable"] == []

    # the broker block, per version
    broker = report["broker"]
    assert broker["product"] == "RabbitMQ"
    assert broker["version"].startswith(seeded.broker.version + ".")
    capabilities = broker["capabilities"]
    four = seeded.broker.at_least(4, 0)
    assert capabilities["policy_consumer_timeout"] is four
    assert capabilities["unlimited_delivery_limit"] is four

    # expired leases requeued, each with its event; poison parked
    requeued = verdicts(report, condition="lease_expired", action="requeue")
    assert {v["object"] for v in requeued} == expected.requeued
    assert all(v["recorded"] for v in requeued)
    parked = verdicts(report, condition="poison", action="park")
    assert {v["object"] for v in parked} == expected.parked
    assert all(v["recorded"] for v in parked)
    # stale ready work surfaced, per project: the head behind a long-succeeded dependency,
    # never the older job whose dependency still runs
    stale = verdicts(report, source="job_queue", condition="stale_ready")
    assert {v["project_id"]: v["object"] for v in stale} == dict(expected.stale_heads)
    assert all(v["action"] == "surface" and v["recorded"] for v in stale)
    assert not {v["object"] for v in report["verdicts"]} & {
        str(j) for j in scenario.not_claimable + scenario.live_leases + scenario.fresh_ready
    }
    surfaced = {
        (v["condition"], v["queue"])
        for v in verdicts(report, source="broker", action="surface")
        if v["recorded"]
    }
    assert surfaced == expected.surfaced_queues
    # dead letters parked, each with an event; the foreign dead-letter queue never read
    assert report["dead_letters"] == [
        {
            "queue": scenario.dead_letter_queue,
            "depth": len(scenario.dead_letters),
            "parked_new": len(scenario.dead_letters),
            "already_parked": 0,
            "unread": 0,
            "read_blocked": None,
            "stale_pointers": 0,
            "bodies_read": len(scenario.dead_letters),
        }
    ]
    dead = verdicts(report, condition="dead_letter", action="park")
    assert len(dead) == len(scenario.dead_letters) and all(v["recorded"] for v in dead)
    # the drifted policy put back and verified on the queues
    policies = {p["name"]: p for p in report["policies"]}
    assert policies[scenario.drifted_policy]["action"] == "updated"
    unverified = {n for n, p in policies.items() if p["verified"] is False}
    assert unverified == ({"vibey-reap-classic"} if seeded.broker.at_least(4, 3) else set())

    # the rows: requeued ready with the lease cleared, poison awaiting a person with one
    # attempt refunded and a gate, everything else as it was
    jobs = {str(r["id"]): r for r in await query(dsn, "SELECT * FROM job")}
    for job in expected.requeued:
        assert jobs[job]["state"] == "ready" and jobs[job]["lease_owner"] is None
        assert jobs[job]["lease_expires_at"] is None
    for job in expected.parked:
        assert jobs[job]["state"] == "awaiting_human" and jobs[job]["attempts"] == 6
    for job in scenario.live_leases:
        assert jobs[str(job)]["state"] == "leased"
    gates = await query(dsn, "SELECT kind, job_id FROM human_gate ORDER BY kind")
    assert sorted(g["kind"] for g in gates) == sorted(
        ["delivery_exhausted"] + ["bus_dead_lettered"] * len(scenario.dead_letters)
    )
    events = await event_count(dsn)
    recorded = sum(1 for v in report["verdicts"] if v["recorded"])
    assert events == recorded

    # the second pass: nothing to move, every sighting already open, no new event
    code = await run_cli(monkeypatch, tmp_path, seeded.env, "reap", "--json")
    again = json.loads(capsys.readouterr().out)
    validate_report(again)
    assert_ok_but_for_what_the_version_does_not_enforce(code, again, seeded.broker)
    assert await event_count(dsn) == events, again
    assert not [v for v in again["verdicts"] if v["recorded"]]
    assert not [v for v in again["verdicts"] if v["action"] in ("requeue", "park", "cleared")]
    assert {
        (v["condition"], v["queue"]) for v in verdicts(again, source="broker", action="surface")
    } == expected.surfaced_queues
    assert again["dead_letters"][0]["already_parked"] == len(scenario.dead_letters)
    assert again["dead_letters"][0]["parked_new"] == 0
    assert {p["action"] for p in again["policies"]} <= {"unchanged", "unsupported"}
    # never deleted: every dead letter is still on the broker
    assert seeded.broker.queue(scenario.dead_letter_queue)["messages"] == len(scenario.dead_letters)


async def test_the_plan_says_which_bound_the_version_does_not_enforce(
    seeded: Seeded,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``reaper policies plan``, text and JSON, after a real pass wrote the policies: on 4.3
    the classic policy is held as declared and still not verified (``NotEnforced``)."""
    await run_cli(monkeypatch, tmp_path, seeded.env, "reap", "--json")
    capsys.readouterr()
    assert await run_cli(monkeypatch, tmp_path, seeded.env, "policies", "plan", "--json") == 0
    as_json = json.loads(capsys.readouterr().out)
    assert await run_cli(monkeypatch, tmp_path, seeded.env, "policies", "plan") == 0
    text = capsys.readouterr().out

    [classic] = [o for o in as_json["outcomes"] if o["name"] == "vibey-reap-classic"]
    [declared] = [p for p in as_json["policies"] if p["name"] == "vibey-reap-classic"]
    webhooks = [q for q in as_json["queues"] if q["queue"] == "vibey.webhooks"]
    if seeded.broker.at_least(4, 3):
        assert (classic["verified"], classic["reason"]) == (False, "NotEnforced")
        assert declared["change"] == "none"  # held as declared: no write can fix this
        assert [u["key"] for u in declared["not_enforced"]] == ["consumer-timeout"]
        [queue] = webhooks
        assert (queue["ok"], queue["reason"]) == (False, "NotEnforced")
        assert queue["in_force"] == {"consumer-timeout": None}
        assert queue["effective_policy_definition"] == {"consumer-timeout": 21_600_000}
        assert "vibey-reap-classic: planned, NOT verified (NotEnforced): " in text
        assert "  not enforced: consumer-timeout 21600000 is accepted, but RabbitMQ 4.3.6" in text
    else:
        assert classic["verified"] is True, classic
        assert all(p["not_enforced"] == [] for p in as_json["policies"])
        assert "NotEnforced" not in text and "not enforced" not in text


# --------------------------------------------------------------------------- unreadable


async def test_an_unreachable_broker_is_named_unreadable_and_the_pass_is_not_ok(
    pg_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = reaper_env(pg_dsn, CLOSED_BROKER_URL, "/", REAPER_BUS__TIMEOUT_SECONDS="3")
    code = await run_cli(monkeypatch, tmp_path, env, "reap", "--json")
    report = json.loads(capsys.readouterr().out)
    validate_report(report)
    assert code == 1
    assert report["ok"] is False and report["broker"] is None
    assert [u["source"] for u in report["unreadable"]] == ["broker"]
    error = report["unreadable"][0]["error"]
    assert "\n" not in error and CLOSED_BROKER_URL in error, error
    assert "could not be reached" in error


async def test_a_wrong_broker_password_is_unreadable_and_never_printed(
    pg_dsn: str,
    broker: BrokerUnderTest,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    secret = f"Wr0ng-{uuid.uuid4().hex[:12]}"
    env = reaper_env(pg_dsn, broker.management_url, broker.vhost, password=secret)
    code = await run_cli(monkeypatch, tmp_path, env, "reap", "--json")
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    validate_report(report)
    assert code == 1 and report["ok"] is False
    assert [u["source"] for u in report["unreadable"]] == ["broker"]
    error = report["unreadable"][0]["error"]
    assert "\n" not in error and "401" in error, error
    assert secret not in captured.out and secret not in captured.err

    # the human report too
    code = await run_cli(monkeypatch, tmp_path, env, "reap")
    captured = capsys.readouterr()
    assert code == 1 and "UNREADABLE  broker" in captured.out
    assert secret not in captured.out and secret not in captured.err


@on_one_broker  # PostgreSQL is what fails
async def test_a_wrong_database_dsn_is_unreadable_and_the_pass_is_not_ok(
    broker: BrokerUnderTest,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = reaper_env(CLOSED_PG_DSN, broker.management_url, broker.vhost)
    code = await run_cli(monkeypatch, tmp_path, env, "reap", "--json")
    report = json.loads(capsys.readouterr().out)
    validate_report(report)
    assert code == 1 and report["ok"] is False
    assert [u["source"] for u in report["unreadable"]] == ["job_queue"]
    error = report["unreadable"][0]["error"]
    assert "\n" not in error and "127.0.0.1:1" in error, error
    # the broker was still read, and nothing was written anywhere without the ledger
    assert report["broker"]["product"] == "RabbitMQ"
    assert not [v for v in report["verdicts"] if v["recorded"]]


@on_one_broker  # the gates are PostgreSQL's
async def test_a_one_shot_pass_exports_what_waits_for_a_person(
    seeded: Seeded,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--metrics-textfile`` carries the gate gauges too, read after the pass's parks."""
    textfile = tmp_path / "reaper.prom"
    await run_cli(monkeypatch, tmp_path, seeded.env, "reap", "--metrics-textfile", str(textfile))
    capsys.readouterr()
    samples = {
        (s.name, s.labels.get("kind")): s.value
        for family in text_string_to_metric_families(textfile.read_text())
        for s in family.samples
    }
    parked = len(seeded.scenario.expected.parked)
    assert parked > 0
    assert samples[("reaper_gates_open", "delivery_exhausted")] == parked
    assert samples[("reaper_gate_oldest_open_age_seconds", "delivery_exhausted")] >= 0


@on_one_broker  # the export is the reaper's own
async def test_a_failed_export_is_in_the_header_and_the_exit_code(
    seeded: Seeded,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The header and the exit code agree: a metrics textfile that cannot be written makes the
    pass NOT OK, named in the header and under NOT OK with its fix, in text and JSON."""
    textfile = tmp_path / "nonexistent" / "x.prom"
    argv = ("reap", "--dry-run", "--metrics-textfile", str(textfile))
    assert await run_cli(monkeypatch, tmp_path, seeded.env, *argv) == 1
    out = capsys.readouterr().out.splitlines()
    assert "NOT OK: 1 metrics export failed" in out[0]
    at = out.index("NOT OK (1):")
    assert out[at + 1].split()[:3] == ["NOT", "EXPORTED", "--metrics-textfile"]
    assert "could not write the metrics textfile" in out[at + 1]
    assert out[at + 2].strip().startswith(f"fix: create {textfile.parent}")
    assert await run_cli(monkeypatch, tmp_path, seeded.env, *argv, "--json") == 1
    report = json.loads(capsys.readouterr().out)
    validate_report(report)
    assert report["ok"] is False
    [problem] = report["problems"]
    assert problem["kind"] == "not_exported" and problem["fix"].startswith("create ")

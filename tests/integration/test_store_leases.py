"""Expired leases: counted and ruled on oldest first, requeued, parked; a row as it stands
under the lock (the late-finish race); one bad row never blocks the rest."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import timedelta

import asyncpg
import pytest
from hypothesis import given

import reaper.jobqueue.lease_reap as lease_reap
from reaper.core.canonical import canonical_json
from reaper.core.domain import (
    EVENT_KIND,
    GATE_DELIVERY_EXHAUSTED,
    Thresholds,
    Verdict,
)
from reaper.core.judge_leases import judge_lease_page
from reaper.jobqueue.port import GateChoice, GateFilter
from reaper.jobqueue.postgres import PostgresStore
from tests.support.lease_rulings import lease_rulings
from tests.support.store import (
    NOW,
    Job,
    Reaped,
    fetch_job,
    insert_jobs,
    lease_of,
    leased,
    query,
    reap_page,
    refuse_updates_of,
    settling,
)
from tests.support.verdicts import verdicts

pytestmark = pytest.mark.postgres


async def test_expired_leases_are_bounded_oldest_first_past_the_grace(
    pg_dsn: str, store: PostgresStore
) -> None:
    project, other = uuid.uuid4(), uuid.uuid4()
    jobs = [leased(project, expired_seconds_ago=s) for s in (100, 300, 200, 5)]
    jobs += [leased(other, expired_seconds_ago=400)]
    jobs += [Job(project, state="leased", lease_owner="w", lease_expires_at=NOW + timedelta(60))]
    jobs += [Job(project)]  # ready
    await insert_jobs(pg_dsn, jobs)

    got = await lease_rulings(store.database, NOW, 10, None, 3)
    assert [r[0] for r in got] == [jobs[4].id, jobs[1].id, jobs[2].id]
    assert await store.count_expired_leases(NOW, 10) == 4
    assert await store.count_expired_leases(NOW, 10, project) == 3
    mine = await lease_rulings(store.database, NOW, 0, None, 10, project)
    assert [r[0] for r in mine] == [jobs[1].id, jobs[2].id, jobs[0].id, jobs[3].id]
    _, project_id, expiry, poison = got[0][:4]
    assert (project_id, expiry, poison) == (other, NOW - timedelta(seconds=400), False)
    # the next batch starts after the last one's key
    rest = await lease_rulings(store.database, NOW, 10, (got[-1][2], got[-1][0]), 3)
    assert [r[0] for r in rest] == [jobs[0].id]


async def test_requeue_moves_the_lease_back_to_ready_with_its_event(
    pg_dsn: str, store: PostgresStore
) -> None:
    project = uuid.uuid4()
    job = leased(project, attempts=3)
    await insert_jobs(pg_dsn, [job])
    [verdict] = judge_lease_page([lease_of(job)], Thresholds(), NOW)

    outcome = await reap_page(store)

    assert outcome == Reaped(requeued=(job.id,))
    row = await fetch_job(pg_dsn, job.id)
    assert (row["state"], row["lease_owner"], row["lease_expires_at"]) == ("ready", None, None)
    assert row["run_after"] == NOW and row["updated_at"] == NOW
    assert row["attempts"] == 3  # the claim counted the attempt; a requeue does not refund
    [event] = await store.events(project)
    assert (event.seq, event.kind, event.trusted, event.created_at) == (1, EVENT_KIND, True, NOW)
    assert event.payload == verdict.payload()
    canonical = json.dumps(verdict.payload(), sort_keys=True, separators=(",", ":"))
    assert event.digest == hashlib.sha256(canonical.encode()).hexdigest()


async def test_poison_is_parked_with_one_gate_per_episode(
    pg_dsn: str, store: PostgresStore
) -> None:
    project = uuid.uuid4()
    job = leased(project, attempts=7, max_attempts=7, owner="worker-9")
    await insert_jobs(pg_dsn, [job])
    assert await reap_page(store) == Reaped(parked=(job.id,))
    # a second pass over the same episode moves nothing
    assert await reap_page(store) == Reaped()

    row = await fetch_job(pg_dsn, job.id)
    assert (row["state"], row["attempts"], row["lease_owner"]) == ("awaiting_human", 6, None)
    [gate] = await store.list_gates()
    assert (gate.kind, gate.job_id, gate.project_id, gate.choices) == (
        GATE_DELIVERY_EXHAUSTED,
        job.id,
        project,
        ("retry", "cancel"),
    )
    assert gate.identity is not None and str(job.id) in gate.identity
    assert "'cancel' to give it up" in gate.prompt
    assert "retry" in gate.prompt and "worker-9" in gate.prompt and str(job.id) in gate.prompt
    assert len(await store.events(project)) == 1

    # the answer buys exactly one more delivery; when that lease runs out too, it is a new
    # episode and gets a gate of its own
    answered = await store.answer_gate(GateChoice(gate.id, "retry", NOW))
    assert answered.answer == "retry"
    later = NOW + timedelta(hours=1)
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(
            "UPDATE job SET state = 'leased', attempts = attempts + 1, lease_owner = 'w2',"
            " lease_expires_at = $2 WHERE id = $1",
            job.id,
            later - timedelta(minutes=1),
        )
    finally:
        await conn.close()
    assert await reap_page(store, later) == Reaped(parked=(job.id,))
    gates = await store.list_gates(GateFilter(open_only=False))
    assert len(gates) == 2 and len({g.identity for g in gates}) == 2
    # the park, the answer (a GateAnswered event, gapless on the same stream), the second park
    assert [(e.seq, e.kind) for e in await store.events(project)] == [
        (1, "QueueReaped"),
        (2, "GateAnswered"),
        (3, "QueueReaped"),
    ]


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(
            "UPDATE job SET state = 'succeeded', finished_at = $2, lease_owner = NULL,"
            " lease_expires_at = NULL WHERE id = $1",
            id="finished",
        ),
        pytest.param(
            "UPDATE job SET lease_owner = 'worker-2', attempts = attempts + 1,"
            " lease_expires_at = $2::timestamptz + interval '5 minutes' WHERE id = $1",
            id="re-leased-by-another-owner",
        ),
        pytest.param(
            "UPDATE job SET lease_expires_at = $2::timestamptz + interval '5 minutes'"
            " WHERE id = $1",
            id="lease-extended-by-heartbeat",
        ),
        pytest.param(
            "UPDATE job SET state = 'ready', lease_owner = NULL, lease_expires_at = NULL,"
            " run_after = $2 WHERE id = $1",
            id="requeued-by-someone-else",
        ),
    ],
)
async def test_a_row_that_changed_before_the_reap_is_ruled_on_as_it_stands(
    pg_dsn: str, store: PostgresStore, change: str
) -> None:
    """River #1302: the row changes in another connection before the reap reaches it; the
    reap rules on it as it stands under its lock, and leaves it alone."""
    project = uuid.uuid4()
    job, bystander = leased(project), leased(project, attempts=7, max_attempts=7)
    await insert_jobs(pg_dsn, [job, bystander])
    before = await fetch_job(pg_dsn, job.id)
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(change, job.id, NOW)  # the job changes ...
    finally:
        await conn.close()
    changed = await fetch_job(pg_dsn, job.id)
    assert changed != before

    outcome = await reap_page(store)  # ... then the reap

    assert outcome == Reaped(parked=(bystander.id,))
    assert await fetch_job(pg_dsn, job.id) == changed  # untouched
    events = await store.events(project)
    assert [e.payload["object"] for e in events] == [str(bystander.id)]


async def test_a_row_finishing_while_the_reap_runs_is_skipped_not_waited_for(
    pg_dsn: str, store: PostgresStore
) -> None:
    """The worker's settle holds the row when the reaper arrives: SKIP LOCKED passes it by,
    and the settle commits unharmed."""
    project = uuid.uuid4()
    job, other = leased(project), leased(project)
    await insert_jobs(pg_dsn, [job, other])
    async with settling(pg_dsn, job.id, NOW, owner="worker-1"):
        outcome = await reap_page(store)
    assert outcome == Reaped(requeued=(other.id,))
    row = await fetch_job(pg_dsn, job.id)
    assert (row["state"], row["finished_at"]) == ("succeeded", NOW)
    assert len(await store.events(project)) == 1


async def test_one_bad_row_does_not_block_the_others(pg_dsn: str, store: PostgresStore) -> None:
    project = uuid.uuid4()
    jobs = [leased(project) for _ in range(5)] + [leased(project, attempts=7, max_attempts=7)]
    bad = jobs[2]
    await insert_jobs(pg_dsn, jobs)
    await refuse_updates_of(pg_dsn, bad.id)

    outcome = await reap_page(store)

    assert set(outcome.requeued) == {j.id for j in jobs[:5]} - {bad.id}
    assert outcome.parked == (jobs[5].id,)
    assert [job_id for job_id, _ in outcome.failed] == [bad.id]
    assert "cursed" in outcome.failed[0][1] and "P0001" in outcome.failed[0][1]
    assert (await fetch_job(pg_dsn, bad.id))["state"] == "leased"
    events = await store.events(project)
    assert [e.seq for e in events] == [1, 2, 3, 4, 5]
    assert str(bad.id) not in {e.payload["object"] for e in events}
    assert len(await store.list_gates()) == 1


async def test_moves_span_batches_and_projects_with_gapless_streams(
    pg_dsn: str, store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("BATCH_FIRST", "BATCH_MIN", "BATCH_MAX"):
        monkeypatch.setattr(lease_reap, name, 7)
    projects = [uuid.uuid4() for _ in range(3)]
    jobs = [leased(projects[i % 3], expired_seconds_ago=i + 1) for i in range(40)]
    await insert_jobs(pg_dsn, jobs)
    outcome = await reap_page(store)
    assert sorted(outcome.requeued) == sorted(j.id for j in jobs)
    for project in projects:
        events = await store.events(project)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
    rows = await query(pg_dsn, "SELECT count(*) AS n FROM event")
    assert rows[0]["n"] == 40


@given(verdict=verdicts())
def test_a_verdicts_canonical_json_is_its_payload_sorted_and_compact(verdict: Verdict) -> None:
    expected = json.dumps(
        verdict.payload(), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    assert canonical_json(verdict.payload()) == expected


async def test_every_session_of_the_store_plans_each_statement_for_its_own_parameters(
    pg_dsn: str,
) -> None:
    """A lease batch's plan must see the ledger as it is: one cached while the event table was
    small scans it whole for every stream of every batch, and a mass expiry slows as it goes
    (bench/lease_reap.py, bench/peers.py). Its own pool, a factory's connections and a
    borrowed one alike; the borrowed one goes back with the worker's own setting."""
    mode = "SELECT current_setting('plan_cache_mode')"
    worker_pool = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=1)
    stores = [
        await PostgresStore.connect(pg_dsn, pool_size=1),
        await PostgresStore.connect(pg_dsn, pool_size=1, factory=lambda: asyncpg.connect(pg_dsn)),
        PostgresStore.borrowing(worker_pool),
    ]
    try:
        for store in stores:
            async with store.database.session("reading a setting") as conn:
                assert await conn.fetchval(mode) == "force_custom_plan"
        assert await worker_pool.fetchval(mode) == "auto"
    finally:
        for store in stores:
            await store.close()
        await worker_pool.close()

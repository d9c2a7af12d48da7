"""Several reapers at once: every lease moved exactly once, exactly one event per move,
sequences gapless per project, no deadlock."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import Counter

import pytest

from reaper.jobqueue.postgres import PostgresStore
from tests.support.store import Reaped, insert_jobs, leased, query, reap_page

pytestmark = pytest.mark.postgres

REAPERS = 8
LEASES = 5_000
PROJECTS = 50


async def _reap_until_done(store: PostgresStore) -> list[Reaped]:
    """One reaper's passes, each its whole lease reap (the same leases the others pick, by the
    same key), until one moves nothing."""
    outcomes = []
    while True:
        outcome = await reap_page(store)
        if not outcome.requeued and not outcome.parked and not outcome.failed:
            return outcomes
        outcomes.append(outcome)


async def test_eight_reapers_move_each_lease_once_with_one_event_each(pg_dsn: str) -> None:
    rng = random.Random(56)
    projects = [uuid.uuid4() for _ in range(PROJECTS)]
    jobs = []
    for i in range(LEASES):
        poison = i % 10 == 0
        jobs.append(
            leased(
                rng.choice(projects),
                expired_seconds_ago=rng.randint(1, 3600),
                owner=f"worker-{i % 17}",
                attempts=7 if poison else rng.randint(1, 6),
                max_attempts=7,
            )
        )
    await insert_jobs(pg_dsn, jobs)
    stores = [await PostgresStore.connect(pg_dsn, pool_size=2) for _ in range(REAPERS)]
    try:
        results = await asyncio.wait_for(
            asyncio.gather(*(_reap_until_done(s) for s in stores)),
            timeout=120,
        )
    finally:
        await asyncio.gather(*(s.close() for s in stores))

    outcomes = [o for per_reaper in results for o in per_reaper]
    assert not [f for o in outcomes for f in o.failed]
    moved = Counter(job_id for o in outcomes for job_id in (*o.requeued, *o.parked))
    assert set(moved) == {j.id for j in jobs}, "every lease moved"
    assert max(moved.values()) == 1, "no lease moved twice"
    parked = {job_id for o in outcomes for job_id in o.parked}
    assert parked == {j.id for j in jobs if j.attempts == 7}
    movers = [sum(len(o.requeued) + len(o.parked) for o in per_reaper) for per_reaper in results]
    assert sum(1 for n in movers if n) > 1, f"the reapers shared the work: {movers}"

    events = await query(
        pg_dsn,
        "SELECT project_id, seq, payload->>'object' AS object, payload->>'action' AS action"
        " FROM event WHERE kind = 'QueueReaped' ORDER BY project_id, seq",
    )
    assert len(events) == LEASES
    by_object = Counter(e["object"] for e in events)
    assert by_object == Counter({str(j.id): 1 for j in jobs}), "one event per move, no other"
    project_of = {str(j.id): j.project_id for j in jobs}
    seqs: dict[uuid.UUID, list[int]] = {}
    for e in events:
        assert project_of[e["object"]] == e["project_id"], "event on its job's stream"
        assert (e["action"] == "park") == (uuid.UUID(e["object"]) in parked)
        seqs.setdefault(e["project_id"], []).append(e["seq"])
    for project, numbers in seqs.items():
        assert numbers == list(range(1, len(numbers) + 1)), f"gap in {project}"

    states = Counter(r["state"] for r in await query(pg_dsn, "SELECT state FROM job"))
    assert states == Counter({"ready": LEASES - len(parked), "awaiting_human": len(parked)})
    gates = await query(pg_dsn, "SELECT job_id FROM human_gate")
    assert sorted(g["job_id"] for g in gates) == sorted(parked)

"""The lease reap done by PostgreSQL (``PostgresStore.reap_leases``), the pass's path: each
guarantee the per-lease path held, held again. A requeue and a park each with one event on a
gapless stream, a park refunding an attempt behind one gate per episode, a row another
transaction holds skipped and never waited for, one bad row named without blocking the rest,
outbox rows in dispatch mode, the time budget, and eight reapers at once beside a host writer
moving each lease once with one event each."""

from __future__ import annotations

import asyncio
import json
import random
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

import reaper.jobqueue.lease_reap as lease_reap
from reaper.core.domain import Dispatch, Verdict
from reaper.jobqueue.port import LeaseReap, LeaseReapRun
from reaper.jobqueue.postgres import PostgresStore
from reaper.jobqueue.sql import load_queries
from tests.support.store import (
    NOW,
    fetch_job,
    insert_jobs,
    leased,
    query,
    refuse_updates_of,
    settling,
)

pytestmark = pytest.mark.postgres

HOST_WRITER = Path(__file__).resolve().parents[1] / "support" / "host_writer.py"


async def reap(
    store: PostgresStore,
    now: object = NOW,
    *,
    dispatch: Dispatch = Dispatch.POLLING,
    kept: list[Verdict] | None = None,
    deadline: float = float("inf"),
) -> LeaseReap:
    """A lease reap; ``kept`` receives its moves, read back from the ledger."""
    run = LeaseReapRun(now, 0, None, dispatch, True, deadline)  # type: ignore[arg-type]
    done = await store.reap_leases(run)
    if kept is not None:
        kept += [v async for v in store.lease_listing(run, done)]
    return done


async def each_moved_once_with_one_event(pg_dsn: str, jobs: int) -> None:
    """Every one of ``jobs`` leases moved, each with exactly one event, every stream gapless
    (whoever wrote to it), and none left leased."""
    rows = await query(
        pg_dsn,
        "SELECT payload ->> 'object' AS job, count(*) AS n FROM event"
        " WHERE kind = 'QueueReaped' GROUP BY 1",
    )
    assert len(rows) == jobs and {r["n"] for r in rows} == {1}
    streams = await query(
        pg_dsn, "SELECT project_id, array_agg(seq ORDER BY seq) AS seqs FROM event GROUP BY 1"
    )
    for stream in streams:
        assert stream["seqs"] == list(range(1, len(stream["seqs"]) + 1))
    left = await query(pg_dsn, "SELECT count(*) AS n FROM job WHERE state = 'leased'")
    assert left[0]["n"] == 0


async def test_requeues_and_parks_each_with_one_event_and_one_gate_per_episode(
    pg_dsn: str, store: PostgresStore
) -> None:
    project = uuid.uuid4()
    job, poison = leased(project), leased(project, attempts=7, max_attempts=7)
    await insert_jobs(pg_dsn, [job, poison])
    kept: list[Verdict] = []
    done = await reap(store, kept=kept)
    assert done.moves == {(project, False): 1, (project, True): 1} and not done.failed
    assert done.oldest == done.newest == job.lease_expires_at
    row = await fetch_job(pg_dsn, job.id)
    assert (row["state"], row["run_after"], row["lease_owner"]) == ("ready", NOW, None)
    parked = await fetch_job(pg_dsn, poison.id)
    assert (parked["state"], parked["attempts"]) == ("awaiting_human", 6)  # one refunded
    events = await store.events(project)
    assert [e.seq for e in events] == [1, 2]
    assert [v.project_id for v in kept] == [project] * 2
    assert [v.payload() for v in kept] == [e.payload for e in events]  # as the ledger holds them
    assert len(await store.list_gates()) == 1
    # nothing left to reap; the same episode never raises a second gate
    assert (await reap(store)).moved == 0
    # a later lease of the parked job, after an answer, is a new episode with a new gate
    later = NOW + timedelta(hours=1)
    await query(
        pg_dsn,
        "UPDATE job SET state = 'leased', attempts = 7, lease_owner = 'w',"
        " lease_expires_at = $2 WHERE id = $1",
        poison.id,
        later - timedelta(minutes=1),
    )
    assert (await reap(store, later)).moves == {(project, True): 1}
    assert len(await store.list_gates()) == 2
    assert [e.seq for e in await store.events(project)] == [1, 2, 3]


async def test_a_row_another_transaction_holds_is_skipped_not_waited_for(
    pg_dsn: str, store: PostgresStore
) -> None:
    project = uuid.uuid4()
    job, other = leased(project), leased(project)
    await insert_jobs(pg_dsn, [job, other])
    async with settling(pg_dsn, job.id, NOW):
        done = await asyncio.wait_for(reap(store), 30)
    assert done.moved == 1
    row = await fetch_job(pg_dsn, job.id)
    assert (row["state"], row["finished_at"]) == ("succeeded", NOW)
    assert [e.payload["object"] for e in await store.events(project)] == [str(other.id)]


async def test_one_bad_row_is_named_and_the_others_move(pg_dsn: str, store: PostgresStore) -> None:
    project = uuid.uuid4()
    jobs = [leased(project, expired_seconds_ago=60 + n) for n in range(40)]
    jobs.append(leased(project, attempts=7, max_attempts=7))
    bad = jobs[17]
    await insert_jobs(pg_dsn, jobs)
    await refuse_updates_of(pg_dsn, bad.id)
    done = await asyncio.wait_for(reap(store), 60)
    assert [job_id for job_id, _ in done.failed] == [bad.id]
    assert "cursed" in done.failed[0][1] and "P0001" in done.failed[0][1]
    assert done.moves == {(project, False): 39, (project, True): 1}
    assert (await fetch_job(pg_dsn, bad.id))["state"] == "leased"
    events = await store.events(project)
    assert [e.seq for e in events] == list(range(1, 41))
    assert str(bad.id) not in {e.payload["object"] for e in events}


async def test_outbox_dispatch_writes_one_outbox_row_per_requeue(
    pg_dsn: str, store: PostgresStore
) -> None:
    outbox = load_queries("reaper.schema.sql", "outbox/outbox_dispatch.sql")
    for name in ("add_job_dispatch_seq", "add_job_dispatched_at", "create_job_outbox"):
        await query(pg_dsn, outbox[name])
    project = uuid.uuid4()
    job, poison = leased(project), leased(project, attempts=7, max_attempts=7)
    await insert_jobs(pg_dsn, [job, poison])
    await store.close()
    store = await PostgresStore.connect(pg_dsn)  # a fresh pool: the new columns known
    try:
        assert (await reap(store, dispatch=Dispatch.OUTBOX)).moved == 2
    finally:
        await store.close()
    rows = await query(pg_dsn, "SELECT key, payload FROM job_outbox")
    assert [r["key"] for r in rows] == [f"dispatch:{job.id}:1"]
    assert json.loads(rows[0]["payload"])["not_before"].startswith(NOW.date().isoformat())


async def test_a_spent_budget_stops_after_the_batch_it_is_in(
    pg_dsn: str, store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lease_reap, "BATCH_FIRST", 100)
    monkeypatch.setattr(lease_reap, "LANES", 1)
    project = uuid.uuid4()
    await insert_jobs(pg_dsn, [leased(project, expired_seconds_ago=n + 1) for n in range(250)])
    done = await reap(store, deadline=0.0)
    assert done.stopped and done.moved == 100
    assert await store.count_expired_leases(NOW, 0) == 150


async def test_a_lane_that_runs_out_takes_half_of_a_busy_lanes_projects(
    pg_dsn: str, store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # every expired lease in the projects of lane 0 of 2: lane 1 runs out at once, and takes
    # half of lane 0's projects from where lane 0 has got to
    candidates = [uuid.uuid4() for _ in range(64)]
    rows = await query(
        pg_dsn,
        "SELECT id FROM unnest($1::uuid[]) AS id WHERE (hashtext(id::text) & 2147483647) % 2 = 0",
        candidates,
    )
    projects = [r["id"] for r in rows][:12]
    rng = random.Random(40)
    jobs = [
        leased(rng.choice(projects), expired_seconds_ago=n + 1, attempts=7 if n % 9 == 0 else 1)
        for n in range(1500)
    ]
    await insert_jobs(pg_dsn, jobs)
    monkeypatch.setattr(lease_reap, "BATCH_FIRST", 100)
    monkeypatch.setattr(lease_reap, "BATCH_MAX", 100)
    batches: list[tuple[int, int, int]] = []
    batch = lease_reap._batch

    async def counted(conn: object, lane: lease_reap._Lane, *args: object) -> object:
        key = await batch(conn, lane, *args)  # type: ignore[arg-type]
        batches.append((lane.lane, lane.lanes, id(conn)))
        return key

    monkeypatch.setattr(lease_reap, "_batch", counted)
    done = await reap(store)
    assert done.moved == len(jobs) and not done.failed
    # lane 1 found nothing, then worked on its own connection in the half it was given
    assert {(lane, lanes) for lane, lanes, _ in batches} >= {(0, 2), (1, 2), (2, 4)}
    given = {conn for lane, lanes, conn in batches if (lane, lanes) == (2, 4)}
    kept = {conn for lane, lanes, conn in batches if (lane, lanes) == (0, 4)}
    assert given and kept and given.isdisjoint(kept)
    await each_moved_once_with_one_event(pg_dsn, len(jobs))


async def test_eight_reapers_beside_a_host_writer_move_each_lease_once_with_one_event(
    pg_dsn: str,
) -> None:
    rng = random.Random(39)
    projects = [uuid.uuid4() for _ in range(20)]
    jobs = [
        leased(
            rng.choice(projects),
            expired_seconds_ago=rng.randint(1, 3600),
            attempts=7 if i % 10 == 0 else 1,
            max_attempts=7,
        )
        for i in range(3000)
    ]
    await insert_jobs(pg_dsn, jobs)
    writer = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HOST_WRITER),
        pg_dsn,
        *map(str, projects[:5]),
        stdout=asyncio.subprocess.PIPE,
    )
    stores = [await PostgresStore.connect(pg_dsn, pool_size=2) for _ in range(8)]
    try:
        done = await asyncio.wait_for(asyncio.gather(*(reap(s) for s in stores)), 240)
    finally:
        for s in stores:
            await s.close()
        writer.terminate()
        host = json.loads((await asyncio.wait_for(writer.communicate(), 30))[0])
    assert sum(d.moved for d in done) == len(jobs)
    assert not [d.failed for d in done if d.failed]
    await each_moved_once_with_one_event(pg_dsn, len(jobs))
    assert host["appended"] > 0

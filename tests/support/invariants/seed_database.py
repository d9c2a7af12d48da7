"""Seeding a proof scenario in PostgreSQL: leases that expire (and are let again), stale ready
jobs, and reads of what a test's reapers left (their backends, the expired leases)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from reaper.config import Settings
from reaper.demo.scenario import Scenario
from reaper.jobqueue.sql import QUERIES
from tests.support.invariants.expectation import Episode, Seeded
from tests.support.services import BrokerUnderTest
from tests.support.store import Job, insert_jobs, query


def random_projects(rng: random.Random, count: int) -> list[uuid.UUID]:
    """``count`` project ids drawn from ``rng``: the same ones for the same seed."""
    return [uuid.UUID(int=rng.getrandbits(128), version=4) for _ in range(count)]


async def seed_expired_leases(
    dsns: Sequence[str],
    seeded: Seeded,
    count: int,
    projects: Sequence[uuid.UUID],
    rng: random.Random,
    *,
    now: datetime,
    poison_every: int = 10,
    max_attempts: int = 7,
) -> list[Episode]:
    """Insert ``count`` leased jobs whose leases expired up to an hour before ``now`` (every
    ``poison_every``-th with its attempts spent) into every database of ``dsns`` alike."""
    jobs: list[Job] = []
    episodes: list[Episode] = []
    for i in range(count):
        poison = poison_every > 0 and i % poison_every == 0
        job = Job(
            project_id=rng.choice(projects),
            state="leased",
            kind=rng.choice(["build", "test", "deploy"]),
            attempts=max_attempts if poison else rng.randint(1, max_attempts - 1),
            max_attempts=max_attempts,
            lease_owner=f"worker-{rng.randint(1, 40)}",
            lease_expires_at=now - timedelta(seconds=rng.randint(5, 3600), microseconds=i),
            id=uuid.UUID(int=rng.getrandbits(128), version=4),
        )
        jobs.append(job)
        assert job.lease_owner is not None and job.lease_expires_at is not None
        episode = Episode(
            job.id,
            job.project_id,
            job.lease_owner,
            job.lease_expires_at,
            job.attempts,
            job.max_attempts,
        )
        episodes.append(episode)
        seeded.episodes.setdefault(job.id, []).append(episode)
    for dsn in dsns:
        await insert_jobs(dsn, jobs)
    return episodes


async def relet(
    dsns: Sequence[str],
    seeded: Seeded,
    job_ids: Iterable[uuid.UUID],
    rng: random.Random,
    *,
    now: datetime,
) -> list[Episode]:
    """A new episode for jobs the reaper requeued: a worker claimed each again (one more
    attempt) and its lease expired too. Every database must hold them ``ready`` and alike."""
    episodes: list[Episode] = []
    for job_id in job_ids:
        last = seeded.episodes[job_id][-1]
        assert last.action == "requeue", f"job {job_id} was parked, not requeued"
        episode = Episode(
            job_id,
            last.project_id,
            f"worker-{rng.randint(41, 80)}",
            now - timedelta(seconds=rng.randint(5, 600), microseconds=rng.randint(0, 999_999)),
            last.attempts + 1,
            last.max_attempts,
        )
        episodes.append(episode)
    for dsn in dsns:
        conn = await asyncpg.connect(dsn)
        try:
            status = await conn.execute(
                """
                UPDATE job AS j
                SET state = 'leased', attempts = e.attempts, lease_owner = e.owner,
                    lease_expires_at = e.expires, updated_at = $5
                FROM unnest($1::uuid[], $2::int[], $3::text[], $4::timestamptz[])
                     AS e (id, attempts, owner, expires)
                WHERE j.id = e.id AND j.state = 'ready' AND j.lease_owner IS NULL
                """,
                [e.job_id for e in episodes],
                [e.attempts for e in episodes],
                [e.lease_owner for e in episodes],
                [e.lease_expires_at for e in episodes],
                now,
            )
        finally:
            await conn.close()
        assert status == f"UPDATE {len(episodes)}", f"{dsn}: {status} of {len(episodes)}"
    for episode in episodes:
        seeded.episodes[episode.job_id].append(episode)
    return episodes


async def requeued_jobs(dsn: str, seeded: Seeded) -> list[uuid.UUID]:
    """Seeded jobs the reaper has moved back to ready (their last episode's move is done)."""
    rows = await query(
        dsn,
        "SELECT id FROM job WHERE id = ANY($1::uuid[]) AND state = 'ready' "
        "AND lease_owner IS NULL ORDER BY id",
        [job_id for job_id, eps in seeded.episodes.items() if eps[-1].action == "requeue"],
    )
    return [r["id"] for r in rows]


async def seed_stale_ready(
    dsns: Sequence[str], project_id: uuid.UUID, *, now: datetime, age_seconds: int = 7200
) -> uuid.UUID:
    """One ready job, claimable and unclaimed for ``age_seconds``: a stale_ready sighting."""
    job = Job(project_id=project_id, run_after=now - timedelta(seconds=age_seconds))
    for dsn in dsns:
        await insert_jobs(dsn, [job])
    return job.id


async def seed_scenario(
    settings: Settings,
    dsn: str,
    broker: BrokerUnderTest,
    seeded: Seeded,
    *,
    now: datetime,
    **options: Any,
) -> Scenario:
    """The realistic scenario of ``reaper/scenario.py`` on both sides (``options``: its sizes),
    recorded in ``seeded``: its expired leases and poison job as episodes, its owned dead
    letters, and the queues a pass must never read (the foreign tenant's, the consumerless
    webhooks backlog). Its live leases get one more day: they must be left alone however long
    a test runs (the scenario's are 15 minutes, shorter than a long manual chaos run)."""
    from reaper.broker.client import ManagementClient
    from reaper.demo.seed import seed
    from reaper.jobqueue.postgres import PostgresStore

    store = await PostgresStore.connect(dsn)
    try:
        async with ManagementClient(
            broker.management_url, broker.username, broker.password, vhost=broker.vhost
        ) as client:
            scenario = await seed(store, client, now=now, settings=settings, **options)
    finally:
        await store.close()
    rows = await query(
        dsn,
        "SELECT id, project_id, lease_owner, lease_expires_at, attempts, max_attempts "
        "FROM job WHERE id = ANY($1::uuid[])",
        [*scenario.expired_leases, *scenario.poison],
    )
    assert len(rows) == len(scenario.expired_leases) + len(scenario.poison)
    for r in rows:
        seeded.episodes[r["id"]] = [
            Episode(
                r["id"],
                r["project_id"],
                r["lease_owner"],
                r["lease_expires_at"],
                r["attempts"],
                r["max_attempts"],
            )
        ]
    await query(
        dsn,
        "UPDATE job SET lease_expires_at = lease_expires_at + interval '1 day' "
        "WHERE id = ANY($1::uuid[]) RETURNING id",
        list(scenario.live_leases),
    )
    seeded.dead_letters.setdefault(scenario.dead_letter_queue, []).extend(
        letter.body for letter in scenario.dead_letters
    )
    for queue in (*scenario.foreign_queues, scenario.foreign_dead_letter_queue, "vibey.webhooks"):
        seeded.untouched[queue] = scenario.messages.get(queue, 0)
    return scenario


async def clone_database(dsn: str) -> str:
    """A copy of the database ``dsn`` (no session may be open on it), on the same server."""
    base, _, source = dsn.rpartition("/")
    name = f"qr_clone_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(f"{base}/postgres")
    try:
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{source}"')
    finally:
        await admin.close()
    return f"{base}/{name}"


async def drop_database(dsn: str) -> None:
    base, _, name = dsn.rpartition("/")
    admin = await asyncpg.connect(f"{base}/postgres")
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def fetchval(dsn: str, sql: str, *args: Any) -> Any:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(sql, *args)
    finally:
        await conn.close()


async def count_expired_leases(dsn: str, now: datetime) -> int:
    return int(
        await fetchval(
            dsn, "SELECT count(*) FROM job WHERE state = 'leased' AND lease_expires_at < $1", now
        )
    )


async def reaper_backends(dsn: str) -> int:
    """Sessions of reaper processes on this database (a killed process's may linger)."""
    database = dsn.rpartition("/")[2]
    return int(
        await fetchval(
            dsn,
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 "
            "AND application_name = 'queue-reaper' AND pid <> pg_backend_pid()",
            database,
        )
    )


async def wait_for_no_reaper_backends(dsn: str, seconds: float = 30.0) -> None:
    """Until every session a killed reaper left behind has gone (its locks with it)."""
    deadline = time.monotonic() + seconds
    while await reaper_backends(dsn):
        if time.monotonic() > deadline:
            raise AssertionError(f"reaper sessions still open on {dsn} after {seconds} s")
        await asyncio.sleep(0.1)


#: What a reaper's session waiting for a ledger stream's lock looks like.
_WAITING_FOR_STREAMS = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND application_name = 'queue-reaper'
  AND wait_event_type = 'Lock' AND wait_event = 'advisory'
"""


@contextlib.asynccontextmanager
async def streams_held(dsn: str, waiters: int, seconds: float = 20.0) -> AsyncIterator[None]:
    """Every project's ledger stream locked (the lock each writer of a stream takes, in stream
    order) while the body starts its reapers, and let go once ``waiters`` reaper sessions wait
    for it (or ``seconds`` have passed, within the reapers' statement timeout). A lease batch
    locks its leases before its streams, so by then each waiting batch holds leases of its
    own: the reapers move leases together, not one after another as they happen to start."""
    conn = await asyncpg.connect(dsn)
    held = conn.transaction()
    await held.start()
    projects = [r["project_id"] for r in await conn.fetch("SELECT DISTINCT project_id FROM job")]
    await conn.fetchval(QUERIES["lock_streams"], projects)  # the lock every stream's writer takes

    async def let_go() -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            # a transaction sees pg_stat_activity as it first read it, unless told to read again
            await conn.execute("SELECT pg_stat_clear_snapshot()")
            if await conn.fetchval(_WAITING_FOR_STREAMS) >= waiters:
                break
            await asyncio.sleep(0.05)
        await held.rollback()

    going = asyncio.create_task(let_go())
    try:
        yield
    finally:
        if not going.done():
            going.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await going
        await conn.close()

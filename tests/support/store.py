"""Seeding helpers shared by the store's integration tests (no tests here).

Jobs go in with COPY, so seeding thousands of rows costs milliseconds.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from reaper.core.domain import Dispatch, HeldLease
from reaper.jobqueue.port import JobQueue, LeaseReapRun

NOW = datetime(2026, 9, 24, 12, 0, tzinfo=UTC)

JOB_COLUMNS = (
    "id",
    "project_id",
    "kind",
    "phase",
    "state",
    "priority",
    "run_after",
    "attempts",
    "max_attempts",
    "lease_owner",
    "lease_expires_at",
    "idempotency_key",
    "finished_at",
    "created_at",
    "updated_at",
)


@dataclass
class Job:
    project_id: uuid.UUID
    state: str = "ready"
    kind: str = "build"
    phase: str | None = None
    run_after: datetime = NOW - timedelta(hours=1)
    attempts: int = 0
    max_attempts: int = 7
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    finished_at: datetime | None = None
    id: uuid.UUID = field(default_factory=uuid.uuid4)
    #: The dispatch generation; only where the host dispatches through an outbox.
    dispatch_seq: int = 0

    def record(self) -> tuple[Any, ...]:
        return (
            self.id,
            self.project_id,
            self.kind,
            self.phase,
            self.state,
            0,
            self.run_after,
            self.attempts,
            self.max_attempts,
            self.lease_owner,
            self.lease_expires_at,
            None,
            self.finished_at,
            NOW - timedelta(days=1),
            NOW - timedelta(days=1),
        )


def leased(
    project_id: uuid.UUID,
    *,
    expired_seconds_ago: float = 60,
    owner: str = "worker-1",
    attempts: int = 1,
    max_attempts: int = 7,
    now: datetime = NOW,
) -> Job:
    return Job(
        project_id=project_id,
        state="leased",
        attempts=attempts,
        max_attempts=max_attempts,
        lease_owner=owner,
        lease_expires_at=now - timedelta(seconds=expired_seconds_ago),
    )


#: ``$1`` jobs spread over the projects ``00000000-0000-4000-8000-<n>`` for ``n`` below ``$2``,
#: each leased by ``worker-<g % 13>`` until up to an hour before ``$3``, with 1 to 6 of its 7
#: attempts spent; every ``$4``-th has spent all 7 (none when ``$4`` is null).
_EXPIRED_LEASES = """
INSERT INTO job (id, project_id, kind, phase, state, run_after, attempts, max_attempts,
                 lease_owner, lease_expires_at, created_at, updated_at)
SELECT gen_random_uuid(),
       ('00000000-0000-4000-8000-' || lpad(to_hex(g % $2), 12, '0'))::uuid,
       'build', 'build', 'leased', $3::timestamptz - interval '2 hours',
       CASE WHEN g % $4::int = 0 THEN 7 ELSE 1 + g % 6 END, 7,
       'worker-' || (g % 13), $3::timestamptz - (g % 3600 + 1) * interval '1 second',
       $3::timestamptz - interval '1 day', $3::timestamptz - interval '1 day'
FROM generate_series(1, $1::int) AS g
"""


async def insert_expired_leases(
    conn: asyncpg.Connection,
    count: int,
    projects: int,
    before: datetime,
    *,
    poison_every: int | None = None,
) -> None:
    """``count`` expired leases in ``projects`` projects, generated in the database (fast for
    tens of thousands); every ``poison_every``-th on its last attempt, none if not given."""
    await conn.execute(_EXPIRED_LEASES, count, projects, before, poison_every)


async def insert_jobs(dsn_or_conn: str | asyncpg.Connection, jobs: Iterable[Job]) -> None:
    records = [j.record() for j in jobs]
    conn = await asyncpg.connect(dsn_or_conn) if isinstance(dsn_or_conn, str) else dsn_or_conn
    try:
        await conn.copy_records_to_table("job", records=records, columns=JOB_COLUMNS)
    finally:
        if isinstance(dsn_or_conn, str):
            await conn.close()


async def add_dependency(dsn: str, job_id: uuid.UUID, depends_on: uuid.UUID) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "INSERT INTO job_dependency (job_id, depends_on) VALUES ($1, $2)", job_id, depends_on
        )
    finally:
        await conn.close()


def lease_of(job: Job) -> HeldLease:
    """A leased job as the lease judge takes it."""
    assert job.lease_expires_at is not None
    return HeldLease(
        job.id,
        job.project_id,
        job.kind,
        job.lease_owner,
        job.lease_expires_at,
        job.attempts,
        job.max_attempts,
    )


@dataclass(frozen=True)
class Reaped:
    """What one lease reap moved, by job, each sorted (read back from the ledger), and the
    rows it named."""

    requeued: tuple[uuid.UUID, ...] = ()
    parked: tuple[uuid.UUID, ...] = ()
    failed: tuple[tuple[uuid.UUID, str], ...] = ()


async def reap_page(
    store: JobQueue,
    now: datetime = NOW,
    *,
    project_id: uuid.UUID | None = None,
    dispatch: Dispatch = Dispatch.POLLING,
    grace: int = 0,
) -> Reaped:
    """The pass's lease reap, whole, no budget: what it moved (read back from the ledger by
    the runs of events it appended, as the pass's report reads them) and what it named."""
    run = LeaseReapRun(now, grace, project_id, dispatch, True)
    done = await store.reap_leases(run)
    moves = [v async for v in store.lease_listing(run, done)]
    assert len(moves) == done.moved, (len(moves), done.moved)  # each move read back once
    return Reaped(  # sorted: lanes end in no set order
        requeued=tuple(sorted(uuid.UUID(m.object) for m in moves if m.action == "requeue")),
        parked=tuple(sorted(uuid.UUID(m.object) for m in moves if m.action == "park")),
        failed=tuple(done.failed),
    )


async def fetch_job(dsn: str, job_id: uuid.UUID) -> asyncpg.Record:
    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow("SELECT * FROM job WHERE id = $1", job_id)
        assert row is not None
        return row
    finally:
        await conn.close()


async def query(dsn: str, sql: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return list(await conn.fetch(sql, *args))
    finally:
        await conn.close()


async def refuse_updates_of(dsn: str, job_id: uuid.UUID) -> None:
    """A trigger on ``job`` that refuses any UPDATE of ``job_id``'s row ('row ... is cursed',
    SQLSTATE P0001) and lets every other row change."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            f"""
            CREATE FUNCTION refuse_one() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.id = '{job_id}' THEN RAISE EXCEPTION 'row % is cursed', NEW.id; END IF;
                RETURN NEW;
            END $$;
            CREATE TRIGGER refuse_one BEFORE UPDATE ON job
                FOR EACH ROW EXECUTE FUNCTION refuse_one();
            """
        )
    finally:
        await conn.close()


@asynccontextmanager
async def settling(
    dsn: str, job_id: uuid.UUID, finished_at: datetime, *, owner: str | None = None
) -> AsyncIterator[None]:
    """A worker's settle of ``job_id`` (succeeded at ``finished_at``; only while ``owner``
    holds its lease, when given) in a transaction left open for the block, so the row stays
    locked; committed when the block ends."""
    held_by = "" if owner is None else " AND lease_owner = $3"
    worker = await asyncpg.connect(dsn)
    try:
        tx = worker.transaction()
        await tx.start()
        await worker.execute(
            "UPDATE job SET state = 'succeeded', finished_at = $2, lease_owner = NULL,"
            " lease_expires_at = NULL WHERE id = $1" + held_by,
            job_id,
            finished_at,
            *(() if owner is None else (owner,)),
        )
        yield
        await tx.commit()
    finally:
        await worker.close()

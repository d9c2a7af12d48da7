"""Seeding helpers shared by the store's integration tests (no tests here).

Jobs go in with COPY, so seeding thousands of rows costs milliseconds.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from reaper.core.domain import Action, Condition, HeldLease, Source, Unit, Verdict

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


def lease_verdict(lease: HeldLease, now: datetime = NOW) -> Verdict:
    """What the judge decides for an expired lease: park when out of attempts, else requeue."""
    poison = lease.attempts >= lease.max_attempts
    if poison:
        return Verdict(
            source=Source.JOB_QUEUE,
            object=str(lease.job_id),
            condition=Condition.POISON,
            measured=lease.attempts,
            threshold=lease.max_attempts,
            unit=Unit.ATTEMPTS,
            action=Action.PARK,
            project_id=lease.project_id,
            lease=lease,
        )
    return Verdict(
        source=Source.JOB_QUEUE,
        object=str(lease.job_id),
        condition=Condition.LEASE_EXPIRED,
        measured=round((now - lease.lease_expires_at).total_seconds(), 3),
        threshold=0,
        unit=Unit.SECONDS,
        action=Action.REQUEUE,
        queue=lease.kind,
        project_id=lease.project_id,
        lease=lease,
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

"""The job-queue contract's two subjects: ``PostgresStore`` on a migrated database of the
test's own, and ``MemoryJobQueue``. Every test in this folder runs against both, arranging its
jobs through :class:`Subject` so that the same words mean the same rows."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import pytest

from reaper.jobqueue.memory import JobRow, MemoryJobQueue
from reaper.jobqueue.port import JobQueue
from reaper.jobqueue.postgres import PostgresStore
from tests.conftest import cloned_database
from tests.integration.test_store_support import Job, add_dependency, insert_jobs, query


@dataclass(frozen=True)
class Row:
    """What the contract checks of a job row."""

    state: str
    attempts: int
    run_after: datetime
    lease_owner: str | None
    lease_expires_at: datetime | None
    finished_at: datetime | None


class Subject(Protocol):
    store: JobQueue

    async def add(self, *jobs: Job) -> None: ...

    async def depend(self, job_id: uuid.UUID, on: uuid.UUID) -> None: ...

    async def row(self, job_id: uuid.UUID) -> Row: ...

    async def update(self, job_id: uuid.UUID, **columns: object) -> None: ...


@dataclass
class OnPostgres:
    store: PostgresStore
    dsn: str

    async def add(self, *jobs: Job) -> None:
        await insert_jobs(self.dsn, jobs)

    async def depend(self, job_id: uuid.UUID, on: uuid.UUID) -> None:
        await add_dependency(self.dsn, job_id, on)

    async def row(self, job_id: uuid.UUID) -> Row:
        [r] = await query(
            self.dsn,
            "SELECT state, attempts, run_after, lease_owner, lease_expires_at, finished_at "
            "FROM job WHERE id = $1",
            job_id,
        )
        return Row(*r)

    async def update(self, job_id: uuid.UUID, **columns: object) -> None:
        sets = ", ".join(f"{name} = ${n}" for n, name in enumerate(columns, start=2))
        await query(
            self.dsn, f"UPDATE job SET {sets} WHERE id = $1 RETURNING id", job_id, *columns.values()
        )


@dataclass
class InMemory:
    store: MemoryJobQueue

    async def add(self, *jobs: Job) -> None:
        for j in jobs:
            self.store.add_job(
                JobRow(
                    id=j.id,
                    project_id=j.project_id,
                    kind=j.kind,
                    phase=j.phase,
                    state=j.state,
                    run_after=j.run_after,
                    attempts=j.attempts,
                    max_attempts=j.max_attempts,
                    lease_owner=j.lease_owner,
                    lease_expires_at=j.lease_expires_at,
                    finished_at=j.finished_at,
                )
            )

    async def depend(self, job_id: uuid.UUID, on: uuid.UUID) -> None:
        self.store.add_dependency(job_id, on)

    async def row(self, job_id: uuid.UUID) -> Row:
        j = self.store.jobs[job_id]
        return Row(
            j.state, j.attempts, j.run_after, j.lease_owner, j.lease_expires_at, j.finished_at
        )

    async def update(self, job_id: uuid.UUID, **columns: object) -> None:
        job = self.store.jobs[job_id]
        for name, value in columns.items():
            setattr(job, name, value)


@pytest.fixture(params=["memory", "postgres"])
async def subject(request: pytest.FixtureRequest, pg_template: str) -> AsyncIterator[Subject]:
    if request.param == "memory":
        yield InMemory(MemoryJobQueue())
        return
    async with cloned_database(pg_template) as dsn:
        store = await PostgresStore.connect(dsn)
        try:
            yield OnPostgres(store, dsn)
        finally:
            await store.close()

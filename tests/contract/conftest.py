"""The job-queue contract's two subjects: ``PostgresStore`` on a migrated database of the test's
own, and ``MemoryJobQueue``. Every test in this folder runs against both, arranging its
jobs through :class:`Subject` so that the same words mean the same rows."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Protocol

import asyncpg
import pytest

from reaper.core.records import Gate
from reaper.jobqueue.port import GateFilter, JobQueue
from reaper.jobqueue.postgres import PostgresStore
from reaper.testing.memory import JobRow, MemoryJobQueue
from tests.support.host_schema import add_outbox_schema
from tests.support.services import cloned_database
from tests.support.store import Job, add_dependency, insert_jobs, leased, query, reap_page


@dataclass(frozen=True)
class Row:
    """What the contract checks of a job row."""

    state: str
    attempts: int
    run_after: datetime
    lease_owner: str | None
    lease_expires_at: datetime | None
    finished_at: datetime | None


@dataclass(frozen=True)
class Outbox:
    """What the contract checks of a job_outbox row."""

    key: str
    job_id: uuid.UUID
    payload: dict[str, object]
    sent: bool


class Subject(Protocol):
    store: JobQueue

    async def add(self, *jobs: Job) -> None: ...

    async def depend(self, job_id: uuid.UUID, on: uuid.UUID) -> None: ...

    async def row(self, job_id: uuid.UUID) -> Row: ...

    async def update(self, job_id: uuid.UUID, **columns: object) -> None: ...

    async def generation(self, job_id: uuid.UUID) -> int: ...

    async def outbox(self) -> list[Outbox]: ...

    async def refuse_moves(self, job_id: uuid.UUID) -> None:
        """Make every later move of this job fail, saying it is cursed: a trigger raising for
        that row on PostgreSQL, the double's ``refused_moves``."""


@dataclass
class OnPostgres:
    store: PostgresStore
    dsn: str

    async def add(self, *jobs: Job) -> None:
        await insert_jobs(self.dsn, jobs)
        for job in jobs:
            if job.dispatch_seq:
                await self.update(job.id, dispatch_seq=job.dispatch_seq)

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

    async def generation(self, job_id: uuid.UUID) -> int:
        [(seq,)] = await query(self.dsn, "SELECT dispatch_seq FROM job WHERE id = $1", job_id)
        return int(seq)

    async def outbox(self) -> list[Outbox]:
        rows = await query(
            self.dsn, "SELECT key, job_id, payload::text, sent_at FROM job_outbox ORDER BY id"
        )
        return [Outbox(r[0], r[1], json.loads(r[2]), r[3] is not None) for r in rows]

    async def refuse_moves(self, job_id: uuid.UUID) -> None:
        name = f"refuse_{job_id.hex}"
        conn = await asyncpg.connect(self.dsn)
        try:
            await conn.execute(
                f"""
                CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF NEW.id = '{job_id}' THEN RAISE EXCEPTION 'row % is cursed', NEW.id; END IF;
                    RETURN NEW;
                END $$;
                CREATE TRIGGER {name} BEFORE UPDATE ON job FOR EACH ROW EXECUTE FUNCTION {name}();
                """
            )
        finally:
            await conn.close()

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
                    dispatch_seq=j.dispatch_seq,
                )
            )

    async def depend(self, job_id: uuid.UUID, on: uuid.UUID) -> None:
        self.store.add_dependency(job_id, on)

    async def row(self, job_id: uuid.UUID) -> Row:
        j = self.store.jobs[job_id]
        return Row(
            j.state, j.attempts, j.run_after, j.lease_owner, j.lease_expires_at, j.finished_at
        )

    async def generation(self, job_id: uuid.UUID) -> int:
        return self.store.jobs[job_id].dispatch_seq

    async def outbox(self) -> list[Outbox]:
        return [
            Outbox(
                row.key, row.job_id, json.loads(json.dumps(row.payload)), row.sent_at is not None
            )
            for row in self.store.outbox or ()
        ]

    async def refuse_moves(self, job_id: uuid.UUID) -> None:
        self.store.refused_moves[job_id] = f"row {job_id} is cursed"

    async def update(self, job_id: uuid.UUID, **columns: object) -> None:
        job = self.store.jobs[job_id]
        for name, value in columns.items():
            setattr(job, name, value)


async def _subject(kind: str, template: str, *, outbox: bool) -> AsyncIterator[Subject]:
    if kind == "memory":
        yield InMemory(MemoryJobQueue(outbox=outbox))
        return
    async with cloned_database(template) as dsn:
        if outbox:
            await add_outbox_schema(dsn)
        store = await PostgresStore.connect(dsn)
        try:
            yield OnPostgres(store, dsn)
        finally:
            await store.close()


@pytest.fixture(params=["memory", "postgres"])
async def subject(request: pytest.FixtureRequest, pg_template: str) -> AsyncIterator[Subject]:
    """A job queue whose host polls its job table."""
    async for made in _subject(request.param, pg_template, outbox=False):
        yield made


@pytest.fixture(params=["memory", "postgres"])
async def outbox_subject(
    request: pytest.FixtureRequest, pg_template: str
) -> AsyncIterator[Subject]:
    """A job queue whose host dispatches through an outbox (SPEC §3)."""
    async for made in _subject(request.param, pg_template, outbox=True):
        yield made


async def park_poison(subject: Subject, project: uuid.UUID, **changes: object) -> Gate:
    """A job of ``project`` leased on its last attempt (with ``changes``), reaped: parked
    behind the gate returned."""
    poison = replace(leased(project, attempts=7, max_attempts=7), **changes)  # type: ignore[arg-type]
    await subject.add(poison)
    store = subject.store
    await reap_page(store, project_id=project)
    [gate] = await store.list_gates(GateFilter(project_id=project))
    return gate

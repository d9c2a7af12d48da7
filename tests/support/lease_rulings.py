"""The lease reap's rulings asked read-only, as a dry run asks them, for the lease tests.

The rows the batch statement would take next after a key, each with the ruling it would give
(job, project, expiry, poison, payload, digest, gate identity, gate prompt), none locked or
moved: ``lease_rulings`` of ``reaper/jobqueue/sql/lease_reap.sql`` on one lane.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from reaper.jobqueue.database import Database
from reaper.jobqueue.lease_reap import FIRST_KEY, statement
from reaper.jobqueue.port import LeaseKey
from reaper.jobqueue.sql import QUERIES


async def lease_rulings(
    db: Database,
    now: datetime,
    grace: int,
    after: LeaseKey | None,
    size: int,
    project_id: UUID | None = None,
) -> list[tuple[object, ...]]:
    """The rulings on the next ``size`` expired leases after ``after`` (None: the first),
    of one project or of all, read in a read-only transaction that walks the leased-expiry
    index as a batch does."""
    async with db.session("reading expired leases") as conn, conn.transaction(readonly=True):
        await conn.execute(QUERIES["walk_leased_expiry_index"])  # this transaction only
        rows = await conn.fetch(
            statement("lease_rulings"), now, grace, *(after or FIRST_KEY), project_id, 0, 1, size
        )
    return [tuple(r) for r in rows]

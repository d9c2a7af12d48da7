"""Leases and claimable work as a pass reads them (SPEC §1 (a), (c), (d); §3): how many leases
are expired, each project's oldest claimable job, the dispatches never sent. The expired leases
themselves are reaped by PostgreSQL a batch at a time (:mod:`reaper.jobqueue.lease_reap`).
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from reaper.core.domain import ClaimableHead, UnsentDispatch
from reaper.jobqueue.database import Database
from reaper.jobqueue.sql import QUERIES

__all__ = ["claimable_heads", "count_expired_leases", "unsent_dispatches"]


async def count_expired_leases(
    db: Database, now: datetime, grace_seconds: int, project_id: UUID | None = None
) -> int:
    async with db.session("counting expired leases") as conn:
        count = await conn.fetchval(QUERIES["count_expired_leases"], now, grace_seconds, project_id)
    return int(count)


async def claimable_heads(
    db: Database, now: datetime, known_phases: frozenset[str], project_id: UUID | None
) -> list[ClaimableHead]:
    async with db.session("reading claimable work") as conn:
        rows = await conn.fetch(QUERIES["claimable_heads"], now, sorted(known_phases), project_id)
    return [ClaimableHead(*r) for r in rows]  # likewise


async def unsent_dispatches(db: Database, project_id: UUID | None) -> list[UnsentDispatch]:
    async with db.session("reading unsent dispatches") as conn:
        rows = await conn.fetch(QUERIES["unsent_dispatches"], project_id)
    return [UnsentDispatch(*r) for r in rows]  # the query's columns are its fields

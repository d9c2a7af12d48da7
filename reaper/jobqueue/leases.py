"""Leases and claimable work as a pass reads them.

Leases and claimable work as a pass reads them (SPEC §1 (a), (c), (d); §3): how many leases
are expired, each project's oldest claimable job, the dispatches never sent, and the jobs a
typed prefix of an id names. The expired leases
themselves are reaped by PostgreSQL a batch at a time (:mod:`reaper.jobqueue.lease_reap`).
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from reaper.core.domain import ClaimableHead, UnsentDispatch
from reaper.jobqueue import lease_reap
from reaper.jobqueue.database import Database
from reaper.jobqueue.sql import QUERIES

__all__ = ["Leases"]


class Leases:
    """What a pass counts of leases and claimable work, the lease reap, and jobs by id."""

    database: Database

    #: The batches PostgreSQL moves (:mod:`reaper.jobqueue.lease_reap`), written there with
    #: the store as its first parameter.
    reap_leases = lease_reap.reap_leases
    lease_listing = lease_reap.lease_listing

    async def count_expired_leases(
        self, now: datetime, grace_seconds: int, project_id: UUID | None = None
    ) -> int:
        async with self.database.session("counting expired leases") as conn:
            count = await conn.fetchval(
                QUERIES["count_expired_leases"], now, grace_seconds, project_id
            )
        return int(count)

    async def claimable_heads(
        self, now: datetime, known_phases: frozenset[str], project_id: UUID | None = None
    ) -> list[ClaimableHead]:
        async with self.database.session("reading claimable work") as conn:
            rows = await conn.fetch(
                QUERIES["claimable_heads"], now, sorted(known_phases), project_id
            )
        return [ClaimableHead(*r) for r in rows]  # likewise

    async def unsent_dispatches(self, project_id: UUID | None = None) -> list[UnsentDispatch]:
        async with self.database.session("reading unsent dispatches") as conn:
            rows = await conn.fetch(QUERIES["unsent_dispatches"], project_id)
        return [UnsentDispatch(*r) for r in rows]  # the query's columns are its fields

    async def jobs_between(self, low: UUID, high: UUID, limit: int) -> list[UUID]:
        async with self.database.session("reading job ids") as conn:
            return [r[0] for r in await conn.fetch(QUERIES["jobs_between"], low, high, limit)]

"""What a person reads beside the pass's own reads: how many ledger events a filter selects
in all (so a listing cut at its limit says how many it left out), and the ledger's streams or
the jobs whose ids a typed prefix stands for (each a probe of a primary key)."""

from __future__ import annotations

from uuid import UUID

from reaper.desk.sql import QUERIES
from reaper.jobqueue.database import Database
from reaper.jobqueue.port import EventFilter


async def count_events(db: Database, chosen: EventFilter) -> int:
    """How many events ``chosen`` selects in all, whatever its limit."""
    async with db.session("counting the ledger's events") as conn:
        found: int = await conn.fetchval(QUERIES["count_events"], *chosen.values())
    return found


async def streams_between(db: Database, low: UUID, high: UUID, limit: int) -> list[UUID]:
    """The ledger's streams (projects) whose ids lie between ``low`` and ``high``, by id."""
    async with db.session("reading the ledger's streams") as conn:
        return [r[0] for r in await conn.fetch(QUERIES["streams_between"], low, high, limit)]


async def jobs_between(db: Database, low: UUID, high: UUID, limit: int) -> list[UUID]:
    """The jobs whose ids lie between ``low`` and ``high`` (an id's prefix), by id."""
    async with db.session("reading job ids") as conn:
        return [r[0] for r in await conn.fetch(QUERIES["jobs_between"], low, high, limit)]

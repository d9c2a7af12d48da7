"""Gates as a pass and a person read them (SPEC §1): listed, found by id, counted open, and the
open dead-letter gates per queue. A park raises a gate with its move
(:mod:`~reaper.jobqueue.leases`, :mod:`~reaper.jobqueue.dead_letters`); answering one is a
person's act, the desk's (:mod:`reaper.desk`)."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from reaper.core.records import Gate
from reaper.core.storable import from_storage
from reaper.jobqueue.database import Database
from reaper.jobqueue.port import GateCount
from reaper.jobqueue.rows import gate_of
from reaper.jobqueue.sql import QUERIES

__all__ = ["gates_between", "list_gates", "open_dead_letter_gates", "open_gate_counts"]


async def list_gates(
    db: Database,
    *,
    open_only: bool = True,
    kind: str | None = None,
    project_id: UUID | None = None,
    raised_before: datetime | None = None,
    raised_since: datetime | None = None,
    limit: int | None = None,
) -> list[Gate]:
    async with db.session("listing gates") as conn:
        rows = await conn.fetch(
            QUERIES["list_gates"], open_only, kind, project_id, raised_before, raised_since, limit
        )
    return [gate_of(r) for r in rows]


async def gates_between(db: Database, low: UUID, high: UUID, limit: int) -> list[Gate]:
    async with db.session("finding a gate") as conn:
        rows = await conn.fetch(QUERIES["gates_between"], low, high, limit)
    return [gate_of(r) for r in rows]


async def open_gate_counts(db: Database) -> list[GateCount]:
    async with db.session("counting open gates") as conn:
        rows = await conn.fetch(QUERIES["open_gate_counts"])
    return [GateCount(r["kind"], r["open"], r["oldest"]) for r in rows]


async def open_dead_letter_gates(db: Database) -> dict[str, int]:
    async with db.session("counting open dead-letter gates") as conn:
        rows = await conn.fetch(QUERIES["open_dead_letter_gates"])
    return {from_storage(r["queue"]): r["waiting"] for r in rows}

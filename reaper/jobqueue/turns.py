"""The fleet's turn (SPEC §10 "A fleet shares one pass"): the store's half of one whole pass per
``interval_seconds`` however many workers call the hook. One short statement decides, by the
database's clock; no leader process, no lock held past the statement, and a taker that dies
mid-pass holds the turn no longer than the interval it took."""

from __future__ import annotations

from reaper.jobqueue.database import Database
from reaper.jobqueue.port import Turn
from reaper.jobqueue.sql import QUERIES

__all__ = ["hand_back_turn", "take_turn"]


async def take_turn(db: Database, name: str, interval_seconds: float, holder: str) -> Turn:
    async with db.session("taking the fleet's turn") as conn:
        row = await conn.fetchrow(QUERIES["take_turn"], name, float(interval_seconds), holder)
    return Turn.as_found(
        row["mine"], row["taken_at"], row["taken_by"], row["now"], interval_seconds
    )


async def hand_back_turn(db: Database, name: str, turn: Turn, interval_seconds: float) -> bool:
    async with db.session("handing back the fleet's turn") as conn:
        status = await conn.execute(
            QUERIES["hand_back_turn"], name, turn.taken_at, turn.taken_by, float(interval_seconds)
        )
    return bool(str(status).split()[-1] == "1")

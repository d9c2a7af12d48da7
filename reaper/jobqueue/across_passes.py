"""What the fleet keeps from one pass to the next, in the reaper's own tables.

What the fleet keeps from one pass to the next, in the reaper's own tables, so that whichever
reaper of the fleet runs the next pass continues where the last one stopped:

- the fleet's turn (SPEC §10 "A fleet shares one pass"): one whole pass per ``interval_seconds``
  however many workers call the hook; one short statement decides, by the database's clock, no
  lock held past it, and a taker that dies mid-pass holds the turn no longer than its interval;
- what is watched across passes (:mod:`reaper.core.observation`), per vhost;
- the dead-letter queues' quiet marks (:mod:`reaper.core.dead_letters.quiet`), per vhost.
"""

from __future__ import annotations

from collections.abc import Sequence

from reaper.core.dead_letters import QuietMark
from reaper.core.observation import Observation, Watch
from reaper.core.storable import for_storage, from_storage
from reaper.jobqueue.database import Database
from reaper.jobqueue.port import Turn
from reaper.jobqueue.rows import value_of
from reaper.jobqueue.sql import QUERIES

__all__ = ["AcrossPasses"]


class AcrossPasses:
    """The store's turns, observations and quiet marks."""

    database: Database

    async def take_turn(self, name: str, interval_seconds: float, holder: str) -> Turn:
        async with self.database.session("taking the fleet's turn") as conn:
            row = await conn.fetchrow(QUERIES["take_turn"], name, float(interval_seconds), holder)
        return Turn.as_found(
            row["mine"], row["taken_at"], row["taken_by"], row["now"], interval_seconds
        )

    async def hand_back_turn(self, name: str, turn: Turn, interval_seconds: float) -> bool:
        async with self.database.session("handing back the fleet's turn") as conn:
            status = await conn.execute(
                QUERIES["hand_back_turn"],
                name,
                turn.taken_at,
                turn.taken_by,
                float(interval_seconds),
            )
        return bool(str(status).split()[-1] == "1")

    async def observations(self, scope: str) -> list[Observation]:
        async with self.database.session("reading what was observed") as conn:
            rows = await conn.fetch(QUERIES["observations"], scope)
        return [
            Observation(
                Watch(r["watch"]), from_storage(r["key"]), r["since"], r["counter"], r["level"]
            )
            for r in rows
            if r["watch"] in Watch.__members__.values()
        ]

    async def keep_observations(self, scope: str, observations: Sequence[Observation]) -> None:
        async with self.database.session("keeping what was observed") as conn:
            await conn.execute(
                QUERIES["keep_observations"],
                scope,
                [o.watch.value for o in observations],
                [for_storage(o.key) for o in observations],
                [o.since for o in observations],
                [o.counter for o in observations],
                [o.level for o in observations],
            )

    async def quiet_mark(self, scope: str, queue: str) -> QuietMark | None:
        async with self.database.session("reading a dead-letter queue's quiet mark") as conn:
            row = await conn.fetchrow(QUERIES["quiet_mark"], scope, for_storage(queue))
        if row is None:
            return None
        return value_of(QuietMark, row, queue=from_storage(row["queue"]))

    async def keep_quiet_mark(self, scope: str, mark: QuietMark) -> None:
        async with self.database.session("keeping a dead-letter queue's quiet mark") as conn:
            await conn.execute(
                QUERIES["keep_quiet_mark"],
                scope,
                for_storage(mark.queue),
                mark.proven_at,
                mark.proven,
                mark.letters,
                mark.message_bytes,
                mark.published,
                mark.fetched,
                mark.acknowledged,
            )

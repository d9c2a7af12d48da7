"""What is watched across passes (:mod:`reaper.core.observation`), kept per vhost in the
reaper's own table so that whichever reaper of the fleet runs the next pass continues it."""

from __future__ import annotations

from collections.abc import Sequence

from reaper.core.observation import Observation, Watch
from reaper.core.storable import for_storage, from_storage
from reaper.jobqueue.database import Database
from reaper.jobqueue.sql import QUERIES

__all__ = ["keep", "observations"]


async def observations(db: Database, scope: str) -> list[Observation]:
    async with db.session("reading what was observed") as conn:
        rows = await conn.fetch(QUERIES["observations"], scope)
    return [
        Observation(Watch(r["watch"]), from_storage(r["key"]), r["since"], r["counter"], r["level"])
        for r in rows
        if r["watch"] in Watch.__members__.values()
    ]


async def keep(db: Database, scope: str, observations: Sequence[Observation]) -> None:
    async with db.session("keeping what was observed") as conn:
        await conn.execute(
            QUERIES["keep_observations"],
            scope,
            [o.watch.value for o in observations],
            [for_storage(o.key) for o in observations],
            [o.since for o in observations],
            [o.counter for o in observations],
            [o.level for o in observations],
        )

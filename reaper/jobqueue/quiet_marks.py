"""Quiet marks (:mod:`reaper.core.dead_letters.quiet`), kept per vhost in the reaper's own
table so that whichever reaper of the fleet runs the next pass knows what the last one proved."""

from __future__ import annotations

from reaper.core.dead_letters import QuietMark
from reaper.core.storable import for_storage, from_storage
from reaper.jobqueue.database import Database
from reaper.jobqueue.sql import QUERIES

__all__ = ["keep", "quiet_mark"]


async def quiet_mark(db: Database, scope: str, queue: str) -> QuietMark | None:
    async with db.session("reading a dead-letter queue's quiet mark") as conn:
        row = await conn.fetchrow(QUERIES["quiet_mark"], scope, for_storage(queue))
    if row is None:
        return None
    return QuietMark(
        queue=from_storage(row["queue"]),
        proven_at=row["proven_at"],
        proven=row["proven"],
        letters=row["letters"],
        message_bytes=row["message_bytes"],
        published=row["published"],
        fetched=row["fetched"],
        acknowledged=row["acknowledged"],
    )


async def keep(db: Database, scope: str, mark: QuietMark) -> None:
    async with db.session("keeping a dead-letter queue's quiet mark") as conn:
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

"""Who keeps ``reaper db migrate`` waiting for a lock, as PostgreSQL shows it.

Once a statement has given up on its lock (``lock_timeout``), its wait is over and
``pg_blocking_pids`` has nothing left to say. So while the migrator runs, a second connection
of its own asks every tenth of the lock timeout which sessions block it, and keeps the last
answer: the sessions it was waiting for when it gave up, observed rather than guessed. Each is
described from ``pg_stat_activity`` and ``pg_locks``.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from reaper.errors import StoreUnavailable
from reaper.jobqueue.database import Connection, Database, Record
from reaper.schema.sql import MIGRATE

__all__ = ["BlockingSession", "LockWatch", "watching"]

#: The longest pause between two looks at who blocks the migrator.
LONGEST_POLL_SECONDS: Final = 0.1

#: A password in SQL text (``ALTER ROLE ... PASSWORD '...'``) that ``scrub`` does not know.
_SQL_PASSWORD: Final = re.compile(r"(?i)\b(password)\s+'(?:[^']|'')*'?")


@dataclass(frozen=True)
class BlockingSession:
    """A session that held (or waited ahead of the migrator for) a lock it needed."""

    pid: int
    application_name: str
    user: str | None
    state: str | None
    #: What it waits for itself (``Lock/relation``), when it is not the holder but queued ahead.
    waiting_for: str | None
    transaction_start: datetime | None
    transaction_seconds: float | None
    #: The start of its current (or last) statement, whitespace collapsed.
    query: str
    #: The locks it holds on this database's tables (``RowExclusiveLock on job``).
    holds: str | None

    def describe(self) -> str:
        parts = [
            f"pid {self.pid}",
            f"application_name {self.application_name!r}",
            f"user {self.user!r}",
            f"state {self.state!r}",
        ]
        if self.transaction_seconds is not None:
            parts.append(f"transaction open {self.transaction_seconds:.1f} s")
        if self.waiting_for:
            parts.append(f"itself waiting for {self.waiting_for}")
        if self.holds:
            parts.append(f"holding {self.holds}")
        query = _SQL_PASSWORD.sub(r"\1 '***'", self.query)
        parts.append(f"query {query!r}")
        return ", ".join(parts)


def session_of(row: Record) -> BlockingSession:
    waiting = None
    if row["state"] == "active" and row["wait_event_type"] == "Lock":
        waiting = f"a {row['wait_event']} lock"
    return BlockingSession(
        pid=row["pid"],
        application_name=row["application_name"] or "",
        user=row["user_name"],
        state=row["state"],
        waiting_for=waiting,
        transaction_start=row["xact_start"],
        transaction_seconds=row["transaction_seconds"],
        query=row["query"] or "",
        holds=row["holds"],
    )


class LockWatch:
    """Watches, from ``conn`` (a connection of its own), which sessions block ``pid``."""

    def __init__(self, db: Database, conn: Connection, pid: int, lock_timeout: float) -> None:
        self._db = db
        self._conn = conn
        self._pid = pid
        self._interval = min(LONGEST_POLL_SECONDS, lock_timeout / 10)
        self._lock = asyncio.Lock()
        #: The blockers seen last since :meth:`clear` (empty: none seen).
        self.seen: tuple[BlockingSession, ...] = ()
        #: Why the watch stopped early (its connection failed), if it did.
        self.failed: str | None = None

    def clear(self) -> None:
        self.seen = ()

    async def still_open(self, sessions: Sequence[BlockingSession]) -> tuple[BlockingSession, ...]:
        """Those of ``sessions`` whose transaction is still the one that blocked, as they are
        now (a transaction still open after a pause is a long one)."""
        if not sessions or self.failed is not None:
            return ()
        then = {s.pid: s.transaction_start for s in sessions}
        try:
            async with self._lock, self._db.seam("looking at the sessions that blocked"):
                rows = await self._conn.fetch(MIGRATE["sessions"], None, list(then))
        except StoreUnavailable as exc:
            self.failed = exc.reason
            return ()
        now = (session_of(r) for r in rows)
        return tuple(
            s for s in now if s.transaction_start is not None and then[s.pid] == s.transaction_start
        )

    async def _watch(self) -> None:
        try:
            while True:
                await asyncio.sleep(self._interval)
                async with self._lock, self._db.seam("watching for sessions that block"):
                    rows = await self._conn.fetch(MIGRATE["sessions"], self._pid, None)
                if rows:
                    self.seen = tuple(session_of(r) for r in rows)
        except StoreUnavailable as exc:
            self.failed = exc.reason


@contextlib.asynccontextmanager
async def watching(
    db: Database, conn: Connection, pid: int, lock_timeout: float
) -> AsyncIterator[LockWatch]:
    """A :class:`LockWatch` of ``pid`` from ``conn``, looking until the block ends (its task
    cancelled then)."""
    watch = LockWatch(db, conn, pid, lock_timeout)
    task = asyncio.create_task(watch._watch())
    try:
        yield watch
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

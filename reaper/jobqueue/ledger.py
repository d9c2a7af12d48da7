"""The ledger: append-only events, gapless per stream, on streams the host appends to too.

Its events are ``QueueReaped`` and ``GateAnswered`` (SPEC §3, §10). The reaper is never the only
writer. An event's number is the stream's last number plus one, read from the ledger itself in
the statement that inserts it: never from a counter of the reaper's own, which a host writing
``max(seq) + 1`` would leave behind. Reapers take turns on a stream (an advisory lock per
stream, held until commit, taken in stream order). The host's writers do not take those locks: a
number one of them takes between the read and the insert is left to it (``ON CONFLICT DO
NOTHING``), and the event it would have had goes after it, in the same transaction: never lost,
never numbered twice, the stream gapless whoever wrote it; each move or park commits with its
event or not at all.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final
from uuid import UUID

from reaper.core.canonical import canonical_json, digest_of
from reaper.core.domain import EVENT_KIND, Verdict
from reaper.core.records import LedgerEvent
from reaper.core.storable import payload_for_storage
from reaper.errors import StoreUnavailable
from reaper.jobqueue.database import Connection, Database
from reaper.jobqueue.port import EventFilter
from reaper.jobqueue.sql import QUERIES

__all__ = [
    "ROUNDS",
    "Event",
    "Ledger",
    "LedgerContention",
    "append",
    "event_of",
    "lock_streams",
]

#: How many rounds of appending one set of events may take before giving up. A round writes
#: every event whose number no host writer took first; the rest go in the next round, after
#: the host's. A host appending to the same streams in a tight loop costs a round or two
#: (measured: tests/integration/test_shared_ledger.py).
ROUNDS: Final = 50


class LedgerContention(StoreUnavailable):
    """Host writers took the numbers of some events in every one of ``ROUNDS`` rounds."""


@dataclass(frozen=True)
class Event:
    """One event to append: its stream, its payload's canonical JSON and that JSON's digest."""

    stream: UUID
    canonical: str
    digest: str
    trusted: bool
    kind: str = EVENT_KIND


def event_of(verdict: Verdict) -> Event:
    """The ``QueueReaped`` event recording ``verdict``, on the stream it belongs to: its
    strings as PostgreSQL can store them (:mod:`reaper.core.storable`)."""
    canonical = canonical_json(payload_for_storage(verdict.payload()))
    return Event(verdict.stream, canonical, digest_of(canonical), verdict.trusted)


async def lock_streams(conn: Connection, streams: Sequence[UUID]) -> None:
    """Take this transaction's turn on ``streams`` among reapers (until commit)."""
    await conn.fetchval(QUERIES["lock_streams"], sorted(set(streams)))


async def append(
    conn: Connection, events: Sequence[Event], now: datetime, *, locked: bool = False
) -> list[tuple[UUID, int]]:
    """Append ``events`` inside the caller's transaction, in order but for
    those whose numbers a host writer took first, which follow; the stream and number each
    took. ``locked``: the caller already holds the streams' locks."""
    if not events:
        return []
    if not locked:
        await lock_streams(conn, [e.stream for e in events])
    pending = list(events)
    written: list[tuple[UUID, int]] = []
    for round_ in range(ROUNDS):
        row = await conn.fetchrow(
            QUERIES["append_events"],
            [e.stream for e in pending],
            [e.canonical for e in pending],
            [e.digest for e in pending],
            [e.trusted for e in pending],
            now,
            [e.kind for e in pending],
        )
        written += zip(row["streams"] or (), row["seqs"] or (), strict=True)
        if not row["unwritten"]:
            return written
        pending = [pending[i - 1] for i in row["unwritten"]]
        # the host's writer commits within moments; a short, growing, jittered pause keeps
        # the next round from meeting it in step
        await asyncio.sleep(random.uniform(0, 0.001 * (round_ + 1)))
    raise LedgerContention(
        f"host writers took the ledger's next numbers in each of {ROUNDS} rounds: "
        f"{len(pending)} event(s) were not written, and nothing of this transaction was"
    )


class Ledger:
    """The ledger's events read, counted, and its streams found by a prefix of their id."""

    database: Database

    async def events(self, project_id: UUID) -> list[LedgerEvent]:
        """One stream's events, in sequence order."""
        async with self.database.session("reading the ledger") as conn:
            rows = await conn.fetch(QUERIES["ledger_events"], project_id)
        return [LedgerEvent(r[0], r[1], r[2], json.loads(r[3]), r[4], r[5], r[6]) for r in rows]

    async def read_events(self, chosen: EventFilter) -> list[LedgerEvent]:
        """The newest ``chosen.limit`` events ``chosen`` selects, across streams, oldest first."""
        async with self.database.session("reading the ledger") as conn:
            rows = await conn.fetch(QUERIES["read_events"], *chosen.values(), chosen.limit)
        return [LedgerEvent(r[0], r[1], r[2], json.loads(r[3]), r[4], r[5], r[6]) for r in rows]

    async def count_events(self, chosen: EventFilter) -> int:
        async with self.database.session("counting the ledger's events") as conn:
            found: int = await conn.fetchval(QUERIES["count_events"], *chosen.values())
        return found

    async def streams_between(self, low: UUID, high: UUID, limit: int) -> list[UUID]:
        async with self.database.session("reading the ledger's streams") as conn:
            return [r[0] for r in await conn.fetch(QUERIES["streams_between"], low, high, limit)]

"""The ledger (SPEC §3): append-only ``QueueReaped`` events, gapless per stream.

Events are appended inside the caller's transaction, so each move or park commits with its
event or not at all. A stream's sequence numbers are reserved first (``allocate_seqs``: the
stream rows stay locked until the caller commits), then the events go in with COPY, the
cheapest way in.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final
from uuid import UUID

from reaper.core.canonical import canonical_json, digest_of
from reaper.core.domain import EVENT_KIND, LedgerEvent, Verdict
from reaper.jobqueue.database import Connection
from reaper.jobqueue.sql import QUERIES

__all__ = ["EVENT_COLUMNS", "Event", "append", "event_of", "stream"]

#: The ``event`` columns written by COPY, in order.
EVENT_COLUMNS: Final = ("project_id", "seq", "kind", "payload", "digest", "trusted", "created_at")


@dataclass(frozen=True)
class Event:
    """One event to append: its stream, its payload's canonical JSON and that JSON's digest."""

    stream: UUID
    canonical: str
    digest: str
    trusted: bool


def event_of(verdict: Verdict) -> Event:
    """The ``QueueReaped`` event recording ``verdict``, on the stream it belongs to."""
    canonical = canonical_json(verdict.payload())
    return Event(verdict.stream, canonical, digest_of(canonical), verdict.trusted)


async def append(conn: Connection, events: Sequence[Event], now: datetime) -> None:
    """Append ``events`` as ``QueueReaped``, in order, inside the caller's transaction."""
    if not events:
        return
    counts = Counter(event.stream for event in events)
    streams = sorted(counts)
    rows = await conn.fetch(QUERIES["allocate_seqs"], streams, [counts[s] for s in streams])
    last = {r[0]: r[1] - counts[r[0]] for r in rows}
    records = []
    for event in events:
        last[event.stream] += 1
        records.append(
            (
                event.stream,
                last[event.stream],
                EVENT_KIND,
                event.canonical,
                event.digest,
                event.trusted,
                now,
            )
        )
    await conn.copy_records_to_table("event", records=records, columns=EVENT_COLUMNS)


async def stream(conn: Connection, project_id: UUID) -> list[LedgerEvent]:
    """One stream's events, in sequence order."""
    rows = await conn.fetch(QUERIES["ledger_events"], project_id)
    return [LedgerEvent(r[0], r[1], r[2], json.loads(r[3]), r[4], r[5], r[6]) for r in rows]

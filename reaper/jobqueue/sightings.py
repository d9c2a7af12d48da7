"""Sightings in the ledger: the store's half of :mod:`reaper.core.sightings`.

Race-free across reapers: every sighting in question is locked (transaction advisory locks, in
ascending order, a thousand sightings per transaction), its latest record re-read under the
lock, the pure rule applied, and the records appended before the locks are released. The
ledger decides, not the process.

What is open is found in ``reaper_open_sighting``, an index of the open sightings kept in the
same transaction as the records that open and close them, so finding them costs what is open,
not the ledger's age; it only nominates: the latest record, re-read under the lock, decides.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import datetime

from reaper.core import sightings
from reaper.core.domain import Action, SightingKey, Verdict
from reaper.core.storable import for_storage, payload_from_storage
from reaper.jobqueue import ledger
from reaper.jobqueue.database import Connection, Database, Record
from reaper.jobqueue.port import SightingsRecorded
from reaper.jobqueue.sql import QUERIES

__all__ = ["Sightings"]


async def _index(
    conn: Connection, records: Sequence[Verdict], events: Sequence[ledger.Event]
) -> None:
    """Keep the index of open sightings in step with the records just appended."""
    opened = [(v, e) for v, e in zip(records, events, strict=True) if v.action is Action.SURFACE]
    closed = [v for v in records if v.action is Action.CLEARED]
    if opened:
        keys = [sightings.ref_of(v) for v, _ in opened]
        await conn.execute(
            QUERIES["open_sightings_opened"],
            *_columns(keys),
            [e.canonical for _, e in opened],
            [e.trusted for _, e in opened],
        )
    if closed:
        await conn.execute(
            QUERIES["open_sightings_closed"], *_columns([sightings.ref_of(v) for v in closed])
        )


def _columns(refs: Sequence[sightings.SightingRef]) -> list[list[object]]:
    return [
        [r.stream for r in refs],
        [r.key.source.value for r in refs],
        [r.key.condition.value for r in refs],
        [for_storage(r.key.scope) for r in refs],
    ]


def _record_verdict(row: Record) -> Verdict:
    return sightings.verdict_from_record(
        row["project_id"], payload_from_storage(json.loads(row["payload"])), row["trusted"]
    )


def _lock_key(ref: sightings.SightingRef) -> int:
    """A stable signed 64-bit advisory lock key for one sighting."""
    text = f"sighting|{ref.stream}|{ref.key.source}|{ref.key.condition}|{ref.key.scope}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big", signed=True)


class Sightings:
    """The store's sightings: recorded under their locks, and read."""

    database: Database

    async def record_sightings(
        self, observed: Sequence[Verdict], seen_by: sightings.SightingsPass
    ) -> SightingsRecorded:
        """Record what the surfaced verdicts of one pass mean for the ledger's sightings and
        return the records written (the observed verdicts that opened a sighting, the very objects
        passed in, and the ``cleared`` records), with since when each sighting observed that was
        open already has been open (its surface record's ``created_at``)."""
        now, sources_read = seen_by.now, seen_by.sources_read
        project_id, unread_queues = seen_by.project_id, seen_by.unread_queues
        seen = sightings.observed_sightings(observed)
        async with self.database.session("recording sightings") as conn:
            candidates = set(seen)
            for row in await conn.fetch(
                QUERIES["open_sightings"], sorted(s.value for s in sources_read), project_id
            ):
                record = _record_verdict(row)
                if sightings.is_read(record, sources_read, project_id, unread_queues):
                    candidates.add(sightings.ref_of(record))
            if not candidates:
                return SightingsRecorded([])
            latest: dict[sightings.SightingRef, Verdict] = {}
            opened_at: dict[sightings.SightingRef, datetime] = {}
            records: list[Verdict] = []
            for batch in sightings.batches(candidates):
                async with conn.transaction():
                    await conn.fetchval(QUERIES["lock_sightings"], [_lock_key(r) for r in batch])
                    rows = await conn.fetch(QUERIES["latest_sightings"], *_columns(batch))
                    found = {batch[row["ord"] - 1]: _record_verdict(row) for row in rows}
                    opened_at.update({batch[row["ord"] - 1]: row["created_at"] for row in rows})
                    mine = {r: seen[r] for r in batch if r in seen}
                    written = sightings.records_to_write(
                        mine, found, sources_read, project_id, unread_queues
                    )
                    events = [ledger.event_of(v) for v in written]
                    await ledger.append(conn, events, now)
                    await _index(conn, written, events)
                latest.update(found)
                records.extend(written)
        # As one transaction would have written them: the observed first, in their order.
        order = {id(v): i for i, v in enumerate(seen.values())}
        records.sort(key=lambda v: order.get(id(v), len(order)))
        since = {
            ref.key: opened_at[ref]
            for ref in seen
            if ref in latest and latest[ref].action is Action.SURFACE
        }
        return SightingsRecorded(records, since)

    async def sightings_open_since(
        self, observed: Sequence[Verdict]
    ) -> dict[SightingKey, datetime]:
        """Which of the sightings of the surfaced verdicts ``observed`` are open in the ledger, and
        since when: read only, nothing locked or written (a dry run's view of what is on record)."""
        refs = sorted(sightings.observed_sightings(observed))
        if not refs:
            return {}
        async with self.database.session("reading the open sightings") as conn:
            rows = await conn.fetch(QUERIES["latest_sightings"], *_columns(refs))
        return {
            refs[row["ord"] - 1].key: row["created_at"]
            for row in rows
            if _record_verdict(row).action is Action.SURFACE
        }

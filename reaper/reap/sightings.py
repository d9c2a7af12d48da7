"""The pass's recording step (SPEC §1 "Sightings"): the surfaced verdicts go to the ledger's
sightings, recorded when first seen and cleared once gone, fleet-wide; and the open gates of
the jobs this pass parked are looked up for the report."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from reaper.core.domain import Action, SightingKey, Source, Verdict
from reaper.errors import SourceUnreadable
from reaper.jobqueue.port import JobQueue
from reaper.reap.lease_log import LeaseLog
from reaper.reap.progress import SIGHTINGS_WRITE, Found, RecordedVerdict, written

__all__ = ["SightingsOutcome", "gates_of_parks", "record_sightings", "sightings_on_record"]


@dataclass(frozen=True)
class SightingsOutcome:
    found: Found = field(default_factory=Found)
    #: Since when each finding already on record has been open, by its sighting key.
    since: Mapping[SightingKey, datetime] = field(default_factory=dict)


async def record_sightings(
    store: JobQueue | None,
    surfaced: Sequence[Verdict],
    now: datetime,
    *,
    sources_read: frozenset[Source],
    unmeasured: frozenset[str],
    project_id: UUID | None,
) -> SightingsOutcome:
    """First seen, and cleared once gone: the ledger decides, fleet-wide. A source not read in
    full, or a queue the pass could not measure, clears nothing. ``store`` None: no ledger to
    write (a dry run, or the database unread), so nothing is recorded."""
    if store is None:
        return SightingsOutcome(Found.recorded(surfaced, False))
    recorded, found = await written(
        store.record_sightings(
            surfaced,
            now=now,
            sources_read=sources_read,
            project_id=project_id,
            unread_queues=unmeasured,
        ),
        SIGHTINGS_WRITE,
    )
    records = recorded.records if recorded is not None else []
    opened = {w.sighting_key for w in records if w.action is Action.SURFACE}
    cleared = [w for w in records if w.action is Action.CLEARED]
    verdicts = [RecordedVerdict(v, v.sighting_key in opened) for v in surfaced]
    found += Found(verdicts=tuple(verdicts)) + Found.recorded(cleared, True)
    return SightingsOutcome(found, recorded.since if recorded is not None else {})


async def sightings_on_record(
    store: JobQueue | None, surfaced: Sequence[Verdict]
) -> SightingsOutcome:
    """A dry run's view of the ledger's sightings: which findings are on record already, and
    since when, read without a lock or a write; the rest would be recorded. ``store`` None (the
    database unread): nothing is known to be on record."""
    outcome = SightingsOutcome(Found.recorded(surfaced, False))
    if store is None or not surfaced:
        return outcome
    try:
        since = await store.sightings_open_since(surfaced)
    except SourceUnreadable as exc:
        return SightingsOutcome(
            outcome.found + Found.noted(f"the open sightings could not be read: {exc.reason}")
        )
    return SightingsOutcome(outcome.found, since)


async def gates_of_parks(
    store: JobQueue | None, leases: LeaseLog, verdicts: Sequence[RecordedVerdict], now: datetime
) -> tuple[dict[str, UUID], Found]:
    """The gates this pass's parks raised (at ``now``, the pass's instant), by job, when it
    parked one: the report names the gate each park waits behind, and the command that answers
    it. The older open gates are not read: there may be thousands."""
    parked = any(r.applied and r.verdict.action is Action.PARK for r in verdicts)
    parked = parked or any(a is Action.PARK and rec for (_, a, _, rec) in leases.tally)
    if store is None or not parked:
        return {}, Found()
    try:
        gates = await store.list_gates(open_only=True, raised_since=now)
    except SourceUnreadable as exc:
        return {}, Found.noted(f"the gates of this pass's parks could not be listed: {exc.reason}")
    return {str(g.job_id): g.id for g in gates if g.job_id is not None}, Found()

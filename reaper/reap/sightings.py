"""The pass's recording step: the surfaced verdicts recorded as the ledger's sightings.

The pass's recording step (SPEC §1 "Sightings"): the surfaced verdicts go to the ledger's
sightings, recorded when first seen and cleared once gone, fleet-wide; and the open gates of
the jobs this pass parked are looked up for the report, and the board of open gates is read
as the pass ends, for the report's notes and the metrics."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from reaper.core.domain import Action, Condition, Judgement, SightingKey, Source, Verdict
from reaper.core.sightings import SightingsPass
from reaper.errors import SourceUnreadable
from reaper.gates.board import GateBoard, board_of
from reaper.jobqueue.port import GateFilter, JobQueue
from reaper.reap.context import Pass
from reaper.reap.dead_letters import DeadLettersOutcome
from reaper.reap.leases import LeaseListing
from reaper.reap.progress import SIGHTINGS_WRITE, Found, RecordedVerdict, Unreadable, written

__all__ = [
    "GatesOutcome",
    "SightingsOutcome",
    "gates_of_parks",
    "record",
    "record_sightings",
    "sightings_on_record",
]


@dataclass(frozen=True)
class SightingsOutcome:
    found: Found = field(default_factory=Found)
    #: Since when each finding already on record has been open, by its sighting key.
    since: Mapping[SightingKey, datetime] = field(default_factory=dict)


@dataclass(frozen=True)
class GatesOutcome:
    #: The open gate of each job this pass parked (by job id), for the answer command.
    by_job: Mapping[str, UUID] = field(default_factory=dict)
    found: Found = field(default_factory=Found)
    #: What waits for a person as the pass ended, read over the pass's own connection (None:
    #: not read; ``board_error`` says why when it was tried).
    board: GateBoard | None = None
    board_error: str | None = None


async def record(
    p: Pass,
    judgement: Judgement,
    dead_letters: DeadLettersOutcome,
    unreadable: Sequence[Unreadable],
) -> SightingsOutcome:
    """The surfaced verdicts to the ledger's sightings (none in a lease-only pass, nor once the
    pass was asked to stop); a dry run only reads which are on record already. ``unreadable``:
    what the steps before could not read, which clears nothing."""
    if p.leases_only or p.stop():
        return SightingsOutcome()
    surfaced = [
        v
        for v in judgement.verdicts
        if v.action is Action.SURFACE and v.condition is not Condition.DEAD_LETTER
    ]
    surfaced += dead_letters.surfaced
    if p.dry_run:
        return await sightings_on_record(p.store, surfaced)
    broker = p.reading.broker
    return await record_sightings(
        p.ledger,
        surfaced,
        p.now,
        sources_read=_sources_read(p, unreadable),
        unmeasured=broker.unmeasured() if broker else frozenset(),
        project_id=p.config.project_id,
    )


def _sources_read(p: Pass, unreadable: Sequence[Unreadable]) -> frozenset[Source]:
    """The sources read in full: a source that failed at any step of this pass clears
    nothing, even if it was measured. A queue that could not be measured leaves its source
    read; its own sightings stay as they are (``unmeasured``)."""
    failed = {u.source for u in unreadable if u.queue is None}
    read = ((Source.JOB_QUEUE, p.reading.job_queue), (Source.BROKER, p.reading.broker))
    return frozenset(source for source, got in read if got and source.value not in failed)


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
            SightingsPass(
                now=now, sources_read=sources_read, project_id=project_id, unread_queues=unmeasured
            ),
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
    p: Pass, leases: LeaseListing, verdicts: Sequence[RecordedVerdict]
) -> GatesOutcome:
    """The gates this pass's parks raised (at the pass's instant), by job, when it parked one:
    the report names the gate each park waits behind, and the command that answers it. The
    older open gates are not listed (there may be thousands): the board counts them."""
    parked = any(r.applied and r.verdict.action is Action.PARK for r in verdicts)
    parked = parked or (leases.recorded and any(poison for _, poison in leases.reap.moves))
    board, why = await _board(p)
    if p.ledger is None or not parked:
        return GatesOutcome(board=board, board_error=why)
    try:
        gates = await p.ledger.list_gates(GateFilter(open_only=True, raised_since=p.now))
    except SourceUnreadable as exc:
        said = f"the gates of this pass's parks could not be listed: {exc.reason}"
        return GatesOutcome(found=Found.noted(said), board=board, board_error=why)
    by_job = {str(g.job_id): g.id for g in gates if g.job_id is not None}
    return GatesOutcome(by_job, board=board, board_error=why)


async def _board(p: Pass) -> tuple[GateBoard | None, str | None]:
    """The board (what waits for a person), read while the pass's store is open, so that
    nothing opens it again to print or export it; not in a lease-only pass."""
    if p.leases_only:
        return None, None
    if p.store is None:
        return None, "the job queue could not be read"
    try:
        return await board_of(p.store), None
    except SourceUnreadable as exc:
        return None, str(exc)

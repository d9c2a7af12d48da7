"""One pass: config → measure → observe → judge → act → reconcile → record → report → export
(SPEC §5).

:func:`run_pass` is the only entry point. It reads both sources concurrently, judges with the
pure judge, acts (unless dry-run), and returns one :class:`~reaper.reap.result.PassResult` that
the CLI prints, the metrics export and the worker hook logs. It never raises for a source that
cannot be read: that source is named in ``unreadable`` and nothing is concluded from it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import UUID

from reaper.broker.port import Broker, ManagementEndpoint
from reaper.config import Settings
from reaper.core.domain import Action, Condition, Dispatch, SightingKey, Source, Verdict
from reaper.core.judge import judge
from reaper.errors import SourceUnreadable
from reaper.jobqueue.database import where
from reaper.jobqueue.port import JobQueue
from reaper.policies.reconcile import PolicyOutcome
from reaper.reap.dead_letters import DeadLetterOutcome, park_dead_letters
from reaper.reap.lease_log import LeaseLog, VerdictLog
from reaper.reap.leases import reap_leases
from reaper.reap.measure import Reading, measure
from reaper.reap.observe import observe_broker
from reaper.reap.policies import reconcile_policies
from reaper.reap.progress import SIGHTINGS_WRITE, Progress, RecordedVerdict, Unreadable
from reaper.reap.result import PassResult, Target
from reaper.reap.sources import open_sources

__all__ = ["reap_once", "run_pass", "utcnow"]


def utcnow() -> datetime:
    return datetime.now(UTC)


async def run_pass(
    settings: Settings,
    *,
    store: JobQueue | None,
    broker: Broker | None,
    dry_run: bool = False,
    project_id: UUID | None = None,
    clock: Callable[[], datetime] = utcnow,
    monotonic: Callable[[], float] = time.monotonic,
    store_error: str | None = None,
    broker_error: str | None = None,
    policies_dir: Path | None = None,
    leases_only: bool = False,
) -> PassResult:
    """Run one whole pass over already-opened sources.

    A source passed as ``None`` could not be opened; ``store_error``/``broker_error`` say
    why. The steps run in this order: measure (both sources at once), judge, act on the job
    queue, reconcile the policies, read and park dead letters, record sightings. Dead letters
    are read after reconciliation because their safety proof rests on the dead-letter policy
    being in force. A dry run judges, plans and reports the same, and writes nothing.

    ``now`` is the database's clock, read once as the pass begins (``clock``, the reaper's
    own, stands in only when the database cannot be read, and then nothing the host wrote is
    judged); the report's times are that ``now`` and ``now`` plus the pass's duration.

    ``leases_only`` is the pass of a hook switched off (``[queue.reap] enabled = false``): the
    lease reap alone (expired leases requeued, poison parked), which is crash recovery and never
    switches off. It reads no broker (``broker`` must be None), measures no stale-ready work
    and records or clears no sighting.
    """
    if leases_only and broker is not None:
        raise ValueError("a lease-only pass reads no broker")
    began = monotonic()
    progress = Progress()
    lease_log = LeaseLog()
    if broker is not None:
        broker.begin_pass()
    if store is None:
        progress.unreadable.append(
            Unreadable(Source.JOB_QUEUE.value, store_error or "not connected")
        )
    if broker is None and not leases_only:
        progress.unreadable.append(Unreadable(Source.BROKER.value, broker_error or "not connected"))
    insecure = settings.bus.tls_warning()
    if insecure is not None and not leases_only:
        progress.notes.append(insecure)
    if leases_only:
        progress.notes.append(
            "the hook is switched off (queue.reap.enabled = false): the lease reap alone ran "
            "(expired leases, poison); stale-ready work and the broker were not measured"
        )

    reading = await measure(settings, store, broker, project_id, progress, leases_only=leases_only)
    now = reading.job_queue.now if reading.job_queue else clock()
    observed = await observe_broker(
        settings,
        store if reading.job_queue is not None else None,
        reading.broker,
        now,
        keep=not dry_run,
        progress=progress,
    )
    measurements = replace(reading.measurements(), observed=observed)
    judgement = judge(measurements, settings.thresholds(), now)
    progress.notes.extend(judgement.notes)
    # The ledger lives in PostgreSQL: without it nothing is written, not even broker news.
    writable = not dry_run and store is not None and reading.job_queue is not None
    if not dry_run and not writable:
        progress.notes.append("the ledger (PostgreSQL) could not be read: nothing was written")
    ledger = store if writable else None

    dispatch = reading.job_queue.dispatch if reading.job_queue else None
    mode = dispatch.mode if dispatch else Dispatch.POLLING
    leases_remaining = 0
    if reading.job_queue is not None and store is not None:
        leases_remaining = await reap_leases(
            store,
            settings.thresholds(),
            now,
            budget_seconds=settings.queue.reap.lease_reap_budget(),
            project_id=project_id,
            dispatch=mode,
            write=writable,
            log=lease_log,
            progress=progress,
            monotonic=monotonic,
        )

    policies: list[PolicyOutcome] = []
    dead_letters: list[DeadLetterOutcome] = []
    surfaced = [
        v
        for v in judgement.verdicts
        if v.action is Action.SURFACE and v.condition is not Condition.DEAD_LETTER
    ]
    if reading.broker is not None and broker is not None:
        facts = reading.broker.facts
        policies = await reconcile_policies(
            settings,
            broker,
            facts,
            dry_run=dry_run,
            policies_dir=policies_dir,
            progress=progress,
            queues=reading.broker.queues + tuple(q for q, _ in reading.broker.unavailable),
        )
        dead_letters, dead_surfaced = await park_dead_letters(
            settings,
            broker,
            store,
            facts,
            [v for v in judgement.verdicts if v.condition is Condition.DEAD_LETTER],
            now=now,
            dry_run=dry_run,
            writable=writable,
            dispatch=mode,
            progress=progress,
        )
        surfaced += dead_surfaced

    if not leases_only:
        unmeasured = reading.broker.unmeasured() if reading.broker else frozenset()
        await _record_sightings(
            ledger,
            surfaced,
            now,
            _sources_read(reading, progress),
            unmeasured,
            project_id,
            progress,
        )
    gates = await _gates_of_parks(ledger, lease_log, progress)
    since = await _open_since(ledger, progress)
    endpoints = broker.endpoints() if broker is not None else ()
    progress.notes.extend(_failover_notes(endpoints))

    return PassResult(
        dry_run=dry_run,
        started_at=now,
        finished_at=now + timedelta(seconds=monotonic() - began),
        broker=reading.broker.facts if reading.broker else None,
        verdicts=VerdictLog(lease_log, progress.verdicts),
        policies=tuple(policies),
        dead_letters=tuple(dead_letters),
        unreadable=tuple(progress.unreadable),
        notes=tuple(dict.fromkeys(progress.notes)),
        queues=reading.broker.queues if reading.broker else (),
        claimable=(reading.job_queue.claimable or ()) if reading.job_queue else (),
        project_id=project_id,
        not_moved=tuple(progress.not_moved),
        dispatch=dispatch,
        management=endpoints,
        target=Target(
            where(settings.database.dsn),
            settings.bus.vhost,
            tuple(e.url for e in endpoints if e.answered),
        ),
        # The lease reap reads every expired lease a page at a time: those it judged, and
        # those its budget left.
        expired_leases=len(lease_log) + leases_remaining if reading.job_queue else None,
        thresholds=settings.thresholds(),
        gates=gates,
        leases_remaining=leases_remaining,
        since=since,
    )


async def _gates_of_parks(
    store: JobQueue | None, leases: LeaseLog, progress: Progress
) -> dict[str, UUID]:
    """The open gates, by job, when this pass parked a job: the report names the gate each
    park waits behind, and the command that answers it."""
    parked = any(r.applied and r.verdict.action is Action.PARK for r in progress.verdicts)
    parked = parked or any(a is Action.PARK and rec for (_, a, _, rec) in leases.tally)
    if store is None or not parked:
        return {}
    try:
        gates = await store.list_gates(open_only=True)
    except SourceUnreadable as exc:
        progress.notes.append(f"the gates of this pass's parks could not be listed: {exc.reason}")
        return {}
    return {str(g.job_id): g.id for g in gates if g.job_id is not None}


async def _open_since(store: JobQueue | None, progress: Progress) -> dict[SightingKey, datetime]:
    """When each finding already on record opened its sighting: the report says since when."""
    seen = [
        r.verdict
        for r in progress.verdicts
        if r.verdict.action is Action.SURFACE and not r.recorded
    ]
    if store is None or not seen:
        return {}
    try:
        return await store.sightings_open_since(seen)
    except SourceUnreadable as exc:
        progress.notes.append(f"when the open findings began could not be read: {exc.reason}")
        return {}


def _sources_read(reading: Reading, progress: Progress) -> frozenset[Source]:
    """The sources read in full: a source that failed at any step of this pass clears
    nothing, even if it was measured. A queue that could not be measured leaves its source
    read; its own sightings stay as they are (``unmeasured``)."""
    failed = {u.source for u in progress.unreadable if u.queue is None}
    read = ((Source.JOB_QUEUE, reading.job_queue), (Source.BROKER, reading.broker))
    return frozenset(source for source, got in read if got and source.value not in failed)


async def _record_sightings(
    store: JobQueue | None,
    surfaced: Sequence[Verdict],
    now: datetime,
    sources_read: frozenset[Source],
    unmeasured: frozenset[str],
    project_id: UUID | None,
    progress: Progress,
) -> None:
    """First seen, and cleared once gone: the ledger decides, fleet-wide. A queue the pass
    could not measure clears nothing."""
    if store is None:
        progress.record(list(surfaced), False)
        return
    written = await progress.written(
        store.record_sightings(
            surfaced,
            now=now,
            sources_read=sources_read,
            project_id=project_id,
            unread_queues=unmeasured,
        ),
        SIGHTINGS_WRITE,
    )
    opened = {w.sighting_key for w in written or () if w.action is Action.SURFACE}
    progress.verdicts.extend(RecordedVerdict(v, v.sighting_key in opened) for v in surfaced)
    progress.record([w for w in written or () if w.action is Action.CLEARED], True)


def _failover_notes(endpoints: Sequence[ManagementEndpoint]) -> list[str]:
    """Each management URL skipped in this pass, and which answered instead."""
    answered = [e.url for e in endpoints if e.answered]
    instead = f"; {', '.join(answered)} answered instead" if answered else ""
    return [
        f"management URL {e.url} was skipped for the rest of this pass: it {e.error}{instead}"
        for e in endpoints
        if e.answered is False
    ]


async def reap_once(
    settings: Settings,
    *,
    dry_run: bool = False,
    project_id: UUID | None = None,
    clock: Callable[[], datetime] = utcnow,
) -> PassResult:
    """Open both sources, run one pass, close them."""
    sources = await open_sources(settings)
    try:
        return await run_pass(
            settings,
            store=sources.store,
            broker=sources.broker,
            dry_run=dry_run,
            project_id=project_id,
            clock=clock,
            store_error=sources.store_error,
            broker_error=sources.broker_error,
        )
    finally:
        await sources.close()

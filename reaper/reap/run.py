"""One pass: config → measure → observe → judge → act → reconcile → record → report → export
(SPEC §5).

:func:`run_pass` is the only entry point. It reads both sources concurrently, judges with the
pure judge, acts (unless dry-run), and returns one :class:`~reaper.reap.result.PassResult` that
the CLI prints, the metrics export and the worker hook logs. It never raises for a source that
cannot be read: that source is named in ``unreadable`` and nothing is concluded from it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import UUID

from reaper.broker.port import Broker, ManagementEndpoint, QueuesByVhost
from reaper.config import Settings
from reaper.core.domain import Action, Condition, Dispatch, Judgement, SightingKey, Source
from reaper.core.judge import judge
from reaper.core.storable import stored_escaped
from reaper.jobqueue.port import JobQueue
from reaper.reap.dead_letters import DeadLettersOutcome, park_dead_letters
from reaper.reap.lease_log import LeaseLog, VerdictLog
from reaper.reap.leases import LeaseReapOutcome, reap_leases
from reaper.reap.listing import QuietQueues
from reaper.reap.measure import Reading, measure
from reaper.reap.observe import observe_broker
from reaper.reap.pass_config import PassConfig
from reaper.reap.policies import PoliciesOutcome, reconcile_policies
from reaper.reap.progress import Found, Unreadable
from reaper.reap.result import PassResult, Target
from reaper.reap.sightings import (
    SightingsOutcome,
    gates_of_parks,
    record_sightings,
    sightings_on_record,
)
from reaper.reap.sources import open_sources
from reaper.reap.stopping import StopRequest

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
    stop: StopRequest | None = None,
) -> PassResult:
    """Run one whole pass over already-opened sources (``None``: it could not be opened, and
    ``store_error``/``broker_error`` say why), in the order of SPEC §5: measure both sources
    at once, observe, judge, reap the leases, reconcile the policies, park dead letters (after
    the policies: their safety proof rests on the dead-letter policy in force), record the
    sightings. A dry run judges, plans and reports the same, and writes nothing. ``now`` is the
    database's clock, read as the pass begins (``clock`` stands in when it cannot be read).
    ``leases_only`` (a hook switched off): the lease reap alone, no broker, no sighting.
    ``stop`` asked (a signal): the lease moves in flight end, no later step runs."""
    if leases_only and broker is not None:
        raise ValueError("a lease-only pass reads no broker")
    began = monotonic()
    config = PassConfig.of(
        settings,
        dry_run=dry_run,
        project_id=project_id,
        policies_dir=policies_dir,
        leases_only=leases_only,
    )
    if broker is not None:
        broker.begin_pass()
    reading = await measure(config, store, broker)
    found = _opened(config, store, broker, store_error, broker_error)
    found += reading.found
    now = reading.job_queue.now if reading.job_queue else clock()
    watched = await observe_broker(
        config, store if reading.job_queue else None, reading.broker, now
    )
    measurements = replace(reading.measurements(), observed=watched.observed)
    judgement = judge(measurements, config.thresholds, now)
    found += watched.found + Found.noted(*judgement.notes)
    # The ledger lives in PostgreSQL: without it nothing is written, not even broker news.
    ledger = store if not dry_run and reading.job_queue is not None else None
    if not dry_run and ledger is None:
        found += Found.noted("the ledger (PostgreSQL) could not be read: nothing was written")
    stop = stop or StopRequest()
    lease_log = LeaseLog()
    leases = await _reap_leases(
        config, store, reading, now, ledger is not None, lease_log, monotonic, stop
    )
    policies, dead_letters = await _broker_steps(
        config, broker, store, reading, judgement, now, ledger, stop
    )
    found += leases.found + policies.found + dead_letters.found
    on_record = store if reading.job_queue is not None else None  # the ledger, read
    sightings = await _record(config, on_record, reading, judgement, dead_letters, found, now, stop)
    found += sightings.found + _stopped(stop)
    found += _stored_escaped(ledger, found, dead_letters)
    gates, listed = await gates_of_parks(ledger, lease_log, found.verdicts, now)
    endpoints = broker.endpoints() if broker is not None else ()
    found += listed + Found.noted(*_failover_notes(endpoints))
    return _result(
        config,
        reading,
        lease_log,
        leases,
        policies,
        dead_letters,
        found,
        endpoints,
        began=now,
        took=monotonic() - began,
        gates=gates,
        since=sightings.since,
        stopped=stop.by,
    )


async def _record(
    config: PassConfig,
    ledger: JobQueue | None,
    reading: Reading,
    judgement: Judgement,
    dead_letters: DeadLettersOutcome,
    found: Found,
    now: datetime,
    stop: StopRequest,
) -> SightingsOutcome:
    """The surfaced verdicts to the ledger's sightings (none in a lease-only pass, nor once the
    pass was asked to stop); a dry run only reads which are on record already."""
    if config.leases_only or stop():
        return SightingsOutcome()
    surfaced = [
        v
        for v in judgement.verdicts
        if v.action is Action.SURFACE and v.condition is not Condition.DEAD_LETTER
    ]
    if config.dry_run:
        return await sightings_on_record(ledger, surfaced + list(dead_letters.surfaced))
    return await record_sightings(
        ledger,
        surfaced + list(dead_letters.surfaced),
        now,
        sources_read=_sources_read(reading, found),
        unmeasured=reading.broker.unmeasured() if reading.broker else frozenset(),
        project_id=config.project_id,
    )


def _stopped(stop: StopRequest) -> Found:
    """What a pass asked to stop left undone, and what runs next."""
    if not stop():
        return Found()
    return Found.noted(
        f"stopped by {stop.by}: the lease moves in flight ended (committed or rolled back); the "
        "policies, dead letters and sightings were not run: run reaper reap again, or let the "
        "next turn of reaper serve run them"
    )


def _stored_escaped(
    ledger: JobQueue | None,
    found: Found,
    dead_letters: DeadLettersOutcome,
) -> Found:
    """A note for each queue name this pass wrote escaped (:mod:`reaper.core.storable`)."""
    if ledger is None:
        return Found()
    names = [r.verdict.subject for r in found.verdicts if r.verdict.source is Source.BROKER]
    names += [d.queue for d in dead_letters.queues]
    return Found.noted(*stored_escaped(names))


def _opened(
    config: PassConfig,
    store: JobQueue | None,
    broker: Broker | None,
    store_error: str | None,
    broker_error: str | None,
) -> Found:
    """What is known before anything is read: a source not opened, the TLS warning, a hook
    switched off."""
    unreadable: list[Unreadable] = []
    if store is None:
        unreadable.append(Unreadable(Source.JOB_QUEUE.value, store_error or "not connected"))
    if broker is None and not config.leases_only:
        unreadable.append(Unreadable(Source.BROKER.value, broker_error or "not connected"))
    notes: list[str] = []
    if config.tls_warning is not None and not config.leases_only:
        notes.append(config.tls_warning)
    if config.leases_only:
        notes.append(
            "the hook is switched off (queue.reap.enabled = false): the lease reap alone ran "
            "(expired leases, poison); stale-ready work and the broker were not measured"
        )
    return Found(unreadable=tuple(unreadable), notes=tuple(notes))


def _mode(reading: Reading) -> Dispatch:
    dispatch = reading.job_queue.dispatch if reading.job_queue else None
    return dispatch.mode if dispatch else Dispatch.POLLING


async def _reap_leases(
    config: PassConfig,
    store: JobQueue | None,
    reading: Reading,
    now: datetime,
    write: bool,
    log: LeaseLog,
    monotonic: Callable[[], float],
    stop: StopRequest,
) -> LeaseReapOutcome:
    """The lease step, when the job queue was read."""
    if reading.job_queue is None or store is None:
        return LeaseReapOutcome()
    return await reap_leases(
        store,
        config.thresholds,
        now,
        budget_seconds=config.lease_reap_budget_seconds,
        project_id=config.project_id,
        dispatch=_mode(reading),
        write=write,
        log=log,
        monotonic=monotonic,
        stopping=stop,
    )


async def _broker_steps(
    config: PassConfig,
    broker: Broker | None,
    store: JobQueue | None,
    reading: Reading,
    judgement: Judgement,
    now: datetime,
    ledger: JobQueue | None,
    stop: StopRequest,
) -> tuple[PoliciesOutcome, DeadLettersOutcome]:
    """The policies reconciled, then the dead letters parked, when the broker was read (and
    the pass was not asked to stop)."""
    if reading.broker is None or broker is None or stop():
        return PoliciesOutcome(), DeadLettersOutcome()
    facts = reading.broker.facts
    policies = await reconcile_policies(config, broker, facts, reading.broker)
    dead_letters = await park_dead_letters(
        config,
        broker,
        store,
        facts,
        [v for v in judgement.verdicts if v.condition is Condition.DEAD_LETTER],
        now=now,
        writable=ledger is not None,
        dispatch=_mode(reading),
    )
    return policies, dead_letters


def _sources_read(reading: Reading, found: Found) -> frozenset[Source]:
    """The sources read in full: a source that failed at any step of this pass clears
    nothing, even if it was measured. A queue that could not be measured leaves its source
    read; its own sightings stay as they are (``unmeasured``)."""
    failed = {u.source for u in found.unreadable if u.queue is None}
    read = ((Source.JOB_QUEUE, reading.job_queue), (Source.BROKER, reading.broker))
    return frozenset(source for source, got in read if got and source.value not in failed)


def _result(
    config: PassConfig,
    reading: Reading,
    lease_log: LeaseLog,
    leases: LeaseReapOutcome,
    policies: PoliciesOutcome,
    dead_letters: DeadLettersOutcome,
    found: Found,
    endpoints: Sequence[ManagementEndpoint],
    *,
    began: datetime,
    took: float,
    gates: Mapping[str, UUID],
    since: Mapping[SightingKey, datetime],
    stopped: str | None,
) -> PassResult:
    jq, br = reading.job_queue, reading.broker
    return PassResult(
        dry_run=config.dry_run,
        started_at=began,
        finished_at=began + timedelta(seconds=took),
        broker=br.facts if br else None,
        verdicts=VerdictLog(lease_log, found.verdicts),
        policies=policies.policies,
        dead_letters=dead_letters.queues,
        unreadable=found.unreadable,
        notes=tuple(dict.fromkeys(found.notes)),
        queues=br.queues if br else (),
        quiet=br.quiet if br else QuietQueues(),
        owned_elsewhere=br.owned_elsewhere if br else QueuesByVhost({}),
        claimable=(jq.claimable or ()) if jq else (),
        project_id=config.project_id,
        not_moved=found.not_moved,
        dispatch=jq.dispatch if jq else None,
        management=tuple(endpoints),
        target=Target(config.database, config.vhost, tuple(e.url for e in endpoints if e.answered)),
        # The lease reap reads every expired lease a page at a time: those it judged, and
        # those its budget left.
        expired_leases=len(lease_log) + leases.remaining if jq else None,
        thresholds=config.thresholds,
        gates=gates,
        leases_remaining=leases.remaining,
        since=since,
        stopped=stopped,
    )


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
    stop: StopRequest | None = None,
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
            stop=stop,
        )
    finally:
        await sources.close()

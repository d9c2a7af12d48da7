"""One pass as the list of its steps.

One pass: config → measure → observe → judge → act → reconcile → record → report → export
(SPEC §5).

:func:`run_pass` is the only entry point. It reads both sources concurrently, judges with the
pure judge, acts (unless dry-run), and returns one :class:`~reaper.reap.result.PassResult` that
the CLI prints, the metrics export and the worker hook logs. It never raises for a source that
cannot be read: that source is named in ``unreadable`` and nothing is concluded from it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import UUID

from reaper.broker.port import ManagementEndpoint, QueuesByVhost
from reaper.config import Settings
from reaper.core.domain import Condition, Source
from reaper.core.judge import judge
from reaper.core.storable import stored_escaped
from reaper.reap.context import Mode, Pass
from reaper.reap.dead_letters import DeadLettersOutcome, park_dead_letters
from reaper.reap.leases import LeaseReapOutcome, reap_leases
from reaper.reap.listing import QuietQueues
from reaper.reap.measure import measure
from reaper.reap.observe import observe_broker
from reaper.reap.pass_config import PassConfig
from reaper.reap.policies import PoliciesOutcome, reconcile_policies
from reaper.reap.progress import Found, Unreadable
from reaper.reap.result import PassResult, Target
from reaper.reap.sightings import GatesOutcome, SightingsOutcome, gates_of_parks, record
from reaper.reap.sources import Sources, open_sources
from reaper.reap.stopping import StopRequest

__all__ = ["Mode", "reap_once", "run_pass", "utcnow"]


def utcnow() -> datetime:
    return datetime.now(UTC)


async def run_pass(
    settings: Settings,
    sources: Sources,
    *,
    mode: Mode = Mode.FULL,
    project_id: UUID | None = None,
    clock: Callable[[], datetime] = utcnow,
    monotonic: Callable[[], float] = time.monotonic,
    policies_dir: Path | None = None,
    stop: StopRequest | None = None,
) -> PassResult:
    """Run one whole pass over already-opened ``sources`` (a source None could not be opened,
    and its error says why), in the order of SPEC §5: measure both sources at once, observe,
    judge, reap the leases, reconcile the policies, park dead letters (after the policies:
    their safety proof rests on the dead-letter policy in force), record the sightings, look
    up the gates of the parks. An audit (``Mode.AUDIT``) judges, plans and reports the same,
    and writes nothing; ``Mode.LEASES_ONLY`` (a hook switched off): the lease reap alone, no
    broker, no sighting. ``now`` is the database's clock, read as the pass begins (``clock``
    stands in when it cannot be read). ``stop`` asked (a signal): the lease moves in flight
    end, no later step runs."""
    if mode is Mode.LEASES_ONLY and sources.broker is not None:
        raise ValueError("a lease-only pass reads no broker")
    began = monotonic()
    config = PassConfig.of(settings, project_id=project_id, policies_dir=policies_dir)
    if sources.broker is not None:
        sources.broker.begin_pass()
    reading = await measure(
        config, sources.store, sources.broker, leases_only=mode is Mode.LEASES_ONLY
    )
    now = reading.job_queue.now if reading.job_queue else clock()
    p = Pass(
        config, mode, now, reading, sources.store, sources.broker, stop or StopRequest(), monotonic
    )
    watched = await observe_broker(p)
    judgement = judge(
        replace(reading.measurements(), observed=watched.observed), config.thresholds, now
    )
    leases = await reap_leases(p)
    policies = await reconcile_policies(p)
    dead = [v for v in judgement.verdicts if v.condition is Condition.DEAD_LETTER]
    dead_letters = await park_dead_letters(p, dead)
    steps = sum(
        (
            _opened(p, sources),
            reading.found,
            watched.found,
            Found.noted(*judgement.notes),
            _unwritten(p),
            leases.found,
            policies.found,
            dead_letters.found,
        ),
        Found(),
    )
    sightings = await record(p, judgement, dead_letters, steps.unreadable)
    found = steps + sightings.found + _stopped(p.stop)
    gates = await gates_of_parks(p, leases.listing, found.verdicts)
    endpoints = sources.broker.endpoints() if sources.broker is not None else ()
    found += _stored_escaped(p, found, dead_letters) + gates.found
    found += Found.noted(*_failover_notes(endpoints))
    return _result(
        p,
        found,
        endpoints,
        monotonic() - began,
        leases=leases,
        policies=policies,
        dead_letters=dead_letters,
        gates=gates,
        sightings=sightings,
    )


def _result(
    p: Pass,
    found: Found,
    endpoints: Sequence[ManagementEndpoint],
    took: float,
    *,
    leases: LeaseReapOutcome,
    policies: PoliciesOutcome,
    dead_letters: DeadLettersOutcome,
    gates: GatesOutcome,
    sightings: SightingsOutcome,
) -> PassResult:
    """The pass's result: each step's outcome as it returned it, what the pass measured, and
    what every step found."""
    config, jq, br = p.config, p.reading.job_queue, p.reading.broker
    return PassResult(
        dry_run=p.dry_run,
        started_at=p.now,
        finished_at=p.now + timedelta(seconds=took),
        broker=br.facts if br else None,
        verdicts=found.verdicts,
        leases=leases,
        policies=policies,
        dead_letters=dead_letters,
        notes=tuple(dict.fromkeys(found.notes)),
        gates=gates,
        sightings=sightings,
        unreadable=found.unreadable,
        queues=br.queues if br else (),
        quiet=br.quiet if br else QuietQueues(),
        owned_elsewhere=br.owned_elsewhere if br else QueuesByVhost({}),
        claimable=(jq.claimable or ()) if jq else (),
        project_id=config.project_id,
        not_moved=found.not_moved,
        dispatch=jq.dispatch if jq else None,
        management=tuple(endpoints),
        target=Target(config.database, config.vhost, tuple(e.url for e in endpoints if e.answered)),
        thresholds=config.thresholds,
        stopped=p.stop.by,
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


def _unwritten(p: Pass) -> Found:
    """A pass meant to write whose ledger could not be read wrote nothing."""
    if p.dry_run or p.ledger is not None:
        return Found()
    return Found.noted("the ledger (PostgreSQL) could not be read: nothing was written")


def _stored_escaped(p: Pass, found: Found, dead_letters: DeadLettersOutcome) -> Found:
    """A note for each queue name this pass wrote escaped (:mod:`reaper.core.storable`)."""
    if p.ledger is None:
        return Found()
    names = [r.verdict.subject for r in found.verdicts if r.verdict.source is Source.BROKER]
    names += [d.queue for d in dead_letters.queues]
    return Found.noted(*stored_escaped(names))


def _opened(p: Pass, sources: Sources) -> Found:
    """What is known before anything is read: a source not opened, the TLS warning, a hook
    switched off."""
    unreadable: list[Unreadable] = []
    if sources.store is None:
        unreadable.append(
            Unreadable(Source.JOB_QUEUE.value, sources.store_error or "not connected")
        )
    if sources.broker is None and not p.leases_only:
        error = sources.broker_error or "not connected"
        unreadable.append(Unreadable(Source.BROKER.value, error))
    notes: list[str] = []
    if p.config.tls_warning is not None and not p.leases_only:
        notes.append(p.config.tls_warning)
    if p.leases_only:
        notes.append(
            "the hook is switched off (queue.reap.enabled = false): the lease reap alone ran "
            "(expired leases, poison); stale-ready work and the broker were not measured"
        )
    return Found(unreadable=tuple(unreadable), notes=tuple(notes))


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
    report: Callable[[PassResult], Awaitable[object]] | None = None,
) -> PassResult:
    """Open both sources, run one pass, hand its result to ``report`` (if given), close them.

    ``report`` is awaited while the sources are still open: it is where the pass's lease moves
    can be listed whole (``result.leases.listing``, read back from the ledger a page at a
    time), so that printing every move neither holds them all nor opens a source again. A
    consumer rather than a listing that outlives the pass: the sources are closed here, on
    every path, whatever the consumer does."""
    sources = await open_sources(settings)
    try:
        mode = Mode.AUDIT if dry_run else Mode.FULL
        result = await run_pass(
            settings, sources, mode=mode, project_id=project_id, clock=clock, stop=stop
        )
        if report is not None:
            await report(result)
        return result
    finally:
        await sources.close()

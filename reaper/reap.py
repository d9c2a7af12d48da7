"""One pass: config → measure → judge → act → reconcile → record → report → export.

``run_pass`` is the only entry point. It reads both sources concurrently, judges with the
pure judge, acts (unless dry-run), and returns one ``PassResult`` that the CLI prints, the
metrics export and the worker hook logs. It never raises for a source that cannot be read:
that source is named in ``unreadable`` and nothing is concluded from it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar, cast
from uuid import UUID

from reaper.config import Settings
from reaper.domain import (
    Action,
    BrokerFacts,
    ClaimableHead,
    Condition,
    HeldLease,
    Measurements,
    QueueStats,
    Source,
    Verdict,
)
from reaper.errors import ConfigError, ReaperError, SourceUnreadable, scrub
from reaper.judge import judge
from reaper.ports import Broker, JobQueue

#: The most expired leases one pass reads and moves; the remainder is counted and reported,
#: and the next pass takes it. Bounds a pass after an outage that expired every lease at once.
MAX_LEASES_PER_PASS = 20_000

T = TypeVar("T")


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Unreadable:
    source: str
    error: str


@dataclass(frozen=True)
class PolicyOutcome:
    """One declared policy after reconciliation (SPEC §5)."""

    name: str
    action: str  # unchanged | created | updated | refused | unsupported | planned
    verified: bool | None
    queues_checked: int
    queues_failing: tuple[str, ...]
    detail: str
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.action not in {"refused"} and self.verified is not False


@dataclass(frozen=True)
class DeadLetterOutcome:
    queue: str
    depth: int
    parked_new: int
    already_parked: int
    unread: int
    read_blocked: str | None

    @property
    def ok(self) -> bool:
        return self.read_blocked is None


@dataclass(frozen=True)
class RecordedVerdict:
    verdict: Verdict
    recorded: bool


@dataclass(frozen=True)
class PassResult:
    dry_run: bool
    started_at: datetime
    finished_at: datetime
    broker: BrokerFacts | None
    verdicts: tuple[RecordedVerdict, ...]
    policies: tuple[PolicyOutcome, ...] = ()
    dead_letters: tuple[DeadLetterOutcome, ...] = ()
    unreadable: tuple[Unreadable, ...] = ()
    notes: tuple[str, ...] = ()
    #: Queues as measured, for metrics (bounded labels) and the report.
    queues: tuple[QueueStats, ...] = ()
    #: The oldest claimable job of every project measured, for the per-project age gauge.
    claimable: tuple[ClaimableHead, ...] = ()
    project_id: UUID | None = None
    failed_rows: tuple[tuple[str, str], ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return (
            not self.unreadable
            and not self.failed_rows
            and all(p.ok for p in self.policies)
            and all(d.ok for d in self.dead_letters)
        )

    @property
    def duration_seconds(self) -> float:
        return (self.finished_at - self.started_at).total_seconds()


@dataclass
class _JobQueueReading:
    leases: tuple[HeldLease, ...]
    claimable: tuple[ClaimableHead, ...]
    remainder: int


@dataclass
class _BrokerReading:
    facts: BrokerFacts
    queues: tuple[QueueStats, ...]


async def _read_job_queue(
    store: JobQueue, settings: Settings, now: datetime, project_id: UUID | None
) -> _JobQueueReading:
    reap = settings.queue.reap
    leases, claimable, expired = await asyncio.gather(
        store.expired_leases(now, reap.lease_grace_seconds, MAX_LEASES_PER_PASS, project_id),
        store.claimable_heads(now, frozenset(reap.known_phases), project_id),
        store.count_expired_leases(now, reap.lease_grace_seconds, project_id),
    )
    return _JobQueueReading(tuple(leases), tuple(claimable), max(0, expired - len(leases)))


async def _read_broker(client: Broker, declared_consumer_timeout_ms: int) -> _BrokerReading:
    facts = await client.facts(declared_consumer_timeout_ms=declared_consumer_timeout_ms)
    queues = await client.list_queues()
    return _BrokerReading(facts, tuple(queues))


def _unreadable(source: Source, exc: BaseException) -> Unreadable:
    if isinstance(exc, ReaperError):
        return Unreadable(source.value, exc.reason)
    if isinstance(exc, TimeoutError):
        return Unreadable(source.value, f"reading the {source.value} timed out")
    return Unreadable(source.value, scrub(f"{type(exc).__name__}: {exc}"))


@dataclass
class _Ledger:
    """What one pass has recorded so far, and what it found on its way."""

    unreadable: list[Unreadable] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    verdicts: list[RecordedVerdict] = field(default_factory=list)
    failed_rows: list[tuple[str, str]] = field(default_factory=list)
    policies: list[PolicyOutcome] = field(default_factory=list)
    dead_letters: list[DeadLetterOutcome] = field(default_factory=list)

    async def guarded(self, awaitable: Awaitable[T]) -> T | None:
        """Await a step against a source; a source failing mid-pass is named, never raised."""
        try:
            return await awaitable
        except SourceUnreadable as exc:
            self.unreadable.append(Unreadable(exc.source, exc.reason))
            return None


async def run_pass(
    settings: Settings,
    *,
    store: JobQueue | None,
    broker: Broker | None,
    dry_run: bool = False,
    project_id: UUID | None = None,
    clock: Callable[[], datetime] = utcnow,
    store_error: str | None = None,
    broker_error: str | None = None,
    policies_dir: Path | None = None,
) -> PassResult:
    """Run one whole pass over already-opened sources.

    A source passed as ``None`` could not be opened; ``store_error``/``broker_error`` say
    why. The steps run in this order: measure (both sources at once), judge, act on the job
    queue, reconcile the policies, read and park dead letters, record sightings. Dead letters
    are read after reconciliation because their safety proof rests on the dead-letter policy
    being in force. A dry run judges, plans and reports the same, and writes nothing.
    """
    started = clock()
    now = started
    ledger = _Ledger()
    if store is None:
        ledger.unreadable.append(Unreadable(Source.JOB_QUEUE.value, store_error or "not connected"))
    if broker is None:
        ledger.unreadable.append(Unreadable(Source.BROKER.value, broker_error or "not connected"))

    job_queue, reading = await _measure(settings, store, broker, now, project_id, ledger)
    measurements = Measurements(
        leases=job_queue.leases if job_queue else None,
        claimable=job_queue.claimable if job_queue else None,
        queues=reading.queues if reading else None,
        broker=reading.facts if reading else None,
    )
    judgement = judge(measurements, settings.thresholds(), now)
    ledger.notes.extend(judgement.notes)
    # The ledger lives in PostgreSQL: without it nothing is written, not even broker news.
    writable = not dry_run and store is not None and job_queue is not None
    if not dry_run and not writable:
        ledger.notes.append("the ledger (PostgreSQL) could not be read: nothing was written")

    leases = [v for v in judgement.verdicts if v.lease is not None]
    await _act_on_leases(store if writable else None, leases, now, ledger)

    if reading is not None and broker is not None:
        await _reconcile_policies(settings, broker, reading.facts, dry_run, policies_dir, ledger)

    dead_letter_verdicts = [v for v in judgement.verdicts if v.condition is Condition.DEAD_LETTER]
    surfaced = [
        v
        for v in judgement.verdicts
        if v.action is Action.SURFACE and v.condition is not Condition.DEAD_LETTER
    ]
    if reading is not None and broker is not None:
        surfaced += await _dead_letters(
            settings, broker, store, reading, dead_letter_verdicts, now, dry_run, writable, ledger
        )

    # A source that failed at any step of this pass clears nothing, even if it was measured.
    failed = {u.source for u in ledger.unreadable}
    sources_read = frozenset(
        source
        for source, read in ((Source.JOB_QUEUE, job_queue), (Source.BROKER, reading))
        if read and source.value not in failed
    )
    await _record_sightings(
        store if writable else None, surfaced, now, sources_read, project_id, ledger
    )

    return PassResult(
        dry_run=dry_run,
        started_at=started,
        finished_at=clock(),
        broker=reading.facts if reading else None,
        verdicts=tuple(ledger.verdicts),
        policies=tuple(ledger.policies),
        dead_letters=tuple(ledger.dead_letters),
        unreadable=tuple(ledger.unreadable),
        notes=tuple(dict.fromkeys(ledger.notes)),
        queues=reading.queues if reading else (),
        claimable=job_queue.claimable if job_queue else (),
        project_id=project_id,
        failed_rows=tuple(ledger.failed_rows),
    )


async def _measure(
    settings: Settings,
    store: JobQueue | None,
    broker: Broker | None,
    now: datetime,
    project_id: UUID | None,
    ledger: _Ledger,
) -> tuple[_JobQueueReading | None, _BrokerReading | None]:
    """Read both sources at once; a failing one is named and read as unknown."""

    async def nothing() -> None:
        return None

    declared_ms = settings.queue.reap.consumer_timeout_seconds * 1000
    pg_read, broker_read = await asyncio.gather(
        _read_job_queue(store, settings, now, project_id) if store else nothing(),
        _read_broker(broker, declared_ms) if broker else nothing(),
        return_exceptions=True,
    )
    job_queue: _JobQueueReading | None = None
    if isinstance(pg_read, BaseException):
        ledger.unreadable.append(_unreadable(Source.JOB_QUEUE, pg_read))
    elif pg_read is not None:
        job_queue = pg_read
        if job_queue.remainder:
            ledger.notes.append(
                f"{job_queue.remainder} more expired lease(s) beyond this pass's bound of "
                f"{MAX_LEASES_PER_PASS}: the next pass takes them"
            )
    reading: _BrokerReading | None = None
    if isinstance(broker_read, BaseException):
        ledger.unreadable.append(_unreadable(Source.BROKER, broker_read))
    elif broker_read is not None:
        reading = broker_read
    return job_queue, reading


async def _act_on_leases(
    store: JobQueue | None, verdicts: Sequence[Verdict], now: datetime, ledger: _Ledger
) -> None:
    """Requeue and park, each move with its event; a dry run (``store`` None) only reports."""
    if store is None or not verdicts:
        ledger.verdicts.extend(RecordedVerdict(v, False) for v in verdicts)
        return
    try:
        outcome = await store.apply_lease_verdicts(verdicts, now)
    except SourceUnreadable as exc:
        ledger.unreadable.append(Unreadable(exc.source, exc.reason))
        outcome = getattr(exc, "partial", None)  # the batches committed before the failure
    moved: set[UUID] = set()
    if outcome is not None:
        moved = {*outcome.requeued, *outcome.parked}
        for job_id in outcome.skipped:
            ledger.notes.append(
                f"job {job_id} changed after it was read (finished, re-leased, or moved by "
                "another reaper): left alone"
            )
        ledger.failed_rows.extend((str(job_id), reason) for job_id, reason in outcome.failed)
    ledger.verdicts.extend(
        RecordedVerdict(v, v.lease is not None and v.lease.job_id in moved) for v in verdicts
    )


async def _reconcile_policies(
    settings: Settings,
    broker: Broker,
    facts: BrokerFacts,
    dry_run: bool,
    policies_dir: Path | None,
    ledger: _Ledger,
) -> None:
    from reaper import policies

    try:
        desired = policies.desired_for(settings, facts, policies_dir or policies.DEFAULT_POLICY_DIR)
    except ConfigError as exc:
        ledger.policies.append(
            PolicyOutcome("declarations", "refused", False, 0, (), exc.reason, "InvalidDeclaration")
        )
        return
    outcomes = await ledger.guarded(
        policies.reconcile(
            cast(policies.PolicyBroker, broker),
            desired,
            vhost=settings.bus.vhost,
            dry_run=dry_run,
            verify_wait_seconds=settings.queue.reap.policy_verify_wait_seconds,
        )
    )
    ledger.policies.extend(outcomes or ())


async def _dead_letters(
    settings: Settings,
    broker: Broker,
    store: JobQueue | None,
    reading: _BrokerReading,
    verdicts: Sequence[Verdict],
    now: datetime,
    dry_run: bool,
    writable: bool,
    ledger: _Ledger,
) -> list[Verdict]:
    """Park what owned dead-letter queues hold; surface foreign ones and every remainder.

    Returns the surfaced dead-letter verdicts (sightings) for the record step."""
    reap = settings.queue.reap
    surfaced: list[Verdict] = []
    for verdict in verdicts:
        if verdict.action is not Action.PARK:  # a foreign queue: surfaced, never read
            surfaced.append(verdict)
            continue
        outcome, parks = await _park_queue(
            settings, broker, store, reading.facts, verdict, now, dry_run, writable, ledger
        )
        if outcome is None:
            continue
        ledger.dead_letters.append(outcome)
        ledger.verdicts.extend(RecordedVerdict(p, True) for p in parks)
        # A dry run does not read, so its remainder is unknown, not unparked.
        if outcome.read_blocked or (outcome.unread and not dry_run):
            why = outcome.read_blocked or (
                f"past the read limit of {reap.dead_letter_peek_limit} per pass"
            )
            surfaced.append(
                replace(
                    verdict,
                    action=Action.SURFACE,
                    measured=outcome.unread,
                    threshold=0,
                    detail=f"{outcome.unread} dead letter(s) not parked: {why}",
                )
            )
    return surfaced


async def _park_queue(
    settings: Settings,
    broker: Broker,
    store: JobQueue | None,
    facts: BrokerFacts,
    verdict: Verdict,
    now: datetime,
    dry_run: bool,
    writable: bool,
    ledger: _Ledger,
) -> tuple[DeadLetterOutcome | None, list[Verdict]]:
    from reaper import deadletters

    reap = settings.queue.reap
    name = verdict.object
    # Fresh from the broker: reconciliation may just have put the dead-letter policy in force.
    queue = await ledger.guarded(broker.queue(name))
    if queue is None:
        return None, []
    depth = queue.messages
    if store is None:
        blocked = "the ledger (PostgreSQL) could not be read, so nothing read could be parked"
        return DeadLetterOutcome(name, depth, 0, 0, depth, blocked), []
    hint = await ledger.guarded(store.count_parked_dead_letters(name))
    if hint is None:
        return None, []
    plan = deadletters.read_plan(queue, facts, reap.dead_letter_peek_limit, hint)
    if plan.blocked:
        return DeadLetterOutcome(name, depth, 0, 0, depth, plan.blocked), []
    if dry_run:
        # A read sets `redelivered` and, on quorum queues, spends a delivery and reorders:
        # a dry run moves nothing on the broker, so it does not read at all.
        ledger.notes.append(
            f"dry run: dead-letter queue {name!r} not read; a real pass would read up to "
            f"{plan.count} message(s) and park the new ones"
        )
        return DeadLetterOutcome(name, depth, 0, hint, max(0, depth - hint), None), []
    raw = await ledger.guarded(broker.get_messages(name, plan.count))
    if raw is None:
        return None, []
    letters = [deadletters.decode(message, queue=name) for message in raw]
    parked = await ledger.guarded(store.parked_identities([x.identity for x in letters]))
    if parked is None:
        return None, []
    new, already = deadletters.select_new(letters, parked, reap.dead_letter_peek_limit)
    parks: list[Verdict] = []
    if new and writable:
        parks = (
            await ledger.guarded(
                store.park_dead_letters(
                    new,
                    now=now,
                    depth=depth,
                    min_depth=reap.dead_letter_min_depth,
                    owned_queue_pattern=reap.owned_queue_pattern,
                    dead_letter_queue_pattern=reap.dead_letter_queue_pattern,
                )
            )
            or []
        )
    failed = getattr(parks, "failed", ())
    raced = len(getattr(parks, "already_parked", ()))  # parked by another reaper just now
    ledger.failed_rows.extend((f"dead letter {identity}", reason) for identity, reason in failed)
    # A letter that could not be parked is unread, never assumed parked.
    unread = deadletters.unread_count(depth, letters, parked, new) + len(failed)
    return DeadLetterOutcome(name, depth, len(parks), already + raced, unread, None), list(parks)


async def _record_sightings(
    store: JobQueue | None,
    surfaced: Sequence[Verdict],
    now: datetime,
    sources_read: frozenset[Source],
    project_id: UUID | None,
    ledger: _Ledger,
) -> None:
    """First seen, and cleared once gone: the ledger decides, fleet-wide."""
    if store is None:
        ledger.verdicts.extend(RecordedVerdict(v, False) for v in surfaced)
        return
    written = await ledger.guarded(
        store.record_sightings(surfaced, now=now, sources_read=sources_read, project_id=project_id)
    )
    opened = {w.sighting_key for w in written or () if w.action is Action.SURFACE}
    ledger.verdicts.extend(RecordedVerdict(v, v.sighting_key in opened) for v in surfaced)
    ledger.verdicts.extend(
        RecordedVerdict(w, True) for w in written or () if w.action is Action.CLEARED
    )


async def policy_plan(sources: Sources, settings: Settings) -> Any:
    """Desired policies against what the broker holds, per policy and per queue."""
    from reaper import policies

    facts = await sources.broker.facts(
        declared_consumer_timeout_ms=settings.queue.reap.consumer_timeout_seconds * 1000
    )
    desired = policies.desired_for(settings, facts)
    return await policies.plan(sources.broker, desired, vhost=settings.bus.vhost)


@dataclass
class Sources:
    """The opened sources of one pass (or of a long-lived process). A source that could not
    be opened is ``None`` with the reason beside it."""

    store: Any = None
    store_error: str | None = None
    broker: Any = None
    broker_error: str | None = None

    async def close(self) -> None:
        if self.store is not None:
            await self.store.close()
        if self.broker is not None:
            await self.broker.aclose()


async def open_sources(settings: Settings, *, store: bool = True, broker: bool = True) -> Sources:
    """Connect to PostgreSQL and build the management client. Never raises for a source
    that cannot be reached: the reason is kept and the pass names it in ``unreadable``."""
    from reaper.broker import ManagementClient
    from reaper.store import PostgresStore

    sources = Sources()
    if store:
        db = settings.database
        try:
            sources.store = await PostgresStore.connect(
                db.dsn,
                password=db.password.get_secret_value() if db.password else None,
                pool_size=db.pool_size,
                statement_timeout_seconds=db.statement_timeout_seconds,
            )
        except SourceUnreadable as exc:
            sources.store_error = exc.reason
    if broker:
        bus = settings.bus
        sources.broker = ManagementClient(
            bus.management_url,
            bus.username,
            bus.password.get_secret_value(),
            vhost=bus.vhost,
            timeout_seconds=bus.timeout_seconds,
        )
    return sources


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

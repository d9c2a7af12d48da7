"""The pass's dead-letter step: park what owned dead-letter queues hold, surface the rest.

The pass's dead-letter step (SPEC §1 (e)): park what owned dead-letter queues hold; surface
foreign ones and every remainder. A queue is read only after the read is proven safe
(:func:`reaper.core.dead_letters.read_plan`), and never in a dry run.

Quiet is cheap (SPEC §10): a queue whose listing shows nothing arrived since a pass proved every
letter on it parked is not read at all (:func:`reaper.core.dead_letters.quiet_decision`, from
the mark that pass kept in the store). A queue listing more letters than were ever parked from
it holds a new one, and is read once, with bodies; otherwise it is read first without bodies
(``truncate`` 0), and its bodies are read only when a letter seen is not parked yet
(:func:`reaper.core.dead_letters.quiet_read`). Every read requeues every message."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Final

from reaper.broker.port import Broker
from reaper.core import dead_letters
from reaper.core.dead_letters import DispatchPointer
from reaper.core.domain import Action, BrokerFacts, DeadLetter, Dispatch, QueueStats, Verdict
from reaper.core.found import split_found
from reaper.errors import SourceUnreadable
from reaper.jobqueue.port import DeadLetterParks, JobQueue, ParkRules
from reaper.reap.context import Pass
from reaper.reap.pass_config import PassConfig
from reaper.reap.progress import Found, RowNotMoved, written

__all__ = ["DeadLetterOutcome", "DeadLettersOutcome", "park_dead_letters"]


@dataclass(frozen=True)
class DeadLetterOutcome:
    """One owned dead-letter queue after the pass (SPEC §5 ``dead_letters[]``)."""

    queue: str
    depth: int
    parked_new: int
    already_parked: int
    unread: int
    #: None when the queue was read safely, else why it was not read.
    read_blocked: str | None
    #: Dead-lettered dispatch pointers recorded as stale this pass (outbox dispatch): their
    #: job had moved on, so nothing was moved.
    stale_pointers: int = 0
    #: Letters whose bodies this pass read: 0 when every letter its read without bodies saw
    #: was parked already (a quiet pass), and whenever the queue was not read.
    bodies_read: int = 0
    #: None when the pass fetched from the queue (or could not); else why it did not: nothing
    #: arrived since a pass found every letter on it parked.
    not_fetched: str | None = None
    #: How many letters read from this very queue the ledger holds (parked or stale pointers),
    #: None when not known. A letter parked from another queue (a fanout dead-lettered it into
    #: both) counts in ``already_parked`` but not here: its gate is not this queue's.
    parked_here: int | None = None

    @property
    def ok(self) -> bool:
        return self.read_blocked is None


@dataclass(frozen=True)
class DeadLettersOutcome:
    #: Each owned dead-letter queue the pass could read the depth of, after the pass.
    queues: tuple[DeadLetterOutcome, ...] = ()
    #: The dead-letter verdicts to surface, for the sightings step: foreign queues, and owned
    #: ones with letters not parked.
    surfaced: tuple[Verdict, ...] = ()
    found: Found = field(default_factory=Found)


@dataclass(frozen=True)
class _Step:
    """What the pass needs for one queue."""

    config: PassConfig
    broker: Broker
    store: JobQueue | None
    facts: BrokerFacts
    now: datetime
    writable: bool
    dispatch: Dispatch
    dry_run: bool = False
    #: Per queue, how many letters read from it the ledger held as the pass came to it.
    held: dict[str, int] = field(default_factory=dict)


async def park_dead_letters(p: Pass, verdicts: Sequence[Verdict]) -> DeadLettersOutcome:
    """Each owned dead-letter queue's outcome, and the dead-letter ``verdicts`` to surface, when
    the broker was read and the pass was not asked to stop. With outbox dispatch a letter that
    is a dispatch pointer parks the job it points to instead. A source that fails on a queue
    is named, and that queue left to the next pass."""
    if p.reading.broker is None or p.broker is None or p.stop():
        return DeadLettersOutcome()
    facts = p.reading.broker.facts
    writable = p.ledger is not None
    step = _Step(p.config, p.broker, p.opened, facts, p.now, writable, p.dispatch, p.dry_run)
    outcomes: list[DeadLetterOutcome] = []
    surfaced: list[Verdict] = []
    found = Found()
    for verdict in verdicts:
        if verdict.action is not Action.PARK:  # a foreign queue: surfaced, never read
            surfaced.append(verdict)
            continue
        outcome, said = await _park_queue(step, verdict.object)
        found += said
        if outcome is None:
            continue
        if outcome.queue in step.held:
            here = step.held[outcome.queue] + outcome.parked_new
            outcome = replace(outcome, parked_here=here)
        outcomes.append(outcome)
        surfaced.extend(_remainder(verdict, outcome, p.config, audit=p.dry_run))
    return DeadLettersOutcome(tuple(outcomes), tuple(surfaced), found)


def _remainder(
    verdict: Verdict, outcome: DeadLetterOutcome, config: PassConfig, *, audit: bool = False
) -> list[Verdict]:
    """The letters of an owned queue not parked, as a verdict to surface (none if none)."""
    # A dry run does not read, so its remainder is unknown, not unparked.
    if not (outcome.read_blocked or (outcome.unread and not audit)):
        return []
    why = outcome.read_blocked or (
        f"past the read limit of {config.thresholds.dead_letter_peek_limit} per pass"
    )
    # Recorded again only when it reaches a higher power of ten (the sighting's scope is
    # `<queue>#<bucket>`): a steady trickle is not an event per pass.
    bucket = dead_letters.remainder_bucket(outcome.unread)
    return [
        replace(
            verdict,
            action=Action.SURFACE,
            measured=outcome.unread,
            threshold=0,
            detail=f"{outcome.unread} dead letter(s) not parked (at least {bucket}): {why}",
            bucket=bucket,
        )
    ]


async def _park_queue(step: _Step, name: str) -> tuple[DeadLetterOutcome | None, Found]:
    """One owned queue: read once proven safe, and its new letters parked. None: a source
    failed part-way (named in what is found), or a write that had to come first failed."""
    found = Found()
    depth: int | None = None
    try:
        # Fresh from the broker: reconciliation may just have put the dead-letter policy in force.
        queue = await step.broker.queue(name)
        depth = queue.messages
        if step.store is None:
            blocked = "the ledger (PostgreSQL) could not be read, so nothing read could be parked"
            return DeadLetterOutcome(name, depth, 0, 0, depth, blocked), found
        store = step.store
        hint = step.held[name] = await store.count_parked_dead_letters(name)
        plan = dead_letters.read_plan(
            queue, step.facts, step.config.thresholds.dead_letter_peek_limit, hint
        )
        if plan.blocked:
            return DeadLetterOutcome(name, depth, 0, 0, depth, plan.blocked), found
        if step.dry_run:
            # A read sets `redelivered` and, on quorum queues, spends a delivery and reorders:
            # a dry run moves nothing on the broker, so it does not read at all.
            found += Found.noted(
                f"dry run: dead-letter queue {name!r} not read; a real pass would read up to "
                f"{plan.count} message(s) and park the new ones"
            )
            return DeadLetterOutcome(name, depth, 0, hint, max(0, depth - hint), None), found
        if plan.count < 1:
            # Nothing listed to read: a get of none is never sent.
            return DeadLetterOutcome(name, depth, 0, 0, depth, None), found
        mark, said = await _quiet_mark(step, store, name) if step.writable else (None, Found())
        found += said
        decision = dead_letters.quiet_decision(queue, mark, step.now)
        if mark is not None and not decision.read:
            found += Found.noted(f"dead-letter queue {name!r} not read: {decision.why}")
            skipped = DeadLetterOutcome(
                name, depth, 0, mark.letters, 0, None, not_fetched=decision.why
            )
            return skipped, found
        if depth <= hint or not step.writable:
            # Perhaps every letter parked already: first without bodies, which a pass that
            # finds only parked letters never reads.
            heads = await step.broker.get_messages(name, plan.count, truncate=0)
            known = await _known_parked(store, dead_letters.header_read(heads))
            if known.quiet or not step.writable:
                # Nothing new, or no ledger to park into: what is not known parked is unread.
                if step.writable:
                    found += await _keep_mark(
                        step, store, queue, mark, len(heads), known.covered, len(heads)
                    )
                unread = max(0, depth - known.covered)
                return DeadLetterOutcome(name, depth, 0, known.parked, unread, None), found
            fetched = len(heads)
        else:
            # More letters listed than were ever parked from this queue: a letter is new, so
            # the queue is read once, with its bodies.
            fetched = 0
        parked_read, said = await _read_and_park(step, store, queue, mark, plan.count, fetched)
        return parked_read, found + said
    except SourceUnreadable as exc:
        if depth is not None and _read_timed_out(exc):
            # the queue's own problem: the rest of the broker was read, and is judged
            blocked = f"{exc.reason}; {READ_TIMED_OUT_FIX}"
            return DeadLetterOutcome(name, depth, 0, 0, depth, blocked), found
        return None, found + Found.failed(exc)


#: What a person does about a read of a dead-letter queue that timed out. The broker builds a
#: ``get``'s whole answer before it sends a byte: 100 letters with 2 MiB headers took it 11 to
#: 15 s (RabbitMQ 3.10, bench/hostile_memory.py), past the default timeout of 10 s.
READ_TIMED_OUT_FIX: Final = (
    "letters with large headers make the broker slow to answer a read: raise "
    "bus.timeout_seconds (REAPER_BUS__TIMEOUT_SECONDS), or see what fills the queue"
)


def _read_timed_out(exc: SourceUnreadable) -> bool:
    """Whether a broker failure is a read (``get``) of the queue that timed out."""
    return exc.source == "broker" and "timed out" in exc.reason and "/get" in str(exc.reason)


async def _read_and_park(
    step: _Step,
    store: JobQueue,
    queue: QueueStats,
    mark: dead_letters.QuietMark | None,
    count: int,
    fetched_before: int,
) -> tuple[DeadLetterOutcome | None, Found]:
    """Read ``queue`` with its bodies and park its new letters; ``fetched_before``: what this
    pass fetched from it already. None: a write that had to come first failed."""
    name, depth = queue.name, queue.messages
    raw = await step.broker.get_messages(name, count)
    letters = dead_letters.decode_read(raw, queue=name)
    outcome, found = await _park_letters(step, store, name, depth, letters)
    if outcome is None:
        return None, found
    # Every letter read is parked now only when none is left unread.
    parked = len(letters) if outcome.unread == 0 else 0
    fetched = fetched_before + len(raw)
    found += await _keep_mark(step, store, queue, mark, len(letters), parked, fetched)
    return replace(outcome, bodies_read=len(letters)), found


async def _quiet_mark(
    step: _Step, store: JobQueue, name: str
) -> tuple[dead_letters.QuietMark | None, Found]:
    """The mark the last proving read kept; one that cannot be read is named, and the queue
    is read as if it had none."""
    try:
        return await store.quiet_mark(step.config.vhost, name), Found()
    except SourceUnreadable as exc:
        return None, Found.failed(exc)


async def _keep_mark(
    step: _Step,
    store: JobQueue,
    queue: QueueStats,
    previous: dead_letters.QuietMark | None,
    read: int,
    known_parked: int,
    fetched: int,
) -> Found:
    """Leave the next pass the mark of this read (:func:`reaper.core.dead_letters.quiet_mark`):
    proven or not, it replaces the last. One that cannot be kept is named."""
    mark = dead_letters.quiet_mark(
        queue, previous, read=read, known_parked=known_parked, fetched_by_pass=fetched, now=step.now
    )
    try:
        await store.keep_quiet_mark(step.config.vhost, mark)
    except SourceUnreadable as exc:
        return Found.failed(exc)
    return Found()


async def _known_parked(store: JobQueue, seen: dead_letters.HeaderRead) -> dead_letters.QuietRead:
    """What the store knows of the letters a read without bodies saw."""
    identities: set[str] = set()
    if seen.identities:
        identities = await store.parked_identities(sorted(set(seen.identities)))
    envelopes: dict[str, int] = {}
    if seen.envelopes:
        envelopes = await store.parked_envelopes(sorted(set(seen.envelopes)))
    return dead_letters.quiet_read(seen, identities, envelopes)


async def _park_letters(
    step: _Step,
    store: JobQueue,
    name: str,
    depth: int,
    letters: list[DeadLetter],
) -> tuple[DeadLetterOutcome | None, Found]:
    """Park the new letters of a read with bodies. None: the envelopes could not be noted."""
    thresholds = step.config.thresholds
    parked = await store.parked_identities([x.identity for x in letters])
    # Letters parked before envelopes were kept, or read since with another one: noted, so
    # that the next pass knows them without their bodies.
    noted = [
        (x.identity, x.envelope) for x in letters if x.identity in parked and x.envelope is not None
    ]
    if noted:
        kept, found = await written(store.keep_envelopes(noted), f"envelopes of {name}")
        if kept is None:
            return None, found
    new, already = dead_letters.select_new(letters, parked, thresholds.dead_letter_peek_limit)
    if not new:
        unread = dead_letters.unread_count(depth, letters, parked, ())
        return DeadLetterOutcome(name, depth, 0, already, unread, None), Found()
    rules = ParkRules(
        depth=depth,
        min_depth=thresholds.dead_letter_min_depth,
        owned_queue_pattern=thresholds.owned_queue_pattern,
        dead_letter_queue_pattern=thresholds.dead_letter_queue_pattern,
        lease_grace_seconds=thresholds.lease_grace_seconds,
    )
    pointers, plain = _split_pointers(new, step.dispatch)
    parks, found = await written(
        store.park_dead_letters(plain, now=step.now, rules=rules), f"dead letters of {name}"
    )
    pointer_parks: DeadLetterParks | None = DeadLetterParks()
    if pointers:
        pointer_parks, failed_pointers = await written(
            store.park_dispatch_pointers(pointers, now=step.now, rules=rules),
            f"dispatch pointers of {name}",
        )
        found += failed_pointers
    if parks is None or pointer_parks is None:
        unread = dead_letters.unread_count(depth, letters, parked, ())
        return DeadLetterOutcome(name, depth, 0, already, unread, None), found
    recorded = [*parks.parked, *pointer_parks.parked, *pointer_parks.stale]
    failed = [*parks.failed, *pointer_parks.failed]
    found += Found.recorded(recorded, True) + Found(
        not_moved=tuple(
            RowNotMoved(f"dead letter {identity}", reason) for identity, reason in failed
        )
    )
    # A letter that could not be parked is unread, never assumed parked.
    unread = dead_letters.unread_count(depth, letters, parked, new) + len(failed)
    raced = len(parks.already_parked) + len(pointer_parks.already_parked)  # another reaper's
    outcome = DeadLetterOutcome(
        name,
        depth,
        len(recorded),
        already + raced,
        unread,
        None,
        stale_pointers=len(pointer_parks.stale),
    )
    return outcome, found


def _split_pointers(
    letters: Sequence[DeadLetter], dispatch: Dispatch
) -> tuple[list[tuple[DeadLetter, DispatchPointer]], list[DeadLetter]]:
    """With outbox dispatch, the letters that are dispatch pointers (each with its pointer)
    and the rest; otherwise every letter is a plain one."""
    if dispatch is not Dispatch.OUTBOX:
        return [], list(letters)
    return split_found(letters, dead_letters.dispatch_pointer)

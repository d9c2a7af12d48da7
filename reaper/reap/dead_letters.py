"""The pass's dead-letter step (SPEC §1 (e)): park what owned dead-letter queues hold; surface
foreign ones and every remainder. A queue is read only after the read is proven safe
(:func:`reaper.core.dead_letters.read_plan`), and never in a dry run.

Quiet is cheap (SPEC §10): a queue whose listing shows nothing arrived since a pass proved every
letter on it parked is not read at all (:func:`reaper.core.dead_letters.quiet_decision`, from
the mark that pass kept in the store); otherwise it is read first without bodies (``truncate``
0), and its bodies are read only when a letter seen is not parked yet
(:func:`reaper.core.dead_letters.quiet_read`). Both reads requeue every message."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from reaper.broker.port import Broker
from reaper.config import Settings
from reaper.core import dead_letters
from reaper.core.dead_letters import DispatchPointer
from reaper.core.domain import Action, BrokerFacts, DeadLetter, Dispatch, QueueStats, Verdict
from reaper.jobqueue.port import DeadLetterParks, JobQueue, ParkRules
from reaper.reap.progress import Progress, RowNotMoved

__all__ = ["DeadLetterOutcome", "park_dead_letters"]


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

    @property
    def ok(self) -> bool:
        return self.read_blocked is None


@dataclass(frozen=True)
class _Step:
    """What the pass needs for one queue."""

    settings: Settings
    broker: Broker
    store: JobQueue | None
    facts: BrokerFacts
    now: datetime
    dry_run: bool
    writable: bool
    dispatch: Dispatch


async def park_dead_letters(
    settings: Settings,
    broker: Broker,
    store: JobQueue | None,
    facts: BrokerFacts,
    verdicts: Sequence[Verdict],
    *,
    now: datetime,
    dry_run: bool,
    writable: bool,
    dispatch: Dispatch,
    progress: Progress,
) -> tuple[list[DeadLetterOutcome], list[Verdict]]:
    """Each owned dead-letter queue's outcome, and the dead-letter verdicts to surface (foreign
    queues, and owned ones with letters not parked), for the sightings step. With outbox
    dispatch a letter that is a dispatch pointer parks the job it points to instead."""
    step = _Step(settings, broker, store, facts, now, dry_run, writable, dispatch)
    outcomes: list[DeadLetterOutcome] = []
    surfaced: list[Verdict] = []
    for verdict in verdicts:
        if verdict.action is not Action.PARK:  # a foreign queue: surfaced, never read
            surfaced.append(verdict)
            continue
        outcome = await _park_queue(step, verdict.object, progress)
        if outcome is None:
            continue
        outcomes.append(outcome)
        # A dry run does not read, so its remainder is unknown, not unparked.
        if outcome.read_blocked or (outcome.unread and not dry_run):
            why = outcome.read_blocked or (
                f"past the read limit of {settings.queue.reap.dead_letter_peek_limit} per pass"
            )
            # Recorded again only when it reaches a higher power of ten (the sighting's scope
            # is `<queue>#<bucket>`): a steady trickle is not an event per pass.
            bucket = dead_letters.remainder_bucket(outcome.unread)
            surfaced.append(
                replace(
                    verdict,
                    action=Action.SURFACE,
                    measured=outcome.unread,
                    threshold=0,
                    detail=(
                        f"{outcome.unread} dead letter(s) not parked (at least {bucket}): {why}"
                    ),
                    bucket=bucket,
                )
            )
    return outcomes, surfaced


async def _park_queue(step: _Step, name: str, progress: Progress) -> DeadLetterOutcome | None:
    reap = step.settings.queue.reap
    # Fresh from the broker: reconciliation may just have put the dead-letter policy in force.
    queue = await progress.guarded(step.broker.queue(name))
    if queue is None:
        return None
    depth = queue.messages
    if step.store is None:
        blocked = "the ledger (PostgreSQL) could not be read, so nothing read could be parked"
        return DeadLetterOutcome(name, depth, 0, 0, depth, blocked)
    hint = await progress.guarded(step.store.count_parked_dead_letters(name))
    if hint is None:
        return None
    plan = dead_letters.read_plan(queue, step.facts, reap.dead_letter_peek_limit, hint)
    if plan.blocked:
        return DeadLetterOutcome(name, depth, 0, 0, depth, plan.blocked)
    if step.dry_run:
        # A read sets `redelivered` and, on quorum queues, spends a delivery and reorders:
        # a dry run moves nothing on the broker, so it does not read at all.
        progress.notes.append(
            f"dry run: dead-letter queue {name!r} not read; a real pass would read up to "
            f"{plan.count} message(s) and park the new ones"
        )
        return DeadLetterOutcome(name, depth, 0, hint, max(0, depth - hint), None)
    if plan.count < 1:
        # Nothing listed to read: a get of none is never sent.
        return DeadLetterOutcome(name, depth, 0, 0, depth, None)
    scope = step.settings.bus.vhost
    mark = await progress.guarded(step.store.quiet_mark(scope, name)) if step.writable else None
    decision = dead_letters.quiet_decision(queue, mark, step.now)
    if mark is not None and not decision.read:
        progress.notes.append(f"dead-letter queue {name!r} not read: {decision.why}")
        return DeadLetterOutcome(name, depth, 0, mark.letters, 0, None, not_fetched=decision.why)
    # First without bodies: a pass that finds only letters already parked reads no body.
    heads = await progress.guarded(step.broker.get_messages(name, plan.count, truncate=0))
    if heads is None:
        return None
    seen = dead_letters.header_read(heads)
    known = await _known_parked(step.store, seen, progress)
    if known is None:
        return None
    if known.quiet or not step.writable:
        # Nothing new, or no ledger to park into: what is not known parked is unread.
        if step.writable:
            await _keep_mark(step, queue, mark, len(heads), known.covered, len(heads), progress)
        return DeadLetterOutcome(name, depth, 0, known.parked, max(0, depth - known.covered), None)
    raw = await progress.guarded(step.broker.get_messages(name, plan.count))
    if raw is None:
        return None
    letters = dead_letters.decode_read(raw, queue=name)
    outcome = await _park_letters(step, step.store, name, depth, letters, progress)
    if outcome is None:
        return None
    # Every letter read is parked now only when none is left unread.
    parked = len(letters) if outcome.unread == 0 else 0
    await _keep_mark(step, queue, mark, len(letters), parked, len(heads) + len(raw), progress)
    return replace(outcome, bodies_read=len(letters))


async def _keep_mark(
    step: _Step,
    queue: QueueStats,
    previous: dead_letters.QuietMark | None,
    read: int,
    known_parked: int,
    fetched: int,
    progress: Progress,
) -> None:
    """Leave the next pass the mark of this read (:func:`reaper.core.dead_letters.quiet_mark`):
    proven or not, it replaces the last."""
    if step.store is None:
        return
    mark = dead_letters.quiet_mark(
        queue, previous, read=read, known_parked=known_parked, fetched_by_pass=fetched, now=step.now
    )
    await progress.guarded(step.store.keep_quiet_mark(step.settings.bus.vhost, mark))


async def _known_parked(
    store: JobQueue, seen: dead_letters.HeaderRead, progress: Progress
) -> dead_letters.QuietRead | None:
    """What the store knows of the letters a read without bodies saw."""
    identities: set[str] | None = set()
    if seen.identities:
        identities = await progress.guarded(store.parked_identities(sorted(set(seen.identities))))
    envelopes: dict[str, int] | None = {}
    if seen.envelopes:
        envelopes = await progress.guarded(store.parked_envelopes(sorted(set(seen.envelopes))))
    if identities is None or envelopes is None:
        return None
    return dead_letters.quiet_read(seen, identities, envelopes)


async def _park_letters(
    step: _Step,
    store: JobQueue,
    name: str,
    depth: int,
    letters: list[DeadLetter],
    progress: Progress,
) -> DeadLetterOutcome | None:
    """Park the new letters of a read with bodies."""
    reap = step.settings.queue.reap
    parked = await progress.guarded(store.parked_identities([x.identity for x in letters]))
    if parked is None:
        return None
    # Letters parked before envelopes were kept, or read since with another one: noted, so
    # that the next pass knows them without their bodies.
    noted = [
        (x.identity, x.envelope) for x in letters if x.identity in parked and x.envelope is not None
    ]
    if (
        noted
        and await progress.written(store.keep_envelopes(noted), f"envelopes of {name}") is None
    ):
        return None
    new, already = dead_letters.select_new(letters, parked, reap.dead_letter_peek_limit)
    if not new:
        unread = dead_letters.unread_count(depth, letters, parked, ())
        return DeadLetterOutcome(name, depth, 0, already, unread, None)
    rules = ParkRules(
        depth=depth,
        min_depth=reap.dead_letter_min_depth,
        owned_queue_pattern=reap.owned_queue_pattern,
        dead_letter_queue_pattern=reap.dead_letter_queue_pattern,
        lease_grace_seconds=reap.lease_grace_seconds,
    )
    pointers, plain = _split_pointers(new, step.dispatch)
    parks = await progress.written(
        store.park_dead_letters(plain, now=step.now, rules=rules), f"dead letters of {name}"
    )
    pointer_parks = (
        await progress.written(
            store.park_dispatch_pointers(pointers, now=step.now, rules=rules),
            f"dispatch pointers of {name}",
        )
        if pointers
        else DeadLetterParks()
    )
    if parks is None or pointer_parks is None:
        unread = dead_letters.unread_count(depth, letters, parked, ())
        return DeadLetterOutcome(name, depth, 0, already, unread, None)
    recorded = [*parks.parked, *pointer_parks.parked, *pointer_parks.stale]
    failed = [*parks.failed, *pointer_parks.failed]
    progress.record(recorded, True)
    progress.not_moved.extend(
        RowNotMoved(f"dead letter {identity}", reason) for identity, reason in failed
    )
    # A letter that could not be parked is unread, never assumed parked.
    unread = dead_letters.unread_count(depth, letters, parked, new) + len(failed)
    raced = len(parks.already_parked) + len(pointer_parks.already_parked)  # another reaper's
    return DeadLetterOutcome(
        name,
        depth,
        len(recorded),
        already + raced,
        unread,
        None,
        stale_pointers=len(pointer_parks.stale),
    )


def _split_pointers(
    letters: Sequence[DeadLetter], dispatch: Dispatch
) -> tuple[list[tuple[DeadLetter, DispatchPointer]], list[DeadLetter]]:
    """With outbox dispatch, the letters that are dispatch pointers (each with its pointer)
    and the rest; otherwise every letter is a plain one."""
    if dispatch is not Dispatch.OUTBOX:
        return [], list(letters)
    pointers: list[tuple[DeadLetter, DispatchPointer]] = []
    plain: list[DeadLetter] = []
    for letter in letters:
        pointer = dead_letters.dispatch_pointer(letter)
        if pointer is None:
            plain.append(letter)
        else:
            pointers.append((letter, pointer))
    return pointers, plain

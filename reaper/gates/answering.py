"""Answering a gate: found, checked, taken on the store, and what was done returned.

The answer is taken on the store (:meth:`~reaper.jobqueue.port.JobQueue.answer_gate`);
:mod:`reaper.gates.wording` says what was done in words (SPEC §1).

Every answer commits with its ``GateAnswered`` event and the job's move in one transaction. A
``replay`` publishes the kept body to its origin queue first, only where
:func:`~reaper.core.dead_letters.replay_decision` allows it, and records the answer only once
the broker says it routed the message; the gate row stays locked from before the check until
the answer commits, so two people answering at once publish once. Neither answer touches the
dead-letter queue: clearing it is a person's act. ``docs/behaviour.md`` has each choice.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol
from uuid import UUID

from reaper.broker.port import Broker
from reaper.config import Settings
from reaper.core.dead_letters import decoded_body, quote_untrusted, replay_decision
from reaper.core.domain import GATE_BUS_DEAD_LETTERED, GATE_DELIVERY_EXHAUSTED, Dispatch
from reaper.core.records import Gate
from reaper.errors import BrokerUnavailable, GateError, StoreUnavailable
from reaper.gates.ids import find_gate
from reaper.jobqueue.dispatch import dispatch_in_force
from reaper.jobqueue.port import GateChoice, JobQueue, ParkedDeadLetter
from reaper.jobqueue.rules import DEAD_LETTER_REPLAY, check_answerable, not_the_latest

__all__ = [
    "REPLAY_CONTENT_TYPE",
    "AnswerPreview",
    "GateAnswer",
    "Sources",
    "answer_gate",
    "preview_answer",
    "replay_message_id",
]

#: The content type a replayed body is published with: replay only sends whole JSON objects.
REPLAY_CONTENT_TYPE = "application/json"

#: AMQP's ``message_id`` is a shortstr: at most 255 bytes.
_SHORTSTR_BYTES = 255


class Sources(Protocol):
    """What an answer reads and writes through: the store (None: ``store_error`` says why) and,
    for a replay, the broker (the pass's own sources are such)."""

    @property
    def store(self) -> JobQueue | None: ...

    @property
    def store_error(self) -> str | None: ...

    @property
    def broker(self) -> Broker | None: ...


@dataclass(frozen=True)
class GateAnswer:
    """An answer taken: the gate as answered, the dead letter its job kept (None for a
    delivery gate), the message id a replay was published with, and the dispatch in force."""

    gate: Gate
    parked: ParkedDeadLetter | None = None
    message_id: str | None = None
    dispatch: Dispatch = Dispatch.POLLING


@dataclass(frozen=True)
class AnswerPreview:
    """What an answer would do, checked as the answer checks it; nothing written or sent."""

    gate: Gate
    choice: str
    answered_by: str | None
    dispatch: Dispatch
    #: The dead letter a ``bus_dead_lettered`` gate's job keeps (None for a delivery gate).
    parked: ParkedDeadLetter | None = None
    #: The message id a replay would be published with.
    message_id: str | None = None


def replay_message_id(identity: str, gate_id: UUID) -> str:
    """The message id a replay is published with: ``replay:<identity>:<gate id>``, or, where
    that would not fit AMQP's 255 bytes, the identity's sha256 in its place."""
    message_id = f"replay:{identity}:{gate_id}"
    if len(message_id.encode("utf-8", "surrogatepass")) <= _SHORTSTR_BYTES:
        return message_id
    digest = hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()
    return f"replay:sha256:{digest}:{gate_id}"


async def _open(
    sources: Sources,
    settings: Settings,
    gate_id: UUID | str,
    clock: Callable[[], datetime] | None,
) -> tuple[JobQueue, Gate, datetime, Dispatch]:
    """The store, the gate named, the answer's ``now`` and the dispatch in force."""
    store = sources.store
    if store is None:
        reason_ = sources.store_error or "not connected"
        raise GateError(f"cannot answer gate {gate_id}: the store is unavailable ({reason_})")
    gate = await find_gate(store, gate_id)
    # The answer stamps run_after: the database's clock, as the host's claims read it. A job
    # made ready again where the host dispatches through an outbox starts a new episode.
    facts = await store.database_facts()
    now = clock() if clock is not None else facts.now
    dispatch = dispatch_in_force(settings.queue.reap.dispatch, facts.outbox_schema)
    return store, gate, now, dispatch.mode


async def answer_gate(
    sources: Sources,
    settings: Settings,
    gate_id: UUID | str,
    choice: str,
    *,
    clock: Callable[[], datetime] | None = None,
    answered_by: str | None = None,
    reason: str | None = None,
) -> GateAnswer:
    """Answer gate ``gate_id`` (an id or a unique prefix) with ``choice``.

    ``sources.broker`` is used only by ``replay``. Raises :class:`GateError` for an answer that
    cannot be taken (unknown gate, answered already, a choice it does not offer, a replay
    refused or not routed) and :class:`BrokerUnavailable` / :class:`StoreUnavailable` when a
    source fails; in every such case nothing was recorded, unless the message says the body
    was published."""
    store, gate, now, dispatch = await _open(sources, settings, gate_id, clock)
    given = GateChoice(gate.id, choice, now, answered_by, reason)
    if gate.kind != GATE_BUS_DEAD_LETTERED:
        answered = await store.answer_gate(given, dispatch=dispatch)
        return GateAnswer(answered, dispatch=dispatch)
    published: list[str] = []

    async def replay(gate: Gate, parked: ParkedDeadLetter) -> str:
        message_id = await _replay(sources, settings, gate, parked)
        published.append(message_id)
        return message_id

    try:
        answered, parked = await store.answer_dead_letter_gate(given, replay=replay)
    except StoreUnavailable as exc:
        if not published:
            raise
        raise StoreUnavailable(
            f"gate {gate.id}: the body WAS published (message id {published[0]!r}) but "
            f"recording the answer failed: {exc.reason}. The gate is still open: answering "
            "replay again publishes the body again"
        ) from None
    return GateAnswer(answered, parked, published[0] if published else None, dispatch)


async def _replay(
    sources: Sources, settings: Settings, gate: Gate, parked: ParkedDeadLetter
) -> str:
    """Publish the kept body back to its origin queue, as the store's answer asks (the gate
    row locked): the message id once the broker routed it, else an error, nothing recorded."""
    reap = settings.queue.reap
    kept = parked.letter
    allowed, why = replay_decision(kept, reap.owned_queue_pattern, reap.dead_letter_queue_pattern)
    if not allowed:
        raise GateError(
            f"gate {gate.id}: replay refused, {why}; nothing was sent or recorded "
            "(answer dismiss to settle it)"
        )
    broker = sources.broker
    if broker is None:
        raise GateError(f"gate {gate.id}: replay needs the broker, which is not connected")
    origin = kept.origin_queue or ""  # never empty: replay_decision refuses that
    message_id = replay_message_id(kept.identity, gate.id)
    # a whole JSON object: strict UTF-8 (replay_decision checked it)
    body = decoded_body(kept).decode("utf-8")
    properties = {
        "message_id": message_id,
        "content_type": REPLAY_CONTENT_TYPE,
        "delivery_mode": 2,
    }
    try:
        routed = await broker.publish(origin, body, properties=properties)
    except BrokerUnavailable as exc:
        raise BrokerUnavailable(
            f"gate {gate.id}: replay to {quote_untrusted(origin)} was not confirmed "
            f"({exc.reason}); nothing was recorded and the gate stays open",
            exc.status,
        ) from None
    if not routed:
        raise GateError(
            f"gate {gate.id}: replay to {quote_untrusted(origin)} was not routed: the "
            f"broker has no such queue on vhost {settings.bus.vhost!r}; nothing was "
            "delivered or recorded and the gate stays open"
        )
    return message_id


async def preview_answer(
    sources: Sources,
    settings: Settings,
    gate_id: UUID | str,
    choice: str,
    *,
    answered_by: str | None = None,
) -> AnswerPreview:
    """What answering gate ``gate_id`` with ``choice`` would do (``--dry-run``), refused as the
    answer would refuse it; nothing written or sent (a replay is not published)."""
    store, gate, _, dispatch = await _open(sources, settings, gate_id, None)
    check_answerable(gate, choice)
    if gate.superseded_by is not None:
        [later] = await store.gates_between(gate.superseded_by, gate.superseded_by, 1)
        raise GateError(not_the_latest(gate, later.id, later.kind, later.created_at))
    preview = AnswerPreview(gate, choice, answered_by, dispatch)
    if gate.kind == GATE_DELIVERY_EXHAUSTED:
        return preview
    parked = (
        (await store.parked_dead_letters([gate.job_id])).get(gate.job_id) if gate.job_id else None
    )
    if choice != DEAD_LETTER_REPLAY:
        return AnswerPreview(gate, choice, answered_by, dispatch, parked)
    if parked is None:
        raise GateError(
            f"gate {gate.id}: its job keeps no dead letter, so there is nothing to replay"
        )
    reap = settings.queue.reap
    allowed, why = replay_decision(
        parked.letter, reap.owned_queue_pattern, reap.dead_letter_queue_pattern
    )
    if not allowed:
        raise GateError(f"gate {gate.id}: replay refused, {why}; answer dismiss to settle it")
    message_id = replay_message_id(parked.letter.identity, gate.id)
    return AnswerPreview(gate, choice, answered_by, dispatch, parked, message_id)

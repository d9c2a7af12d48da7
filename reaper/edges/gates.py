"""Answering a gate: what ``reaper gates answer GATE --choice CHOICE`` does (SPEC §1).

Every answer is on the ledger: the answer, who gave it (``--by``, by default the OS user and
host) and one ``GateAnswered`` event commit in one transaction with the job's move. A gate is
named by its id or any unique prefix of it. ``--dry-run`` says what the answer would do and
writes nothing (a replay is not published).

- ``delivery_exhausted``, ``retry``: the store re-readies the parked job for exactly one more
  delivery (:meth:`PostgresStore.answer_gate`); ``cancel``: the job ends ``cancelled``.
- ``bus_dead_lettered``, ``dismiss``: the gate is answered and the parked ``bus.dead_letter``
  job settles ``cancelled``; nothing is sent.
- ``bus_dead_lettered``, ``replay``: only when ``deadletters.replay_decision`` allows it (a
  whole JSON object, an origin queue we own that is not a dead-letter queue), the body is
  published back to its origin queue with a new message id (``replay:<identity>:<gate id>``,
  so a second death is a new dead letter with a gate of its own), and only once the broker
  says it routed the message are the answer recorded and the job settled ``succeeded``. The
  gate row stays locked from before the check until the answer commits, so two people
  answering at once publish once. A refused, failed or unrouted replay records nothing.

Neither answer touches the dead-letter queue: the broker's copy stays where it is, and
clearing that queue is a person's act.
"""

from __future__ import annotations

import getpass
import hashlib
import socket
from collections.abc import Callable
from datetime import datetime
from uuid import UUID

from reaper.config import Settings
from reaper.core.dead_letters import decoded_body, quote_untrusted, replay_decision
from reaper.core.domain import GATE_BUS_DEAD_LETTERED, GATE_DELIVERY_EXHAUSTED, Dispatch
from reaper.core.records import Gate
from reaper.errors import BrokerUnavailable, GateError, StoreUnavailable
from reaper.jobqueue.port import JobQueue, ParkedDeadLetter
from reaper.jobqueue.rules import (
    DEAD_LETTER_KEY_PREFIX,
    DEAD_LETTER_REPLAY,
    DELIVERY_CANCEL,
    check_answerable,
    gate_id_range,
    not_the_latest,
)
from reaper.reap.dispatch import dispatch_in_force
from reaper.reap.sources import Sources

__all__ = [
    "REPLAY_CONTENT_TYPE",
    "answer_gate",
    "default_answerer",
    "find_gate",
    "replay_message_id",
    "short_id",
]

#: How many hex digits of a gate's id a person is shown (and may type).
SHORT_ID_DIGITS = 8

#: How many candidates an ambiguous prefix names.
_CANDIDATES = 10

#: The content type a replayed body is published with: replay only sends whole JSON objects.
REPLAY_CONTENT_TYPE = "application/json"

#: AMQP's ``message_id`` is a shortstr: at most 255 bytes.
_SHORTSTR_BYTES = 255


def replay_message_id(identity: str, gate_id: UUID) -> str:
    """The message id a replay is published with: ``replay:<identity>:<gate id>``, or, where
    that would not fit AMQP's 255 bytes, the identity's sha256 in its place."""
    message_id = f"replay:{identity}:{gate_id}"
    if len(message_id.encode("utf-8", "surrogatepass")) <= _SHORTSTR_BYTES:
        return message_id
    digest = hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()
    return f"replay:sha256:{digest}:{gate_id}"


def short_id(gate_id: UUID) -> str:
    """The first hex digits of a gate's id: what ``gates list`` shows and a person types."""
    return gate_id.hex[:SHORT_ID_DIGITS]


def default_answerer() -> str:
    """Who answers when ``--by`` is not given: the OS user and host, ``user@host``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


async def find_gate(store: JobQueue, named: UUID | str) -> Gate:
    """The gate ``named`` (its id, or any unique prefix of it), or a :class:`GateError`: no
    such gate, or a prefix several gates share (naming them)."""
    if isinstance(named, UUID):
        low = high = named
    else:
        low, high = gate_id_range(named)
    found = await store.gates_between(low, high, _CANDIDATES + 1)
    if not found:
        what = low if low == high else f"with an id starting {str(named).strip()!r}"
        raise GateError(f"gate {what} does not exist")
    if len(found) > 1:
        shown = ", ".join(f"{g.id} ({g.kind}, raised {g.created_at.isoformat()})" for g in found)
        more = " and more" if len(found) > _CANDIDATES else ""
        raise GateError(
            f"{str(named).strip()!r} names more than one gate: {shown}{more}; type more of the id"
        )
    return found[0]


async def answer_gate(
    sources: Sources,
    settings: Settings,
    gate_id: UUID | str,
    choice: str,
    *,
    clock: Callable[[], datetime] | None = None,
    answered_by: str | None = None,
    reason: str | None = None,
    dry_run: bool = False,
) -> str:
    """Answer gate ``gate_id`` (an id or a unique prefix) with ``choice`` and return a
    one-line outcome for a person; with ``dry_run``, what the answer would do, nothing
    written or sent.

    ``sources.broker`` is used only by ``replay``. Raises :class:`GateError` for an answer that
    cannot be taken (unknown gate, answered already, a choice it does not offer, a replay
    refused or not routed) and
    :class:`BrokerUnavailable` / :class:`StoreUnavailable` when a source fails; in every such
    case nothing was recorded, except where the message says the body was published.
    """
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
    if dry_run:
        return await _would(store, settings, gate, choice, answered_by, dispatch.mode)
    if gate.kind != GATE_BUS_DEAD_LETTERED:
        answered = await store.answer_gate(
            gate.id, choice, now, answered_by=answered_by, dispatch=dispatch.mode, reason=reason
        )
        return _answered(answered, dispatch=dispatch.mode)

    reap = settings.queue.reap
    broker = sources.broker
    published: list[str] = []

    async def replay(gate: Gate, parked: ParkedDeadLetter) -> str:
        kept = parked.letter
        allowed, why = replay_decision(
            kept, reap.owned_queue_pattern, reap.dead_letter_queue_pattern
        )
        if not allowed:
            raise GateError(
                f"gate {gate.id}: replay refused, {why}; nothing was sent or recorded "
                "(answer dismiss to settle it)"
            )
        if broker is None:
            raise GateError(f"gate {gate.id}: replay needs the broker, which is not connected")
        origin = kept.origin_queue or ""  # never empty: replay_decision refuses that
        message_id = replay_message_id(kept.identity, gate.id)
        # a whole JSON object: strict UTF-8 (replay_decision checked it)
        body = decoded_body(kept).decode("utf-8")
        try:
            routed = await broker.publish(
                origin,
                body,
                properties={
                    "message_id": message_id,
                    "content_type": REPLAY_CONTENT_TYPE,
                    "delivery_mode": 2,
                },
            )
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
        published.append(message_id)
        return message_id

    try:
        answered, parked = await store.answer_dead_letter_gate(
            gate.id, choice, now, replay=replay, answered_by=answered_by, reason=reason
        )
    except StoreUnavailable as exc:
        if not published:
            raise
        raise StoreUnavailable(
            f"gate {gate.id}: the body WAS published (message id {published[0]!r}) but "
            f"recording the answer failed: {exc.reason}. The gate is still open: answering "
            "replay again publishes the body again"
        ) from None
    return _answered(answered, parked, published[0] if published else None)


async def _would(
    store: JobQueue,
    settings: Settings,
    gate: Gate,
    choice: str,
    answered_by: str | None,
    dispatch: Dispatch,
) -> str:
    """What answering ``gate`` with ``choice`` would do, checked as the answer checks it."""
    check_answerable(gate, choice)
    if gate.superseded_by is not None:
        [later] = await store.gates_between(gate.superseded_by, gate.superseded_by, 1)
        raise GateError(not_the_latest(gate, later.id, later.kind, later.created_at))
    head = (
        f"dry run: gate {gate.id} ({gate.kind}) would be answered {choice!r} by "
        f"{answered_by or 'nobody named'}"
    )
    tail = f"; one GateAnswered event on stream {gate.project_id}. Nothing was written or sent"
    if gate.kind == GATE_DELIVERY_EXHAUSTED:
        if choice == DELIVERY_CANCEL:
            return f"{head}: job {gate.job_id} would end cancelled, never delivered again{tail}"
        how = (
            " at a new dispatch generation (one outbox row)" if dispatch is Dispatch.OUTBOX else ""
        )
        return f"{head}: job {gate.job_id} would be ready for exactly one more delivery{how}{tail}"
    parked = (
        (await store.parked_dead_letters([gate.job_id])).get(gate.job_id) if gate.job_id else None
    )
    if choice != DEAD_LETTER_REPLAY:
        return f"{head}: job {gate.job_id} would be cancelled, nothing sent{tail}"
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
    letter = parked.letter
    return (
        f"{head}: {letter.body_bytes} bytes would be published to "
        f"{quote_untrusted(letter.origin_queue)} as message "
        f"{replay_message_id(letter.identity, gate.id)!r} and job {gate.job_id} would succeed"
        f"{tail}"
    )


def _answered(
    gate: Gate,
    parked: ParkedDeadLetter | None = None,
    message_id: str | None = None,
    *,
    dispatch: Dispatch = Dispatch.POLLING,
) -> str:
    head = f"gate {gate.id} ({gate.kind}) answered {gate.answer!r}"
    if gate.kind == GATE_DELIVERY_EXHAUSTED:
        if (gate.identity or "").startswith(DEAD_LETTER_KEY_PREFIX):
            # parked by its dead-lettered dispatch message: no attempt was spent or refunded
            return (
                f"{head}: job {gate.job_id} is ready again, dispatched at a new generation "
                "(a new message, with the broker's delivery limit counted afresh)"
            )
        if gate.answer == DELIVERY_CANCEL:
            return f"{head}: job {gate.job_id} cancelled; it is never delivered again"
        how = " at a new dispatch generation" if dispatch is Dispatch.OUTBOX else ""
        return f"{head}: job {gate.job_id} is ready for exactly one more delivery{how}"
    if parked is None:
        return f"{head}: job {gate.job_id} settled; nothing was sent"
    letter = parked.letter
    stays = f"the broker's copy stays on {quote_untrusted(letter.queue)}"
    if message_id is not None:
        return (
            f"{head}: {letter.body_bytes} bytes published to "
            f"{quote_untrusted(letter.origin_queue)} as message {message_id!r}; "
            f"job {gate.job_id} succeeded; {stays}"
        )
    return f"{head}: job {gate.job_id} cancelled, nothing was sent; {stays}"

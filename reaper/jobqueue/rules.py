"""What any job-queue store does with a gate, whichever store it is.

What any job-queue store does with a gate, whichever store it is: the gate a park raises, its
identity and its answers, a dead letter's key; whether a gate takes an answer, what it makes of
the parked job, a replay published through the caller's sender, the ``GateAnswered`` event's
payload. Shared by :class:`~reaper.jobqueue.postgres.PostgresStore` and
:class:`~reaper.testing.memory.MemoryJobQueue`, so the two cannot drift apart. Pure but for
the replay, which goes through the sender it is given."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final
from uuid import UUID

from reaper.core.canonical import quote_owner
from reaper.core.dead_letters import GATE_CHOICES
from reaper.core.domain import (
    GATE_BUS_DEAD_LETTERED,
    GATE_DELIVERY_EXHAUSTED,
    Condition,
    HeldLease,
)
from reaper.core.moments import utc
from reaper.core.records import Gate
from reaper.errors import GateError
from reaper.jobqueue.port import GateChoice, ParkedDeadLetter, ReplaySender

__all__ = [
    "DEAD_LETTER_DISMISS",
    "DEAD_LETTER_KEY_PREFIX",
    "DEAD_LETTER_REPLAY",
    "DELIVERY_CANCEL",
    "DELIVERY_EXHAUSTED_CHOICES",
    "DELIVERY_RETRY",
    "GATE_ANSWERED",
    "READY",
    "answered_payload",
    "check_answerable",
    "dead_letter_key",
    "dead_letter_settled",
    "job_after",
    "not_the_latest",
    "offered_choices",
    "park_identity",
    "park_prompt",
    "publish_replay",
]

#: The answers a ``delivery_exhausted`` gate offers: deliver it once more, or give it up.
DELIVERY_RETRY, DELIVERY_CANCEL = DELIVERY_EXHAUSTED_CHOICES = ("retry", "cancel")

#: A parked dead letter's job idempotency key and gate identity: this prefix and its identity.
DEAD_LETTER_KEY_PREFIX: Final = "dead_letter:"


def dead_letter_key(identity: str) -> str:
    """The job idempotency key and gate identity of the dead letter ``identity``."""
    return DEAD_LETTER_KEY_PREFIX + identity


def park_identity(lease: HeldLease) -> str:
    """One gate per episode: the job and the lease that ran out (a later lease of the same
    job, after an answer, is a new episode with a new expiry)."""
    # the form first written, not core.moments.utc: another form would raise a second gate
    expired = lease.lease_expires_at.astimezone(UTC).isoformat()
    return f"{GATE_DELIVERY_EXHAUSTED}:{lease.job_id}:{expired}"


def park_prompt(lease: HeldLease) -> str:
    """The ``delivery_exhausted`` gate's question, for a person."""
    owner = quote_owner(lease.lease_owner, "an unknown holder")
    expired = utc(lease.lease_expires_at)
    return (
        f"Job {lease.job_id} ({lease.kind[:200]}) has been delivered {lease.attempts} times, "
        f"its limit of {lease.max_attempts}, and its last lease, held by {owner}, expired at "
        f"{expired} without the job finishing. It is parked and will not be delivered again "
        f"on its own. Answer 'retry' to deliver it exactly once more (one attempt was "
        f"refunded when it was parked), or 'cancel' to give it up (it ends cancelled and is "
        f"never delivered again); leave this gate open to keep it parked."
    )


#: The ledger event kind of an answer (SPEC §1): one per answer, with the job's move.
GATE_ANSWERED: Final = "GateAnswered"

#: The condition an answer closes, by gate kind (so ``reaper events --condition`` finds both
#: the park and its answer).
_CONDITION_OF_GATE: Final = {
    GATE_DELIVERY_EXHAUSTED: Condition.POISON.value,
    GATE_BUS_DEAD_LETTERED: Condition.DEAD_LETTER.value,
}

#: The two answers of a ``bus_dead_lettered`` gate.
DEAD_LETTER_REPLAY, DEAD_LETTER_DISMISS = GATE_CHOICES

#: What a parked dead-letter job settles as: a replay did the job's work (the body is back on
#: its queue); a dismissal settles it with nothing done.
_DEAD_LETTER_SETTLED: Final = {DEAD_LETTER_REPLAY: "succeeded", DEAD_LETTER_DISMISS: "cancelled"}

_REPLAY_NEEDS_BROKER: Final = (
    "gate {gate}: replay publishes the body to the broker, which the store alone cannot do: "
    "answer it with `reaper gates answer`"
)

#: What an answer makes of a parked job to deliver it once more (any other answer settles it).
READY: Final = "ready"


def not_the_latest(gate: Gate, newer: UUID, kind: str, raised: datetime) -> str:
    """Why an answer to ``gate`` is refused when its job has a newer gate: an answer acts only
    while the job waits behind the very gate answered (a stale answer must not reopen a job
    parked for another reason)."""
    return (
        f"gate {gate.id} is not job {gate.job_id}'s latest gate: gate {newer} ({kind}, raised "
        f"{utc(raised)}) is, and the job waits behind that one; answer it instead. "
        "Nothing was written"
    )


def check_answerable(gate: Gate, choice: str) -> None:
    """Refuse (``GateError``) an answer ``gate`` cannot take: it was answered already, or
    ``choice`` is not one it offers."""
    if gate.answered_at is not None:
        raise GateError(
            f"gate {gate.id} was already answered at {utc(gate.answered_at)} with {gate.answer!r}"
        )
    choices = offered_choices(gate)
    if choice not in choices:
        offered = ", ".join(repr(c) for c in choices) or "nothing"
        raise GateError(f"{choice!r} is not an answer gate {gate.id} offers: choose {offered}")


def offered_choices(gate: Gate) -> tuple[str, ...]:
    """The answers ``gate`` takes: those it was raised with, and for a ``delivery_exhausted``
    gate ``cancel`` too (a gate raised before the job could be given up can still be)."""
    if gate.kind == GATE_DELIVERY_EXHAUSTED and DELIVERY_CANCEL not in gate.choices:
        return (*gate.choices, DELIVERY_CANCEL)
    return gate.choices


def answered_payload(
    gate: Gate, answer: GateChoice, published: tuple[str, str] | None = None
) -> dict[str, object]:
    """The ``GateAnswered`` event's payload: the gate, its job (the ``object``, as a park's
    event names it), the choice, who answered and why, and for a replay the queue and message
    id it published (``published``)."""
    queue, message_id = published if published is not None else (None, None)
    return {
        "object": str(gate.job_id if gate.job_id is not None else gate.id),
        "gate": str(gate.id),
        "gate_kind": gate.kind,
        "job": None if gate.job_id is None else str(gate.job_id),
        "condition": _CONDITION_OF_GATE.get(gate.kind),
        "choice": answer.choice,
        "by": answer.answered_by,
        "reason": answer.reason,
        "queue": queue,
        "message_id": message_id,
    }


def job_after(gate: Gate, choice: str) -> str:
    """What answering ``gate`` with ``choice`` makes of its job, if the job still awaits a
    person: :data:`READY` for exactly one more delivery (a ``delivery_exhausted`` gate's
    ``retry``: the attempt refunded at the park pays for it), else the state it settles in.
    ``GateError`` for a replay (only the broker can publish it) or a kind no store answers."""
    if gate.kind == GATE_DELIVERY_EXHAUSTED:
        return "cancelled" if choice == DELIVERY_CANCEL else READY
    if gate.kind == GATE_BUS_DEAD_LETTERED:
        if choice == DEAD_LETTER_REPLAY:
            raise GateError(_REPLAY_NEEDS_BROKER.format(gate=gate.id))
        return _DEAD_LETTER_SETTLED[choice]
    raise GateError(f"gate {gate.id} is a {gate.kind} gate: this store cannot answer it")


def dead_letter_settled(gate: Gate, choice: str) -> str:
    """What answering the ``bus_dead_lettered`` gate ``gate`` with ``choice`` settles its job
    as (a replay's only once the letter is published); ``GateError`` for another kind."""
    if gate.kind != GATE_BUS_DEAD_LETTERED:
        raise GateError(
            f"gate {gate.id} is a {gate.kind} gate, not a {GATE_BUS_DEAD_LETTERED} gate"
        )
    return _DEAD_LETTER_SETTLED[choice]


async def publish_replay(
    gate: Gate, replay: ReplaySender | None, parked: ParkedDeadLetter | None
) -> tuple[str, str]:
    """Publish a replay answer's letter through ``replay``, or refuse (``GateError``) naming
    what it lacks: the broker to publish to, or the dead letter its job keeps. The queue and
    message id it was published with (the queue from the letter's headers: untrusted)."""
    if replay is None:
        raise GateError(_REPLAY_NEEDS_BROKER.format(gate=gate.id))
    if parked is None:
        raise GateError(
            f"gate {gate.id}: its job keeps no dead letter, so there is nothing to replay"
        )
    return parked.letter.origin_queue or "", await replay(gate, parked)

"""What any desk does with an answer, whichever store it answers on: whether a gate takes it,
what it settles a parked job as, the ``GateAnswered`` event's payload, and a gate found by a
prefix of its id. Shared by :class:`~reaper.desk.postgres.PostgresDesk` and
:class:`~reaper.testing.memory.MemoryJobQueue`, so the two cannot drift apart. Pure."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Final, TypeVar
from uuid import UUID

from reaper.core.dead_letters import GATE_CHOICES
from reaper.core.domain import GATE_BUS_DEAD_LETTERED, GATE_DELIVERY_EXHAUSTED, Condition
from reaper.core.moments import utc
from reaper.core.records import Gate
from reaper.errors import GateError
from reaper.jobqueue.rules import DELIVERY_CANCEL

__all__ = [
    "DEAD_LETTER_DISMISS",
    "DEAD_LETTER_REPLAY",
    "DEAD_LETTER_SETTLED",
    "GATE_ANSWERED",
    "REPLAY_NEEDS_BROKER",
    "answered_payload",
    "check_answerable",
    "gate_id_range",
    "not_the_latest",
    "offered_choices",
    "replay_parts",
]

_R = TypeVar("_R")
_P = TypeVar("_P")

#: The ledger event kind of an answer (SPEC §1): one per answer, with the job's move.
GATE_ANSWERED: Final = "GateAnswered"

#: The condition an answer closes, by gate kind (so ``reaper events --condition`` finds both
#: the park and its answer).
_CONDITION_OF_GATE: Final = {
    GATE_DELIVERY_EXHAUSTED: Condition.POISON.value,
    GATE_BUS_DEAD_LETTERED: Condition.DEAD_LETTER.value,
}

_HEX_PREFIX: Final = re.compile(r"[0-9a-f]{1,32}")

#: The two answers of a ``bus_dead_lettered`` gate.
DEAD_LETTER_REPLAY, DEAD_LETTER_DISMISS = GATE_CHOICES

#: What a parked dead-letter job settles as: a replay did the job's work (the body is back on
#: its queue); a dismissal settles it with nothing done.
DEAD_LETTER_SETTLED: Final = {DEAD_LETTER_REPLAY: "succeeded", DEAD_LETTER_DISMISS: "cancelled"}

REPLAY_NEEDS_BROKER: Final = (
    "gate {gate}: replay publishes the body to the broker, which the store alone cannot do: "
    "answer it with `reaper gates answer`"
)


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
    gate: Gate,
    choice: str,
    answered_by: str | None,
    reason: str | None,
    published: tuple[str, str] | None = None,
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
        "choice": choice,
        "by": answered_by,
        "reason": reason,
        "queue": queue,
        "message_id": message_id,
    }


def gate_id_range(prefix: str) -> tuple[UUID, UUID]:
    """The ids a gate id or prefix of one (hex, dashes anywhere) stands for, lowest and
    highest, so a prefix is looked up on the primary key; ``GateError`` for what is not one."""
    hex_digits = prefix.strip().lower().replace("-", "")
    if _HEX_PREFIX.fullmatch(hex_digits) is None:
        raise GateError(
            f"not a gate id or a prefix of one (hex digits, e.g. the 8 `gates list` shows): "
            f"{prefix!r}"
        )
    return UUID(hex_digits.ljust(32, "0")), UUID(hex_digits.ljust(32, "f"))


def replay_parts(gate: Gate, replay: _R | None, parked: _P | None) -> tuple[_R, _P]:
    """What a replay answer to ``gate`` needs, or a refusal (``GateError``) naming what it
    lacks: the broker to publish to (``replay``), and the dead letter its job keeps."""
    if replay is None:
        raise GateError(REPLAY_NEEDS_BROKER.format(gate=gate.id))
    if parked is None:
        raise GateError(
            f"gate {gate.id}: its job keeps no dead letter, so there is nothing to replay"
        )
    return replay, parked

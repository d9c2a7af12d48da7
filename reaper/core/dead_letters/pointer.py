"""A dead-lettered dispatch message: the pointer to a job row that names the job to park.

A dead-lettered dispatch message (ADR-0044 §3, §8): where the host dispatches through
RabbitMQ, a dispatch message is a pointer to a job row, and a pointer the broker dead-lettered
(its delivery limit spent by consumers that died) names the job to park. Pure.

Only a whole body holding exactly a valid ``vibey.job.dispatch/1`` object is a pointer: anything
else is an ordinary dead letter, parked as one. The pointer's fields are untrusted (a publisher
wrote them); the store checks them against the job row before it moves anything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Final
from uuid import UUID

from reaper.core.dead_letters.decode import decoded_body
from reaper.core.dead_letters.untrusted import quote_untrusted
from reaper.core.domain import Action, Condition, DeadLetter, Source, Unit, Verdict

__all__ = [
    "DISPATCH_SCHEMA",
    "DispatchPointer",
    "dispatch_pointer",
    "pointer_prompt",
    "pointer_verdict",
]

#: The dispatch envelope's schema tag (ADR-0044 §3).
DISPATCH_SCHEMA: Final = "vibey.job.dispatch/1"

_KEYS: Final = frozenset({"schema", "job_id", "project_id", "dispatch_seq", "kind", "not_before"})


@dataclass(frozen=True)
class DispatchPointer:
    """The job a dispatch message points to, at the generation it was sent for."""

    job_id: UUID
    project_id: UUID
    dispatch_seq: int
    kind: str
    not_before: datetime


def dispatch_pointer(letter: DeadLetter) -> DispatchPointer | None:
    """The pointer ``letter`` carries, or None when it is not a whole, valid
    ``vibey.job.dispatch/1`` body (an unknown schema, a missing, extra or mistyped field)."""
    if letter.body_truncated or not letter.is_json_object:
        return None
    try:
        value = json.loads(decoded_body(letter).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or set(value) != _KEYS:
        return None
    if value["schema"] != DISPATCH_SCHEMA:
        return None
    seq, kind, not_before = value["dispatch_seq"], value["kind"], value["not_before"]
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        return None
    if not isinstance(kind, str) or not kind or not isinstance(not_before, str):
        return None
    try:
        job_id, project_id = UUID(str(value["job_id"])), UUID(str(value["project_id"]))
        due = datetime.fromisoformat(not_before)
    except ValueError:
        return None
    if due.tzinfo is None:
        return None
    return DispatchPointer(job_id, project_id, seq, kind, due)


def pointer_prompt(letter: DeadLetter, pointer: DispatchPointer) -> str:
    """The ``delivery_exhausted`` gate's question when a dead-lettered dispatch parked its job."""
    return (
        f"Job {pointer.job_id} ({quote_untrusted(pointer.kind)}) was dispatched at generation "
        f"{pointer.dispatch_seq}, and its dispatch message died on "
        f"{quote_untrusted(letter.origin_queue)} ({quote_untrusted(letter.reason)}): the "
        "broker dead-lettered it after its consumers failed it, once per delivery, up to the "
        f"queue's delivery limit. The job is parked and will not be dispatched again on its "
        "own. Answer 'retry' to dispatch it once more at a new generation (a fresh message, "
        "with a fresh delivery budget), or 'cancel' to give it up (it ends cancelled and is never "
        "dispatched again); leave this gate open to keep it parked. The dead "
        f"letter stays on {quote_untrusted(letter.queue)}; clearing that queue is a person's act."
    )


def pointer_verdict(
    letter: DeadLetter,
    pointer: DispatchPointer,
    *,
    depth: int,
    min_depth: int,
    parked: bool,
    found: str,
) -> Verdict:
    """The event recording what a dead-lettered dispatch pointer did: its job parked, or
    nothing (``found`` says what the job was when the pointer is stale). Untrusted, as every
    dead letter's event: the pointer came in a body a publisher wrote."""
    what = (
        "its job parked behind a delivery_exhausted gate"
        if parked
        else f"stale, nothing moved: the job {found}"
    )
    return Verdict(
        source=Source.BROKER,
        object=str(pointer.job_id),
        condition=Condition.DEAD_LETTER,
        measured=depth,
        threshold=min_depth,
        unit=Unit.MESSAGES,
        action=Action.PARK if parked else Action.NONE,
        queue=letter.queue,
        detail=(
            f"dead-lettered dispatch of job {pointer.job_id} at generation "
            f"{pointer.dispatch_seq}, read from {quote_untrusted(letter.queue)} "
            f"(died on {quote_untrusted(letter.origin_queue)}): {what}"
        ),
        trusted=False,
    )

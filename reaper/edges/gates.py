"""A gate answered, as a person sees it: ``reaper gates answer`` calls
:mod:`reaper.reap.gates` and says here what the answer did, or would do (``--dry-run``), in
one line; who answers by default, and the short id a person types."""

from __future__ import annotations

import getpass
import socket
from collections.abc import Callable
from datetime import datetime
from uuid import UUID

from reaper.config import Settings
from reaper.core.dead_letters import quote_untrusted
from reaper.core.domain import GATE_DELIVERY_EXHAUSTED, Dispatch
from reaper.jobqueue.rules import DEAD_LETTER_KEY_PREFIX, DEAD_LETTER_REPLAY, DELIVERY_CANCEL
from reaper.reap import gates
from reaper.reap.gates import AnswerPreview, GateAnswer
from reaper.reap.sources import Sources

__all__ = ["answer_gate", "answered_line", "default_answerer", "short_id", "would_line"]

#: How many hex digits of a gate's id a person is shown (and may type).
SHORT_ID_DIGITS = 8


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
    """Answer gate ``gate_id`` (:func:`reaper.reap.gates.answer_gate`, which says what it
    raises) and return a one-line outcome for a person; with ``dry_run``, what the answer
    would do (:func:`reaper.reap.gates.preview_answer`), nothing written or sent."""
    if dry_run:
        preview = await gates.preview_answer(
            sources, settings, gate_id, choice, answered_by=answered_by
        )
        return would_line(preview)
    answer = await gates.answer_gate(
        sources, settings, gate_id, choice, clock=clock, answered_by=answered_by, reason=reason
    )
    return answered_line(answer)


def would_line(preview: AnswerPreview) -> str:
    """What an answer would do, in one line."""
    gate, choice = preview.gate, preview.choice
    head = (
        f"dry run: gate {gate.id} ({gate.kind}) would be answered {choice!r} by "
        f"{preview.answered_by or 'nobody named'}"
    )
    tail = f"; one GateAnswered event on stream {gate.project_id}. Nothing was written or sent"
    if gate.kind == GATE_DELIVERY_EXHAUSTED:
        if choice == DELIVERY_CANCEL:
            return f"{head}: job {gate.job_id} would end cancelled, never delivered again{tail}"
        how = (
            " at a new dispatch generation (one outbox row)"
            if preview.dispatch is Dispatch.OUTBOX
            else ""
        )
        return f"{head}: job {gate.job_id} would be ready for exactly one more delivery{how}{tail}"
    if choice != DEAD_LETTER_REPLAY or preview.parked is None:
        return f"{head}: job {gate.job_id} would be cancelled, nothing sent{tail}"
    letter = preview.parked.letter
    return (
        f"{head}: {letter.body_bytes} bytes would be published to "
        f"{quote_untrusted(letter.origin_queue)} as message "
        f"{preview.message_id!r} and job {gate.job_id} would succeed"
        f"{tail}"
    )


def answered_line(answer: GateAnswer) -> str:
    """What an answer did, in one line."""
    gate = answer.gate
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
        how = " at a new dispatch generation" if answer.dispatch is Dispatch.OUTBOX else ""
        return f"{head}: job {gate.job_id} is ready for exactly one more delivery{how}"
    if answer.parked is None:
        return f"{head}: job {gate.job_id} settled; nothing was sent"
    letter = answer.parked.letter
    stays = f"the broker's copy stays on {quote_untrusted(letter.queue)}"
    if answer.message_id is not None:
        return (
            f"{head}: {letter.body_bytes} bytes published to "
            f"{quote_untrusted(letter.origin_queue)} as message {answer.message_id!r}; "
            f"job {gate.job_id} succeeded; {stays}"
        )
    return f"{head}: job {gate.job_id} cancelled, nothing was sent; {stays}"

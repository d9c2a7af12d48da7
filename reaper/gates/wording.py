"""A gate's answer in words, for a person: what it did, or would do.

A gate's answer in words, for a person: what it did (:class:`GateAnswer`), or would do
(:class:`AnswerPreview`, ``--dry-run``), in one line each."""

from __future__ import annotations

from reaper.core.dead_letters import quote_untrusted
from reaper.core.domain import GATE_DELIVERY_EXHAUSTED, Dispatch
from reaper.gates.answering import AnswerPreview, GateAnswer
from reaper.jobqueue.rules import DEAD_LETTER_KEY_PREFIX, DEAD_LETTER_REPLAY, DELIVERY_CANCEL

__all__ = ["answered_line", "would_line"]


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

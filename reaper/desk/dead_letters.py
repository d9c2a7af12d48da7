"""A ``bus_dead_lettered`` gate answered (SPEC §1 (e)): dismissed, or replayed through the
broker first, with the gate row locked throughout so that one letter is replayed once. The
parked job, its letter and its gate are the job queue's (:mod:`reaper.jobqueue.dead_letters`);
nothing here ever deletes a letter, on the broker or in the database."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from reaper.core.domain import GATE_BUS_DEAD_LETTERED, Dispatch
from reaper.core.records import Gate
from reaper.desk.answers import open_gate_for_answer, record_answer, settle_dead_letter
from reaper.desk.port import ReplaySender
from reaper.desk.rules import DEAD_LETTER_REPLAY, DEAD_LETTER_SETTLED, replay_parts
from reaper.desk.sql import QUERIES
from reaper.errors import GateError
from reaper.jobqueue.database import Database
from reaper.jobqueue.port import ParkedDeadLetter
from reaper.jobqueue.rows import parked_of

__all__ = ["answer_gate"]


async def answer_gate(
    db: Database,
    gate_id: UUID,
    choice: str,
    now: datetime,
    *,
    replay: ReplaySender | None = None,
    answered_by: str | None = None,
    reason: str | None = None,
) -> tuple[Gate, ParkedDeadLetter | None]:
    """Answer a ``bus_dead_lettered`` gate, with the gate row locked throughout.

    ``dismiss``: the answer is recorded and the parked job settles ``cancelled``; nothing is
    sent. ``replay``: ``replay(gate, letter)`` runs first, still under the lock (so a second
    answer waits, then finds the gate answered: one replay, never two); it publishes the body
    and returns its message id, or raises (a :class:`GateError` saying why), and only when it
    returns are the answer, its ``GateAnswered`` event (with the queue and message id) and the
    job settled ``succeeded`` recorded. If it raises, nothing is recorded. ``replay`` None
    refuses a replay. Refused like any gate answer: an unknown gate, one already answered, a
    choice it does not offer, and a gate of another kind.
    """
    async with db.session("answering a dead-letter gate") as conn, conn.transaction():
        gate = await open_gate_for_answer(conn, gate_id, choice)
        if gate.kind != GATE_BUS_DEAD_LETTERED:
            raise GateError(
                f"gate {gate.id} is a {gate.kind} gate, not a {GATE_BUS_DEAD_LETTERED} gate"
            )
        parked = None
        if gate.job_id is not None:
            found = await conn.fetchrow(QUERIES["dead_letter_of_job"], gate.job_id)
            parked = None if found is None else parked_of(found)
        published = None
        if choice == DEAD_LETTER_REPLAY:
            send, letter = replay_parts(gate, replay, parked)
            message_id = await send(gate, letter)
            published = (letter.letter.origin_queue or "", message_id)
            await conn.fetchval(
                QUERIES["settle_parked_job"],
                now,
                letter.job_id,
                DEAD_LETTER_SETTLED[DEAD_LETTER_REPLAY],
            )
        else:
            await settle_dead_letter(conn, gate, choice, now, Dispatch.POLLING)
        answered = await record_answer(conn, gate, choice, now, answered_by, reason, published)
        return answered, parked

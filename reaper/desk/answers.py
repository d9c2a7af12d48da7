"""A gate answered (SPEC §1): the answer recorded, its ``GateAnswered`` event appended and what
it means done, in one transaction, with the gate row locked so that two people answering at
once cannot both act.

What an answer does, by kind (:data:`ANSWERS`):

- ``delivery_exhausted``, ``retry``: the parked job is re-readied for exactly one more delivery
  (the attempt refunded when it was parked pays for it); ``cancel``: the job is given up
  (``cancelled``, finished, never delivered again; no outbox row);
- ``bus_dead_lettered``, ``dismiss``: the parked ``bus.dead_letter`` job settles
  ``cancelled``; ``replay`` needs the broker (:mod:`reaper.desk.dead_letters`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Final
from uuid import UUID

from reaper.core.canonical import canonical_json, digest_of
from reaper.core.domain import GATE_BUS_DEAD_LETTERED, GATE_DELIVERY_EXHAUSTED, Dispatch
from reaper.core.records import Gate
from reaper.core.storable import for_storage, payload_for_storage
from reaper.desk.rules import (
    DEAD_LETTER_REPLAY,
    DEAD_LETTER_SETTLED,
    GATE_ANSWERED,
    REPLAY_NEEDS_BROKER,
    answered_payload,
    check_answerable,
    not_the_latest,
)
from reaper.desk.sql import QUERIES
from reaper.errors import GateError
from reaper.jobqueue import ledger
from reaper.jobqueue.database import Connection, Database
from reaper.jobqueue.rows import gate_of
from reaper.jobqueue.rules import DELIVERY_CANCEL
from reaper.jobqueue.sql import QUERIES as JOB_QUEUE_QUERIES

__all__ = ["ANSWERS", "answer_gate", "open_gate_for_answer", "record_answer", "settle_dead_letter"]

#: What answering a gate does beyond recording the answer: runs inside the answer's
#: transaction, with the gate row locked.
Answer = Callable[[Connection, Gate, str, datetime, Dispatch], Awaitable[None]]


async def answer_gate(
    db: Database,
    gate_id: UUID,
    choice: str,
    now: datetime,
    *,
    answered_by: str | None = None,
    dispatch: Dispatch = Dispatch.POLLING,
    reason: str | None = None,
) -> Gate:
    """Answer a gate and do what the answer means for its kind (:data:`ANSWERS`), with its
    ``GateAnswered`` event, in one transaction. Raises :class:`GateError` for an unknown gate,
    one already answered, a choice it does not offer, or a kind this store cannot answer."""
    async with db.session("answering a gate") as conn, conn.transaction():
        gate = await open_gate_for_answer(conn, gate_id, choice)
        answer = ANSWERS.get(gate.kind)
        if answer is None:
            raise GateError(f"gate {gate.id} is a {gate.kind} gate: this store cannot answer it")
        await answer(conn, gate, choice, now, dispatch)
        return await record_answer(conn, gate, choice, now, answered_by, reason)


async def open_gate_for_answer(conn: Connection, gate_id: UUID, choice: str) -> Gate:
    """Lock the gate (its row, for the rest of the transaction) and refuse an answer it
    cannot take: an unknown gate, one already answered, a choice it does not offer, a gate
    its job has since been parked again behind (a gate answers only itself)."""
    row = await conn.fetchrow(QUERIES["gate_for_answer"], gate_id)
    if row is None:
        raise GateError(f"gate {gate_id} does not exist")
    gate = gate_of(row)
    check_answerable(gate, choice)
    if gate.job_id is not None:
        latest = await conn.fetchrow(QUERIES["latest_gate_of_job"], gate.job_id)
        if latest is not None and latest["id"] != gate.id:
            raise GateError(
                not_the_latest(gate, latest["id"], latest["kind"], latest["created_at"])
            )
    return gate


async def record_answer(
    conn: Connection,
    gate: Gate,
    choice: str,
    now: datetime,
    answered_by: str | None,
    reason: str | None,
    published: tuple[str, str] | None = None,
) -> Gate:
    """Record the answer of a gate locked by :func:`open_gate_for_answer`, and its
    ``GateAnswered`` event on the gate's project stream (``published``: the queue and message
    id a replay sent; the queue came from the letter's headers, so that event is untrusted)."""
    answered = gate_of(
        await conn.fetchrow(QUERIES["answer_gate"], now, gate.id, choice, _stored(answered_by))
    )
    payload = answered_payload(gate, choice, answered_by, reason, published)
    canonical = canonical_json(payload_for_storage(payload))
    event = ledger.Event(
        gate.project_id, canonical, digest_of(canonical), published is None, GATE_ANSWERED
    )
    await ledger.append(conn, [event], now)
    return answered


async def _answer_delivery(
    conn: Connection, gate: Gate, choice: str, now: datetime, dispatch: Dispatch
) -> None:
    # retry: the attempt refunded at the park buys exactly one more delivery; a job no longer
    # awaiting a human (cancelled meanwhile) is left as it is. With outbox dispatch the job
    # made ready starts a new dispatch episode: a worker receives it at a new generation.
    # cancel: the job ends, and no episode starts.
    if gate.job_id is None:
        return
    if choice == DELIVERY_CANCEL:
        await conn.fetchval(QUERIES["cancel_parked_job"], now, gate.job_id)
        return
    readied = await conn.fetchval(QUERIES["ready_parked_job"], now, gate.job_id)
    if readied is not None and dispatch is Dispatch.OUTBOX:
        await conn.fetch(JOB_QUEUE_QUERIES["dispatch_jobs"], now, [readied])


async def settle_dead_letter(
    conn: Connection, gate: Gate, choice: str, now: datetime, dispatch: Dispatch
) -> None:
    """``dismiss`` settles the parked job (a job no longer awaiting a human is left as it
    is); ``replay`` needs the broker, so only ``dead_letters.answer_gate`` takes it."""
    if choice == DEAD_LETTER_REPLAY:
        raise GateError(REPLAY_NEEDS_BROKER.format(gate=gate.id))
    if gate.job_id is not None:
        await conn.fetchval(
            QUERIES["settle_parked_job"], now, gate.job_id, DEAD_LETTER_SETTLED[choice]
        )


#: What answering a gate of each kind does; a kind without an entry cannot be answered here.
ANSWERS: Final[Mapping[str, Answer]] = {
    GATE_DELIVERY_EXHAUSTED: _answer_delivery,
    GATE_BUS_DEAD_LETTERED: settle_dead_letter,
}


def _stored(text: str | None) -> str | None:
    return None if text is None else for_storage(text)

"""Gates (SPEC §1): listed, found by id, counted open, the open dead-letter gates per queue, and
answered. A park raises a gate with its move (:mod:`~reaper.jobqueue.lease_reap`,
:mod:`~reaper.jobqueue.dead_letters`).

An answer is recorded, its ``GateAnswered`` event appended and what it means done, in one
transaction, with the gate row locked so that two people answering at once cannot both act: a
``delivery_exhausted`` gate's ``retry`` re-readies the parked job for exactly one more delivery
(the attempt refunded at the park pays for it), ``cancel`` gives it up; a ``bus_dead_lettered``
gate's ``dismiss`` settles the parked job ``cancelled``, ``replay`` publishes the letter's body
through the caller's sender first, still under the lock (one replay, never two). Nothing here
ever deletes a letter, on the broker or in the database.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Final
from uuid import UUID

from reaper.core.canonical import canonical_json, digest_of
from reaper.core.domain import GATE_BUS_DEAD_LETTERED, GATE_DELIVERY_EXHAUSTED, Dispatch
from reaper.core.records import Gate
from reaper.core.storable import for_storage, from_storage, payload_for_storage
from reaper.errors import GateError
from reaper.jobqueue import ledger
from reaper.jobqueue.database import Connection, Database
from reaper.jobqueue.port import (
    OPEN_GATES,
    GateChoice,
    GateCount,
    GateFilter,
    ParkedDeadLetter,
    ReplaySender,
)
from reaper.jobqueue.rows import gate_of, parked_of
from reaper.jobqueue.rules import (
    DEAD_LETTER_REPLAY,
    DEAD_LETTER_SETTLED,
    DELIVERY_CANCEL,
    GATE_ANSWERED,
    REPLAY_NEEDS_BROKER,
    answered_payload,
    check_answerable,
    not_the_latest,
    replay_parts,
)
from reaper.jobqueue.sql import QUERIES

__all__ = ["Gates"]

#: A new dispatch episode for jobs made ready, its outbox rows spliced in (``dispatch_outbox``).
_DISPATCH_JOBS: Final = QUERIES["dispatch_jobs"].replace(
    "{dispatch_outbox}", QUERIES["dispatch_outbox"].rstrip()
)

#: What answering a gate does beyond recording the answer: runs inside the answer's
#: transaction, with the gate row locked.
Answer = Callable[[Connection, Gate, str, datetime, Dispatch], Awaitable[None]]


class Gates:
    """The store's gates: read, and answered."""

    database: Database

    async def list_gates(self, chosen: GateFilter = OPEN_GATES) -> list[Gate]:
        c = chosen
        async with self.database.session("listing gates") as conn:
            rows = await conn.fetch(
                QUERIES["list_gates"],
                *(c.open_only, c.kind, c.project_id, c.raised_before, c.raised_since, c.limit),
            )
        return [gate_of(r) for r in rows]

    async def gates_between(self, low: UUID, high: UUID, limit: int) -> list[Gate]:
        async with self.database.session("finding a gate") as conn:
            rows = await conn.fetch(QUERIES["gates_between"], low, high, limit)
        return [gate_of(r) for r in rows]

    async def open_gate_counts(self) -> list[GateCount]:
        async with self.database.session("counting open gates") as conn:
            rows = await conn.fetch(QUERIES["open_gate_counts"])
        return [GateCount(r["kind"], r["open"], r["oldest"]) for r in rows]

    async def open_dead_letter_gates(self) -> dict[str, int]:
        async with self.database.session("counting open dead-letter gates") as conn:
            rows = await conn.fetch(QUERIES["open_dead_letter_gates"])
        return {from_storage(r["queue"]): r["waiting"] for r in rows}

    async def answer_gate(
        self, answer: GateChoice, *, dispatch: Dispatch = Dispatch.POLLING
    ) -> Gate:
        async with self.database.session("answering a gate") as conn, conn.transaction():
            gate = await _open_for_answer(conn, answer)
            act = ANSWERS.get(gate.kind)
            if act is None:
                raise GateError(
                    f"gate {gate.id} is a {gate.kind} gate: this store cannot answer it"
                )
            await act(conn, gate, answer.choice, answer.now, dispatch)
            return await _record_answer(conn, gate, answer)

    async def answer_dead_letter_gate(
        self, answer: GateChoice, *, replay: ReplaySender | None = None
    ) -> tuple[Gate, ParkedDeadLetter | None]:
        choice, now = answer.choice, answer.now
        async with (
            self.database.session("answering a dead-letter gate") as conn,
            conn.transaction(),
        ):
            gate = await _open_for_answer(conn, answer)
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
                await _settle_dead_letter(conn, gate, choice, now, Dispatch.POLLING)
            answered = await _record_answer(conn, gate, answer, published)
            return answered, parked


async def _open_for_answer(conn: Connection, answer: GateChoice) -> Gate:
    """Lock the gate (its row, for the rest of the transaction) and refuse an answer it
    cannot take: an unknown gate, one already answered, a choice it does not offer, a gate
    its job has since been parked again behind (a gate answers only itself)."""
    row = await conn.fetchrow(QUERIES["gate_for_answer"], answer.gate_id)
    if row is None:
        raise GateError(f"gate {answer.gate_id} does not exist")
    gate = gate_of(row)
    check_answerable(gate, answer.choice)
    if gate.job_id is not None:
        latest = await conn.fetchrow(QUERIES["latest_gate_of_job"], gate.job_id)
        if latest is not None and latest["id"] != gate.id:
            raise GateError(
                not_the_latest(gate, latest["id"], latest["kind"], latest["created_at"])
            )
    return gate


async def _record_answer(
    conn: Connection,
    gate: Gate,
    answer: GateChoice,
    published: tuple[str, str] | None = None,
) -> Gate:
    """Record the answer of a gate locked by :func:`_open_for_answer`, and its
    ``GateAnswered`` event on the gate's project stream (``published``: the queue and message
    id a replay sent; the queue came from the letter's headers, so that event is untrusted)."""
    choice, now, by = answer.choice, answer.now, answer.answered_by
    stored_by = None if by is None else for_storage(by)
    answered = gate_of(await conn.fetchrow(QUERIES["answer_gate"], now, gate.id, choice, stored_by))
    payload = answered_payload(gate, choice, by, answer.reason, published)
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
        await conn.fetch(_DISPATCH_JOBS, now, [readied])


async def _settle_dead_letter(
    conn: Connection, gate: Gate, choice: str, now: datetime, dispatch: Dispatch
) -> None:
    """``dismiss`` settles the parked job (a job no longer awaiting a human is left as it
    is); ``replay`` needs the broker, so only ``answer_dead_letter_gate`` takes it."""
    if choice == DEAD_LETTER_REPLAY:
        raise GateError(REPLAY_NEEDS_BROKER.format(gate=gate.id))
    if gate.job_id is not None:
        await conn.fetchval(
            QUERIES["settle_parked_job"], now, gate.job_id, DEAD_LETTER_SETTLED[choice]
        )


#: What answering a gate of each kind does; a kind without an entry cannot be answered here.
ANSWERS: Final[Mapping[str, Answer]] = {
    GATE_DELIVERY_EXHAUSTED: _answer_delivery,
    GATE_BUS_DEAD_LETTERED: _settle_dead_letter,
}

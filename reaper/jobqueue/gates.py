"""The store's gates: listed, found by id, counted open, and answered under a lock.

A park raises a gate with its move (:mod:`~reaper.jobqueue.lease_reap`,
:mod:`~reaper.jobqueue.dead_letters`; SPEC §1). An answer is recorded, its ``GateAnswered``
event appended and what it means done, in one transaction, with the gate row locked so that two
people answering at once cannot both act: a ``delivery_exhausted`` gate's ``retry`` re-readies
the parked job for exactly one more delivery (the attempt refunded at the park pays for it),
``cancel`` gives it up; a ``bus_dead_lettered`` gate's ``dismiss`` settles the parked job
``cancelled``, ``replay`` publishes the letter's body through the caller's sender first, still
under the lock (one replay, never two). Nothing here ever deletes a letter, on the broker or in
the database.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from reaper.core.canonical import canonical_json, digest_of
from reaper.core.domain import Dispatch
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
    GATE_ANSWERED,
    READY,
    answered_payload,
    check_answerable,
    dead_letter_settled,
    job_after,
    not_the_latest,
    publish_replay,
)
from reaper.jobqueue.sql import QUERIES

__all__ = ["Gates"]


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
            state = job_after(gate, answer.choice)
            if gate.job_id is not None:
                await _move_parked_job(conn, gate.job_id, state, answer.now, dispatch)
            return await _record_answer(conn, gate, answer)

    async def answer_dead_letter_gate(
        self, answer: GateChoice, *, replay: ReplaySender | None = None
    ) -> tuple[Gate, ParkedDeadLetter | None]:
        async with (
            self.database.session("answering a dead-letter gate") as conn,
            conn.transaction(),
        ):
            gate = await _open_for_answer(conn, answer)
            settled = dead_letter_settled(gate, answer.choice)
            parked = None
            if gate.job_id is not None:
                found = await conn.fetch(QUERIES["dead_letters_of_jobs"], [gate.job_id])
                parked = parked_of(found[0]) if found else None
            published = None
            if answer.choice == DEAD_LETTER_REPLAY:
                published = await publish_replay(gate, replay, parked)
            if gate.job_id is not None:
                await _move_parked_job(conn, gate.job_id, settled, answer.now, Dispatch.POLLING)
            return await _record_answer(conn, gate, answer, published), parked


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


async def _move_parked_job(
    conn: Connection, job_id: UUID, state: str, now: datetime, dispatch: Dispatch
) -> None:
    """Move a job still awaiting a person to ``state``, as :func:`job_after` rules (a job no
    longer awaiting one, cancelled meanwhile, is left as it is): ready again, which with
    outbox dispatch starts a new dispatch episode (a worker receives it at a new generation),
    or settled, no episode started."""
    if state != READY:
        await conn.fetchval(QUERIES["settle_parked_job"], now, job_id, state)
        return
    readied = await conn.fetchval(QUERIES["ready_parked_job"], now, job_id)
    if readied is not None and dispatch is Dispatch.OUTBOX:
        await conn.fetch(QUERIES["dispatch_jobs"], now, [readied])


async def _record_answer(
    conn: Connection,
    gate: Gate,
    answer: GateChoice,
    published: tuple[str, str] | None = None,
) -> Gate:
    """Record the answer of a gate locked by :func:`_open_for_answer`, and its
    ``GateAnswered`` event on the gate's project stream (``published``: the queue and message
    id a replay sent; the queue came from the letter's headers, so that event is untrusted)."""
    by = None if answer.answered_by is None else for_storage(answer.answered_by)
    answered = gate_of(
        await conn.fetchrow(QUERIES["answer_gate"], answer.now, gate.id, answer.choice, by)
    )
    canonical = canonical_json(payload_for_storage(answered_payload(gate, answer, published)))
    event = ledger.Event(
        gate.project_id, canonical, digest_of(canonical), published is None, GATE_ANSWERED
    )
    await ledger.append(conn, [event], answer.now)
    return answered

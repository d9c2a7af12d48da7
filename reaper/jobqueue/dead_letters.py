"""Dead letters parked as jobs (SPEC §1 (e)): the store's half.

A dead letter read from an owned dead-letter queue is parked once, by its identity (global:
across projects and passes): a ``bus.dead_letter`` job on the fleet project, its
``dead_letter`` row (what it was: migration 0004), a ``bus_dead_lettered`` gate and an
untrusted ``QueueReaped`` event on the fleet stream, in one transaction. Nothing here ever
deletes a letter, on the broker or in the database. Answering its gate is a person's act
(:class:`~reaper.jobqueue.gates.Gates`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Final
from uuid import UUID

from reaper.core import dead_letters
from reaper.core.dead_letters import DispatchPointer
from reaper.core.domain import (
    DEAD_LETTER_JOB_KIND,
    FLEET_PROJECT_ID,
    GATE_BUS_DEAD_LETTERED,
    Action,
    DeadLetter,
    Verdict,
)
from reaper.core.storable import for_storage
from reaper.errors import scrub
from reaper.jobqueue import ledger
from reaper.jobqueue.database import Connection, Database, PostgresError, first_line, is_row_failure
from reaper.jobqueue.port import DeadLetterParks, ParkedDeadLetter, ParkRules
from reaper.jobqueue.rows import parked_of
from reaper.jobqueue.rules import (
    DEAD_LETTER_KEY_PREFIX,
    DELIVERY_EXHAUSTED_CHOICES,
    dead_letter_key,
)
from reaper.jobqueue.sql import QUERIES

__all__ = ["DeadLetters"]

_CHOICES_JSON: Final = json.dumps(list(dead_letters.GATE_CHOICES))
_RETRY_JSON: Final = json.dumps(list(DELIVERY_EXHAUSTED_CHOICES))


class _Refused(Exception):
    """A park found its identity half taken (a ``dead_letter`` row or gate without the job)."""


async def _park_one(
    conn: Connection, letter: DeadLetter, *, now: datetime, rules: ParkRules
) -> Verdict | None:
    """Park one letter and append its event, in one transaction; None if already parked."""
    kept = dead_letters.park_fields(letter)
    prompt = dead_letters.gate_prompt(
        letter,
        owned_queue_pattern=rules.owned_queue_pattern,
        dead_letter_queue_pattern=rules.dead_letter_queue_pattern,
    )
    key = dead_letter_key(letter.identity)
    async with conn.transaction():
        row = await conn.fetchrow(
            QUERIES["park_dead_letter"],
            now,
            key,
            *_letter_columns(kept),
            prompt,
            FLEET_PROJECT_ID,
            DEAD_LETTER_JOB_KIND,
            GATE_BUS_DEAD_LETTERED,
            _CHOICES_JSON,
            kept.envelope,
        )
        job_id = row["job_id"]
        if job_id is None:
            return None  # parked before: the job's idempotency key decided
        if row["letter_job_id"] is None or row["gate_id"] is None:
            taken = "dead_letter row" if row["letter_job_id"] is None else "gate"
            raise _Refused(
                f"a {taken} with identity {key!r} exists without its {DEAD_LETTER_JOB_KIND} job"
            )
        verdict = dead_letters.park_verdict(
            letter, depth=rules.depth, min_depth=rules.min_depth, job_id=job_id
        )
        await ledger.append(conn, [ledger.event_of(verdict)], now)
    return verdict


async def _park_pointer(
    conn: Connection,
    letter: DeadLetter,
    pointer: DispatchPointer,
    *,
    now: datetime,
    rules: ParkRules,
) -> Verdict | None:
    kept = dead_letters.park_fields(letter)
    async with conn.transaction():
        row = await conn.fetchrow(
            QUERIES["park_dispatch_pointer"],
            now,
            *_letter_columns(kept),
            pointer.job_id,
            pointer.project_id,
            pointer.dispatch_seq,
            dead_letter_key(letter.identity),
            dead_letters.pointer_prompt(letter, pointer),
            _RETRY_JSON,
            rules.lease_grace_seconds,
            kept.envelope,
        )
        if not row["recorded"]:
            return None
        verdict = dead_letters.pointer_verdict(
            letter,
            pointer,
            depth=rules.depth,
            min_depth=rules.min_depth,
            parked=row["parked"] is not None,
            found=_as_found(row["state"], row["dispatch_seq"]),
        )
        await ledger.append(conn, [ledger.event_of(verdict)], now)
    return verdict


def _as_found(state: str | None, generation: int | None) -> str:
    if state is None:
        return "it points to does not exist (in that project)"
    return f"is {state} at generation {generation}"


def _letter_columns(kept: dead_letters.ParkedLetter) -> tuple[object, ...]:
    """The dead_letter row's columns of a letter as parked, in the order both park queries take
    them (identity, queue, message id, origin queue, reason, body, its encoding, size,
    truncation, whether JSON)."""
    return (
        kept.identity,
        for_storage(kept.queue),
        kept.message_id,
        kept.origin_queue,
        kept.reason,
        kept.body,
        kept.body_encoding,
        kept.body_bytes,
        kept.body_truncated,
        kept.is_json_object,
    )


class DeadLetters:
    """The store's dead-letter parks and what they keep."""

    database: Database

    async def count_parked_dead_letters(self, queue: str) -> int:
        """How many dead letters read from ``queue`` are handled (parked, answered or not, or
        recorded as stale pointers: the broker's copy stays either way), so a read knows how far
        to reach."""
        async with self.database.session("counting parked dead letters") as conn:
            count = await conn.fetchval(QUERIES["count_parked_dead_letters"], for_storage(queue))
        return int(count)

    async def parked_identities(self, identities: Sequence[str]) -> set[str]:
        """Which of these identities are parked (their gate raised, answered or not)."""
        if not identities:
            return set()
        keys = sorted({dead_letter_key(i) for i in identities})
        async with self.database.session("reading parked dead letters") as conn:
            rows = await conn.fetch(QUERIES["parked_dead_letters"], keys, sorted(set(identities)))
        return {row["identity"].removeprefix(DEAD_LETTER_KEY_PREFIX) for row in rows}

    async def parked_envelopes(self, envelopes: Sequence[str]) -> dict[str, int]:
        """How many handled letters carry each of these envelopes (absent: none)."""
        if not envelopes:
            return {}
        async with self.database.session("reading parked envelopes") as conn:
            rows = await conn.fetch(QUERIES["parked_envelopes"], sorted(set(envelopes)))
        return {row["envelope"]: int(row["parked"]) for row in rows}

    async def keep_envelopes(self, seen: Sequence[tuple[str, str]]) -> int:
        """Note, for handled letters just read whole (``(identity, envelope)``), the envelope they
        were read with where their row holds another or none; how many rows changed."""
        latest = dict(seen)
        if not latest:
            return 0
        identities = sorted(latest)
        async with self.database.session("noting envelopes") as conn:
            status = await conn.execute(
                QUERIES["keep_envelopes"], identities, [latest[i] for i in identities]
            )
        return int(str(status).rsplit(" ", 1)[-1] or 0)

    async def park_dead_letters(
        self, letters: Sequence[DeadLetter], *, now: datetime, rules: ParkRules
    ) -> DeadLetterParks:
        """Park each letter not parked yet, each in its own transaction. A letter already parked
        (by this call, an earlier pass or another reaper at the same moment) writes nothing; a
        letter the database refuses is rolled back alone and named in ``failed``. Raises
        :class:`~reaper.errors.StoreUnavailable` only when the database itself is the problem."""
        parked: list[Verdict] = []
        already: list[str] = []
        failed: list[tuple[str, str]] = []
        if not letters:
            return DeadLetterParks()
        async with self.database.session("parking dead letters") as conn:
            for letter in letters:
                try:
                    verdict = await _park_one(conn, letter, now=now, rules=rules)
                except PostgresError as exc:
                    if not is_row_failure(exc):
                        raise
                    failed.append((letter.identity, self.database.row_reason(exc)))
                    continue
                except (_Refused, UnicodeError, ValueError, TypeError) as exc:
                    # a value the driver cannot send (a lone surrogate), or an inconsistent row
                    reason = scrub(
                        f"{type(exc).__name__}: {first_line(exc)}", [self.database.password]
                    )
                    failed.append((letter.identity, reason))
                    continue
                if verdict is None:
                    already.append(letter.identity)
                else:
                    parked.append(verdict)
        return DeadLetterParks(tuple(parked), tuple(already), tuple(failed))

    async def park_dispatch_pointers(
        self,
        pointers: Sequence[tuple[DeadLetter, DispatchPointer]],
        *,
        now: datetime,
        rules: ParkRules,
    ) -> DeadLetterParks:
        """Dead-lettered dispatch pointers (ADR-0044 §8), each once and in its own transaction:
        park the job while it is still at the pointer's generation and ready (or its lease
        expired), else record the pointer as stale, nothing moved; each with its event. A letter
        handled before (by this call, an earlier pass or another reaper) writes nothing."""
        parked: list[Verdict] = []
        stale: list[Verdict] = []
        already: list[str] = []
        failed: list[tuple[str, str]] = []
        async with self.database.session("parking dead-lettered dispatches") as conn:
            for letter, pointer in pointers:
                try:
                    verdict = await _park_pointer(conn, letter, pointer, now=now, rules=rules)
                except PostgresError as exc:
                    if not is_row_failure(exc):
                        raise
                    failed.append((letter.identity, self.database.row_reason(exc)))
                    continue
                if verdict is None:
                    already.append(letter.identity)
                elif verdict.action is Action.PARK:
                    parked.append(verdict)
                else:
                    stale.append(verdict)
        return DeadLetterParks(tuple(parked), tuple(already), tuple(failed), tuple(stale))

    async def parked_dead_letters(self, job_ids: Sequence[UUID]) -> dict[UUID, ParkedDeadLetter]:
        """What each of these parked dead-letter jobs keeps of its letter, by job."""
        async with self.database.session("reading parked dead letters") as conn:
            rows = await conn.fetch(QUERIES["dead_letters_of_jobs"], list(job_ids))
        return {r["job_id"]: parked_of(r) for r in rows}

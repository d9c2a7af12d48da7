"""``PostgresStore``: the job queue's record and the ledger, in PostgreSQL.

The only module that imports asyncpg. Every driver or network failure is turned into
:class:`~reaper.errors.StoreUnavailable` at one seam (:meth:`PostgresStore._seam`), with a
scrubbed one-line reason a person can act on; nothing above this module sees a driver type.
Every query is named in ``reaper/sql/queries.sql``; every query that depends on time takes
``now`` from the caller.

Writes are guarded: a lease is moved only while it is still exactly as it was read (still
leased, in the same project, by the same owner, with the same expiry and attempts), each
move commits with its ledger event, and one row that cannot be moved is named in the
outcome instead of blocking the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from json.encoder import encode_basestring
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

import asyncpg

from reaper import deadletters, sightings
from reaper.domain import (
    DEAD_LETTER_JOB_KIND,
    EVENT_KIND,
    FLEET_PROJECT_ID,
    GATE_BUS_DEAD_LETTERED,
    GATE_DELIVERY_EXHAUSTED,
    Action,
    ClaimableHead,
    DeadLetter,
    Gate,
    HeldLease,
    LedgerEvent,
    Source,
    Verdict,
)
from reaper.errors import GateError, ReaperError, StoreUnavailable, scrub
from reaper.sql import QUERIES, migrations

__all__ = [
    "LEASE_BATCH_SIZE",
    "LEASE_LANES",
    "Gate",
    "LeaseReapOutcome",
    "LedgerEvent",
    "PostgresStore",
    "canonical_json",
    "canonical_payload",
    "digest_of",
]

#: Leases moved per batch (one statement, one transaction). Large enough that a pass of
#: 10,000 leases is a handful of round trips; small enough that a batch spoiled by one bad
#: row is cheap to split down to that row.
LEASE_BATCH_SIZE = 2500

#: Lanes one pass's lease moves run in at once, split by project (so no two lanes share a
#: ledger stream), each on its own pooled connection (at most the pool's size). Two keep
#: both of a small machine's cores busy. Lanes are safe together for the reasons several
#: reapers are: SKIP LOCKED rows, re-checked guards, streams locked in order.
LEASE_LANES = 2

#: The (int4, int4) advisory lock migrators take turns on ("reap", 1).
MIGRATION_LOCK = (0x72656170, 1)

#: The answers a ``delivery_exhausted`` gate offers.
DELIVERY_EXHAUSTED_CHOICES = ("retry",)

#: ``work_mem`` of the store's sessions (a batch of LEASE_BATCH_SIZE moves needs a few MB).
WORK_MEM = "64MB"

#: Seconds to wait for a connection before calling the store unavailable.
CONNECT_TIMEOUT_SECONDS = 10.0

#: SQLSTATE classes that say the database, not one row, is the problem: the store is then
#: unavailable, instead of the row failing (connection exception, insufficient resources,
#: operator intervention incl. statement timeout, system error, internal error).
_STORE_FAILURE_CLASSES = frozenset({"08", "53", "57", "58", "XX"})


@dataclass(frozen=True)
class LeaseReapOutcome:
    """What :meth:`PostgresStore.apply_lease_verdicts` did with each lease verdict."""

    #: Moved back to ready (lease cleared, ``run_after`` = now), each with its event.
    requeued: tuple[UUID, ...] = ()
    #: Parked awaiting a human, one attempt refunded, a gate raised, each with its event.
    parked: tuple[UUID, ...] = ()
    #: Left alone: the row changed since it was read (finished, re-leased, extended, moved
    #: by another reaper) or another reaper holds it right now.
    skipped: tuple[UUID, ...] = ()
    #: Rows that could not be moved, each with the reason; the others were moved.
    failed: tuple[tuple[UUID, str], ...] = ()

    @property
    def moved(self) -> int:
        return len(self.requeued) + len(self.parked)


_quote = encode_basestring  # json's own string quoting (C), as the encoder uses it

_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def canonical_json(payload: Mapping[str, Any]) -> str:
    """The canonical JSON of an event payload: sorted keys, compact separators, UTF-8."""
    return _CANONICAL.encode(payload)


def canonical_payload(verdict: Verdict) -> str:
    """``canonical_json(verdict.payload())``, built directly: the lease reap writes one per
    lease, and the general encoder is most of its cost in Python. A payload value of any
    other shape than a verdict's usual ones takes the general path; a property test holds
    the two to the same bytes."""
    measured, threshold = verdict.measured, verdict.threshold
    if not (_plain_number(measured) and _plain_number(threshold)):
        return canonical_json(verdict.payload())
    queue = "null" if verdict.queue is None else _quote(verdict.queue)
    return (
        f'{{"action":{_quote(verdict.action)},"condition":{_quote(verdict.condition)},'
        f'"detail":{_quote(verdict.detail)},"measured":{_number(measured)},'
        f'"object":{_quote(verdict.object)},"queue":{queue},'
        f'"source":{_quote(verdict.source)},"threshold":{_number(threshold)},'
        f'"unit":{_quote(verdict.unit)}}}'
    )


def _plain_number(value: object) -> bool:
    if value is None:
        return True
    kind = type(value)
    return kind is int or (kind is float and math.isfinite(value))  # type: ignore[arg-type]


def _number(value: float | int | None) -> str:
    # what json's encoder writes: int.__repr__ / float.__repr__
    if value is None:
        return "null"
    return int.__repr__(value) if type(value) is int else float.__repr__(value)


def digest_of(canonical: str) -> str:
    """The ledger digest: sha256 hex of the canonical JSON."""
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- the store


class PostgresStore:
    """The job queue and ledger in PostgreSQL, over an asyncpg pool."""

    def __init__(
        self, pool: Any, where: str, password: str | None, timeout: float, pool_size: int = 1
    ) -> None:
        self._pool = pool
        self._pool_size = pool_size
        self._where = where
        self._password = password
        self._timeout = timeout

    @classmethod
    async def connect(
        cls,
        dsn: str,
        *,
        password: str | None = None,
        pool_size: int = 4,
        statement_timeout_seconds: float = 30,
    ) -> PostgresStore:
        """Open a pool of at most ``pool_size`` connections; every statement is bounded by
        ``statement_timeout_seconds``. Raises :class:`StoreUnavailable` when it cannot."""
        pool_size = max(1, pool_size)
        secret = password or _dsn_password(dsn)
        store = cls(None, _where(dsn), secret, statement_timeout_seconds, pool_size)
        async with store._seam("connecting"):
            store._pool = await asyncpg.create_pool(
                dsn,
                password=password,
                min_size=1,
                max_size=pool_size,
                timeout=CONNECT_TIMEOUT_SECONDS,
                server_settings={
                    "application_name": "queue-reaper",
                    "statement_timeout": str(int(statement_timeout_seconds * 1000)),
                    # a batch of moves carries each event's payload through sorts and CTEs:
                    # keep them in memory rather than spilling to temporary files
                    "work_mem": WORK_MEM,
                    # short statements: compiling them would cost more than running them
                    "jit": "off",
                },
            )
        return store

    async def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            with contextlib.suppress(Exception):
                await pool.close()

    # ----------------------------------------------------------------------- migrations

    async def migrate(self) -> list[str]:
        """Apply every migration not yet applied, in order, each in its own transaction,
        under an advisory lock so concurrent migrators take turns. Returns the names
        applied (empty when the schema is up to date)."""
        applied: list[str] = []
        async with self._seam("migrating the schema"), self._connection() as conn:
            # A migrator may wait for another; a migration may build an index on a big table.
            await conn.execute("SET statement_timeout = 0")
            await conn.execute(QUERIES["lock_migrations"], *MIGRATION_LOCK)
            try:
                await conn.execute(QUERIES["create_migration_table"])
                done = {r["name"] for r in await conn.fetch(QUERIES["applied_migrations"])}
                for name, sql in migrations():
                    if name in done:
                        continue
                    async with conn.transaction():
                        await conn.execute(sql)
                        await conn.execute(QUERIES["record_migration"], name)
                    applied.append(name)
            finally:
                await conn.execute(QUERIES["unlock_migrations"], *MIGRATION_LOCK)
                await conn.execute("RESET statement_timeout")
        return applied

    # ----------------------------------------------------------------------- measurements

    async def expired_leases(
        self, now: datetime, grace_seconds: int, limit: int, project_id: UUID | None = None
    ) -> list[HeldLease]:
        """Leased jobs whose ``lease_expires_at + grace`` is before ``now``, oldest first,
        at most ``limit``."""
        async with self._seam("reading expired leases"), self._connection() as conn:
            rows = await conn.fetch(
                QUERIES["expired_leases"], now, grace_seconds, limit, project_id
            )
        return [HeldLease(*r) for r in rows]  # the query's columns are HeldLease's fields

    async def count_expired_leases(
        self, now: datetime, grace_seconds: int, project_id: UUID | None = None
    ) -> int:
        """How many leases are expired beyond the grace (the remainder past a pass's bound)."""
        async with self._seam("counting expired leases"), self._connection() as conn:
            count = await conn.fetchval(
                QUERIES["count_expired_leases"], now, grace_seconds, project_id
            )
        return int(count)

    async def claimable_heads(
        self, now: datetime, known_phases: frozenset[str], project_id: UUID | None = None
    ) -> list[ClaimableHead]:
        """Per project with ready work (every one, worker or not), the claimable job that
        has waited longest, and since when it has been claimable."""
        async with self._seam("reading claimable work"), self._connection() as conn:
            rows = await conn.fetch(
                QUERIES["claimable_heads"], now, sorted(known_phases), project_id
            )
        return [ClaimableHead(*r) for r in rows]  # likewise

    # ----------------------------------------------------------------------- lease moves

    async def apply_lease_verdicts(
        self, verdicts: Sequence[Verdict], now: datetime
    ) -> LeaseReapOutcome:
        """Requeue or park each lease verdict's job, if it is still as read, with its event.

        The verdicts are split into :data:`LEASE_LANES` lanes by project, each lane on its
        own pooled connection, all at once; a lane works in set-based batches of
        :data:`LEASE_BATCH_SIZE`, each one transaction (its moves, gates and events). Lanes
        share no stream, so they never wait on each other's stream locks. A batch that
        fails (a trigger raising, a constraint violated) is split in halves and retried
        down to single rows, so one bad row never blocks the rest: it is named in
        ``failed``. Raises ``ValueError``, before writing anything, for a verdict that is
        not a lease move.
        """
        for verdict in verdicts:
            _check_lease_move(verdict)
        lanes: list[list[Verdict]] = [[] for _ in range(max(1, min(LEASE_LANES, self._pool_size)))]
        job_ids: list[UUID] = []
        duplicates: list[UUID] = []
        seen: set[UUID] = set()
        for verdict in verdicts:
            lease = verdict.lease
            assert lease is not None  # _check_lease_move
            if lease.job_id in seen:
                duplicates.append(lease.job_id)  # a job judged twice is moved once
                continue
            seen.add(lease.job_id)
            job_ids.append(lease.job_id)
            lanes[lease.project_id.int % len(lanes)].append(verdict)
        failed: list[tuple[UUID, str]] = []
        moved: dict[UUID, str] = {}  # every committed batch's moves, as they commit

        def outcome() -> LeaseReapOutcome:
            failed_ids = {job_id for job_id, _ in failed}
            return LeaseReapOutcome(
                requeued=tuple(j for j in job_ids if moved.get(j) == "requeue"),
                parked=tuple(j for j in job_ids if moved.get(j) == "park"),
                skipped=tuple(
                    [j for j in job_ids if j not in moved and j not in failed_ids] + duplicates
                ),
                failed=tuple(failed),
            )

        try:
            async with self._seam("moving expired leases"):
                done = await asyncio.gather(
                    *(self._move_lane(lane, now, failed, moved) for lane in lanes if lane),
                    return_exceptions=True,
                )
                for result in done:
                    if isinstance(result, BaseException):
                        raise result
        except StoreUnavailable as exc:
            # The batches that committed before the failure stay moved, each with its event:
            # the pass must report them, so the partial outcome travels with the error.
            exc.partial = outcome()
            raise
        return outcome()

    async def _move_lane(
        self,
        verdicts: list[Verdict],
        now: datetime,
        failed: list[tuple[UUID, str]],
        moved: dict[UUID, str],
    ) -> None:
        async with self._connection() as conn:
            for start in range(0, len(verdicts), LEASE_BATCH_SIZE):
                moves = _lease_moves(verdicts[start : start + LEASE_BATCH_SIZE])
                moved.update(await self._move_or_split(conn, moves, 0, len(moves), now, failed))

    async def _move_or_split(
        self,
        conn: Any,
        moves: _LeaseMoves,
        start: int,
        stop: int,
        now: datetime,
        failed: list[tuple[UUID, str]],
    ) -> dict[UUID, str]:
        """Move ``start:stop``; if a row spoils it, halve and retry until the bad row is
        alone, then name it in ``failed``."""
        try:
            return await _move_leases(conn, moves, start, stop, now)
        except asyncpg.PostgresError as exc:
            if not _is_row_failure(exc):
                raise
            if stop - start == 1:
                failed.append((moves.job_ids[start], _row_reason(exc, self._password)))
                return {}
        middle = (start + stop) // 2
        moved = await self._move_or_split(conn, moves, start, middle, now, failed)
        moved.update(await self._move_or_split(conn, moves, middle, stop, now, failed))
        return moved

    # ----------------------------------------------------------------------- sightings

    async def record_sightings(
        self,
        observed: Sequence[Verdict],
        *,
        now: datetime,
        sources_read: frozenset[Source],
        project_id: UUID | None = None,
    ) -> list[Verdict]:
        """Record what the surfaced verdicts of one pass mean for the ledger's sightings
        (see :mod:`reaper.sightings`) and return the records written: the observed verdicts
        that opened a sighting (the very objects passed in) and the ``cleared`` records.

        Race-free across reapers: every key in question is locked (transaction advisory
        locks, in ascending order), its latest record re-read under the lock, the rule
        applied, and the records appended before the locks are released.
        """
        seen = sightings.observed_sightings(observed)
        async with self._seam("recording sightings"), self._connection() as conn:
            candidates = set(seen)
            for row in await conn.fetch(
                QUERIES["open_sightings"], sorted(s.value for s in sources_read), project_id
            ):
                ref = sightings.ref_of(_record_verdict(row))
                if sightings.is_read(ref, sources_read, project_id):
                    candidates.add(ref)
            if not candidates:
                return []
            refs = sorted(candidates)
            async with conn.transaction():
                await conn.fetchval(QUERIES["lock_sightings"], [_lock_key(r) for r in refs])
                rows = await conn.fetch(
                    QUERIES["latest_sightings"],
                    [r.stream for r in refs],
                    [r.key.source.value for r in refs],
                    [r.key.condition.value for r in refs],
                    [r.key.scope for r in refs],
                )
                latest = {refs[row["ord"] - 1]: _record_verdict(row) for row in rows}
                records = sightings.records_to_write(seen, latest, sources_read, project_id)
                if records:
                    canonical = [canonical_json(v.payload()) for v in records]
                    await _append_events(
                        conn,
                        [
                            (v.stream, c, digest_of(c), v.trusted)
                            for v, c in zip(records, canonical, strict=True)
                        ],
                        now,
                    )
        return records

    # ----------------------------------------------------------------------- gates

    async def list_gates(self, *, open_only: bool = True, kind: str | None = None) -> list[Gate]:
        """Gates, oldest first (only unanswered ones unless ``open_only`` is false)."""
        async with self._seam("listing gates"), self._connection() as conn:
            rows = await conn.fetch(QUERIES["list_gates"], open_only, kind)
        return [_gate(r) for r in rows]

    async def answer_gate(
        self, gate_id: UUID, choice: str, now: datetime, *, answered_by: str | None = None
    ) -> Gate:
        """Answer a gate and do what the answer means for its kind, in one transaction.

        Raises :class:`GateError` for an unknown gate, one already answered, a choice it
        does not offer, or a kind this store cannot answer (see :data:`GATE_ANSWERS`).
        """
        async with (
            self._seam("answering a gate"),
            self._connection() as conn,
            conn.transaction(),
        ):
            gate = await _open_gate_for_answer(conn, gate_id, choice)
            answer = GATE_ANSWERS.get(gate.kind)
            if answer is None:
                raise GateError(
                    f"gate {gate.id} is a {gate.kind} gate: this store cannot answer it"
                )
            await answer(conn, gate, choice, now)
            answered = await conn.fetchrow(
                QUERIES["answer_gate"], now, gate_id, choice, answered_by
            )
        return _gate(answered)

    # ----------------------------------------------------------------------- ledger

    async def events(self, project_id: UUID) -> list[LedgerEvent]:
        """One stream's events, in sequence order."""
        async with self._seam("reading the ledger"), self._connection() as conn:
            rows = await conn.fetch(QUERIES["ledger_events"], project_id)
        return [LedgerEvent(r[0], r[1], r[2], json.loads(r[3]), r[4], r[5], r[6]) for r in rows]

    # ----------------------------------------------------------------------- the seam

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[Any]:
        if self._pool is None:
            raise StoreUnavailable(f"the store for {self._where} is closed")
        async with self._pool.acquire() as conn:
            yield conn

    @contextlib.asynccontextmanager
    async def _seam(self, doing: str) -> AsyncIterator[None]:
        """Turn every driver and network failure into :class:`StoreUnavailable`."""
        try:
            yield
        except ReaperError:
            raise
        except (
            asyncpg.PostgresError,
            asyncpg.InterfaceError,
            # A connection killed in the middle of a statement can leave the protocol in a
            # state asyncpg reports as its own internal error: the database went away all
            # the same.
            asyncpg.InternalClientError,
            ConnectionError,
            OSError,
        ) as exc:
            raise StoreUnavailable(self._reason(doing, exc)) from None

    def _reason(self, doing: str, exc: BaseException) -> str:
        if isinstance(exc, ConnectionRefusedError):
            hint = "connection refused: is PostgreSQL running and listening there?"
        elif isinstance(exc, TimeoutError):
            hint = f"no answer within {CONNECT_TIMEOUT_SECONDS:g} s: is the host reachable?"
        elif isinstance(
            exc, asyncpg.InvalidPasswordError | asyncpg.InvalidAuthorizationSpecificationError
        ):
            hint = f"authentication failed: check the user and password ({_first_line(exc)})"
        elif isinstance(exc, asyncpg.InvalidCatalogNameError):
            hint = f"{_first_line(exc)}: create it or correct the DSN"
        elif isinstance(exc, asyncpg.QueryCanceledError):
            hint = f"a statement ran past the statement timeout of {self._timeout:g} s"
        elif isinstance(exc, asyncpg.UndefinedTableError | asyncpg.UndefinedFunctionError):
            hint = f"{_first_line(exc)}: the schema is missing or old, run `reaper db migrate`"
        else:
            hint = f"{type(exc).__name__}: {_first_line(exc)}"
        return scrub(f"PostgreSQL at {self._where}, {doing}: {hint}", [self._password])

    # ----------------------------------------------------------------------- dead letters
    # SPEC §1 (e). A dead letter read from an owned dead-letter queue is parked once, by its
    # identity (global: across projects and passes): a ``bus.dead_letter`` job on the fleet
    # project, its ``dead_letter`` row (what it was: migration 0004), a ``bus_dead_lettered``
    # gate and an untrusted ``QueueReaped`` event on the fleet stream, in one transaction.

    async def parked_identities(self, identities: Sequence[str]) -> set[str]:
        """Which of these dead-letter identities are already parked (their gate is raised,
        answered or not), across every project."""
        if not identities:
            return set()
        keys = sorted({dead_letter_key(i) for i in identities})
        async with self._seam("reading parked dead letters"), self._connection() as conn:
            rows = await conn.fetch(QUERIES["parked_dead_letters"], keys)
        return {row["identity"].removeprefix(DEAD_LETTER_KEY_PREFIX) for row in rows}

    async def count_parked_dead_letters(self, queue: str) -> int:
        """How many dead letters read from the dead-letter queue ``queue`` are parked (answered
        or not: the broker's copy stays either way), so a read knows how far to reach."""
        async with self._seam("counting parked dead letters"), self._connection() as conn:
            count = await conn.fetchval(
                QUERIES["count_parked_dead_letters"], queue, GATE_BUS_DEAD_LETTERED
            )
        return int(count)

    async def park_dead_letters(
        self,
        letters: Sequence[DeadLetter],
        *,
        now: datetime,
        depth: int,
        min_depth: int,
        owned_queue_pattern: str,
        dead_letter_queue_pattern: str,
    ) -> DeadLetterParks:
        """Park each letter not parked yet, each in its own transaction: a ``bus.dead_letter``
        job (``awaiting_human``, fleet project, idempotency key ``dead_letter:<identity>``),
        its ``dead_letter`` row (``deadletters.park_fields``), a ``bus_dead_lettered`` gate
        (``deadletters.gate_prompt``, choices ``replay``/``dismiss``) and a ``QueueReaped``
        event on the fleet stream with ``trusted`` false.

        A letter already parked (by this call, an earlier pass or another reaper at the same
        moment) writes nothing and gives no verdict. A letter the database refuses is rolled
        back alone and named in the result's ``failed``; the rest are parked. Returns the
        ``park`` verdicts actually recorded, in the order given (a list, with ``failed`` and
        ``already_parked`` beside it); raises :class:`StoreUnavailable` only when the database
        itself is the problem.
        """
        parks = DeadLetterParks()
        if not letters:
            return parks
        choices = json.dumps(list(deadletters.GATE_CHOICES))
        async with self._seam("parking dead letters"), self._connection() as conn:
            for letter in letters:
                try:
                    verdict = await _park_dead_letter(
                        conn,
                        letter,
                        now=now,
                        depth=depth,
                        min_depth=min_depth,
                        owned_queue_pattern=owned_queue_pattern,
                        dead_letter_queue_pattern=dead_letter_queue_pattern,
                        choices=choices,
                    )
                except asyncpg.PostgresError as exc:
                    if not _is_row_failure(exc):
                        raise
                    parks.failed.append((letter.identity, _row_reason(exc, self._password)))
                    continue
                except (_DeadLetterRefused, UnicodeError, ValueError, TypeError) as exc:
                    # a value the driver cannot send (a lone surrogate), or an inconsistent row
                    reason = scrub(f"{type(exc).__name__}: {_first_line(exc)}", [self._password])
                    parks.failed.append((letter.identity, reason))
                    continue
                if verdict is None:
                    parks.already_parked.append(letter.identity)
                else:
                    parks.append(verdict)
        return parks

    async def answer_dead_letter_gate(
        self,
        gate_id: UUID,
        choice: str,
        now: datetime,
        *,
        replay: ReplaySender | None = None,
        answered_by: str | None = None,
    ) -> tuple[Gate, ParkedDeadLetter | None]:
        """Answer a ``bus_dead_lettered`` gate, with the gate row locked throughout.

        ``dismiss``: the answer is recorded and the parked job settles ``cancelled``
        (``finished_at`` = now); nothing is sent. ``replay``: ``replay(gate, letter)`` runs
        first, still under the lock (so a second answer waits, then finds the gate answered:
        one replay, never two); it publishes the body or raises (a :class:`GateError` saying
        why), and only when it returns are the answer recorded and the job settled
        ``succeeded``. If it raises, nothing is recorded. ``replay`` None refuses a replay.

        Refused (:class:`GateError`) like :meth:`answer_gate`: an unknown gate, one already
        answered, a choice it does not offer, and a gate of another kind. Returns the answered
        gate and what its job keeps of the letter (None if there is no such row).
        """
        async with (
            self._seam("answering a dead-letter gate"),
            self._connection() as conn,
            conn.transaction(),
        ):
            gate = await _open_gate_for_answer(conn, gate_id, choice)
            if gate.kind != GATE_BUS_DEAD_LETTERED:
                raise GateError(
                    f"gate {gate.id} is a {gate.kind} gate, not a {GATE_BUS_DEAD_LETTERED} gate"
                )
            letter = None
            if gate.job_id is not None:
                found = await conn.fetchrow(QUERIES["dead_letter_of_job"], gate.job_id)
                letter = None if found is None else ParkedDeadLetter(**dict(found))
            if choice == DEAD_LETTER_REPLAY:
                if replay is None:
                    raise GateError(_REPLAY_NEEDS_BROKER.format(gate=gate.id))
                if letter is None:
                    raise GateError(
                        f"gate {gate.id}: its job keeps no dead letter, so there is nothing "
                        "to replay"
                    )
                await replay(gate, letter)
                await conn.fetchval(
                    QUERIES["settle_parked_job"],
                    now,
                    letter.job_id,
                    DEAD_LETTER_SETTLED[DEAD_LETTER_REPLAY],
                )
            else:
                await _answer_bus_dead_lettered(conn, gate, choice, now)
            answered = await conn.fetchrow(
                QUERIES["answer_gate"], now, gate_id, choice, answered_by
            )
        return _gate(answered), letter


# --------------------------------------------------------------------------- gate answers

#: What answering a gate does beyond recording the answer, by gate kind. Each runs inside
#: the answer's transaction with the gate row locked; a kind without an entry cannot be
#: answered here.
GateAnswer = Callable[[Any, Gate, str, datetime], Awaitable[None]]


async def _open_gate_for_answer(conn: Any, gate_id: UUID, choice: str) -> Gate:
    """Lock the gate (its row, for the rest of the transaction) and refuse an answer it
    cannot take: an unknown gate, one already answered, a choice it does not offer."""
    row = await conn.fetchrow(QUERIES["gate_for_answer"], gate_id)
    if row is None:
        raise GateError(f"gate {gate_id} does not exist")
    gate = _gate(row)
    if gate.answered_at is not None:
        raise GateError(
            f"gate {gate.id} was already answered at {gate.answered_at.isoformat()} "
            f"with {gate.answer!r}"
        )
    if choice not in gate.choices:
        offered = ", ".join(repr(c) for c in gate.choices) or "nothing"
        raise GateError(f"{choice!r} is not an answer gate {gate.id} offers: choose {offered}")
    return gate


async def _answer_delivery_exhausted(conn: Any, gate: Gate, choice: str, now: datetime) -> None:
    # The attempt refunded at the park buys exactly one more delivery; a job no longer
    # awaiting a human (cancelled meanwhile) is left as it is.
    if gate.job_id is not None:
        await conn.fetchval(QUERIES["ready_parked_job"], now, gate.job_id)


GATE_ANSWERS: dict[str, GateAnswer] = {GATE_DELIVERY_EXHAUSTED: _answer_delivery_exhausted}


# --------------------------------------------------------------------------- helpers


@dataclass
class _LeaseMoves:
    """A batch of lease moves as the columns ``move_leases`` takes (one entry per job), and
    each move's event: its canonical payload and digest, computed here, in Python."""

    job_ids: list[UUID] = field(default_factory=list)
    projects: list[UUID] = field(default_factory=list)
    owners: list[str | None] = field(default_factory=list)
    expiries: list[datetime] = field(default_factory=list)
    attempts: list[int] = field(default_factory=list)
    payloads: list[str] = field(default_factory=list)
    digests: list[str] = field(default_factory=list)
    #: The jobs to park (the rest are requeued), each with its gate's identity and prompt.
    parks: list[UUID] = field(default_factory=list)
    gate_identities: list[str] = field(default_factory=list)
    gate_prompts: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.job_ids)

    def args(self, start: int, stop: int, now: datetime) -> list[Any]:
        """The parameters of ``move_leases`` for moves ``start:stop``."""
        if start == 0 and stop == len(self.job_ids):
            parks, identities, prompts = self.parks, self.gate_identities, self.gate_prompts
        else:
            wanted = set(self.job_ids[start:stop])
            chosen = [i for i, job_id in enumerate(self.parks) if job_id in wanted]
            parks = [self.parks[i] for i in chosen]
            identities = [self.gate_identities[i] for i in chosen]
            prompts = [self.gate_prompts[i] for i in chosen]
        return [
            now,
            self.job_ids[start:stop],
            self.owners[start:stop],
            self.expiries[start:stop],
            self.attempts[start:stop],
            parks,
            identities,
            prompts,
            _DELIVERY_EXHAUSTED_CHOICES_JSON,
            self.projects[start:stop],
        ]


_DELIVERY_EXHAUSTED_CHOICES_JSON = json.dumps(list(DELIVERY_EXHAUSTED_CHOICES))


def _check_lease_move(verdict: Verdict) -> None:
    if verdict.lease is None or verdict.action not in (Action.REQUEUE, Action.PARK):
        reason = "no lease" if verdict.lease is None else "action must be requeue or park"
        raise ValueError(f"not a lease move: {verdict.action.value} of {verdict.object} ({reason})")


def _lease_moves(verdicts: Sequence[Verdict]) -> _LeaseMoves:
    """The moves of checked lease verdicts, one job each."""
    moves = _LeaseMoves()
    sha256 = hashlib.sha256
    for verdict in verdicts:
        lease = verdict.lease
        assert lease is not None  # _check_lease_move
        canonical = canonical_payload(verdict)
        moves.job_ids.append(lease.job_id)
        moves.projects.append(lease.project_id)
        moves.owners.append(lease.lease_owner)
        moves.expiries.append(lease.lease_expires_at)
        moves.attempts.append(lease.attempts)
        moves.payloads.append(canonical)
        moves.digests.append(sha256(canonical.encode("utf-8")).hexdigest())
        if verdict.action is Action.PARK:
            moves.parks.append(lease.job_id)
            moves.gate_identities.append(_park_identity(lease))
            moves.gate_prompts.append(_park_prompt(lease))
    return moves


def _park_identity(lease: HeldLease) -> str:
    """One gate per episode: the job and the lease that ran out (a later lease of the same
    job, after an answer, is a new episode with a new expiry)."""
    expired = lease.lease_expires_at.astimezone(UTC).isoformat()
    return f"{GATE_DELIVERY_EXHAUSTED}:{lease.job_id}:{expired}"


def _park_prompt(lease: HeldLease) -> str:
    owner = "an unknown holder" if lease.lease_owner is None else repr(lease.lease_owner[:200])
    expired = lease.lease_expires_at.astimezone(UTC).isoformat()
    return (
        f"Job {lease.job_id} ({lease.kind[:200]}) has been delivered {lease.attempts} times, "
        f"its limit of {lease.max_attempts}, and its last lease, held by {owner}, expired at "
        f"{expired} without the job finishing. It is parked and will not be delivered again "
        f"on its own. Answer 'retry' to deliver it exactly once more (one attempt was "
        f"refunded when it was parked); leave this gate open to keep it parked."
    )


async def _move_leases(
    conn: Any, moves: _LeaseMoves, start: int, stop: int, now: datetime
) -> dict[UUID, str]:
    """Moves ``start:stop`` and their events, in one transaction; returns ``{job: action}``
    of the rows moved (the others changed since they were read, or are held elsewhere)."""
    async with conn.transaction():
        row = await conn.fetchrow(QUERIES["move_leases"], *moves.args(start, stop, now))
        job_ids = moves.job_ids[start:stop]
        moved = set(job_ids if row["moved"] is None else row["moved"])
        if not moved:
            return {}
        # the guard held the project as read, so each event goes on the stream read
        await _append_events(
            conn,
            [
                (moves.projects[i], moves.payloads[i], moves.digests[i], True)
                for i, job_id in enumerate(job_ids, start)
                if job_id in moved
            ],
            now,
        )
    parked = set(row["parked"] or ())
    return {job_id: "park" if job_id in parked else "requeue" for job_id in moved}


#: The ``event`` columns written by COPY, in order.
EVENT_COLUMNS = ("project_id", "seq", "kind", "payload", "digest", "trusted", "created_at")


async def _append_events(
    conn: Any, events: Sequence[tuple[UUID, str, str, bool]], now: datetime
) -> None:
    """Append ``(stream, canonical payload, digest, trusted)`` events as ``QueueReaped``,
    in order, inside the caller's transaction.

    The streams' numbers are reserved first (``allocate_seqs``: the stream rows stay locked
    until the caller commits), then the events are written with COPY, the cheapest way in.
    """
    if not events:
        return
    counts = Counter(stream for stream, _, _, _ in events)
    streams = sorted(counts)
    rows = await conn.fetch(QUERIES["allocate_seqs"], streams, [counts[s] for s in streams])
    last = {r[0]: r[1] - counts[r[0]] for r in rows}
    records = []
    for stream, canonical, digest, trusted in events:
        last[stream] += 1
        records.append((stream, last[stream], EVENT_KIND, canonical, digest, trusted, now))
    await conn.copy_records_to_table("event", records=records, columns=EVENT_COLUMNS)


def _record_verdict(row: Any) -> Verdict:
    return sightings.verdict_from_record(
        row["project_id"], json.loads(row["payload"]), row["trusted"]
    )


def _lock_key(ref: sightings.SightingRef) -> int:
    """A stable signed 64-bit advisory lock key for one sighting."""
    text = f"sighting|{ref.stream}|{ref.key.source}|{ref.key.condition}|{ref.key.scope}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big", signed=True)


def _gate(row: Any) -> Gate:
    choices = json.loads(row["choices"]) if row["choices"] else []
    return Gate(
        id=row["id"],
        project_id=row["project_id"],
        job_id=row["job_id"],
        kind=row["kind"],
        prompt=row["prompt"],
        choices=tuple(str(c) for c in choices) if isinstance(choices, list) else (),
        answer=row["answer"],
        answered_at=row["answered_at"],
        identity=row["identity"],
        created_at=row["created_at"],
        answered_by=row["answered_by"],
    )


def _is_row_failure(exc: asyncpg.PostgresError) -> bool:
    """Whether an error is about the rows of a statement (a trigger raising, a constraint
    violated), as opposed to the database being unavailable."""
    sqlstate = str(getattr(exc, "sqlstate", "") or "")
    return sqlstate[:2] not in _STORE_FAILURE_CLASSES


def _row_reason(exc: asyncpg.PostgresError, password: str | None) -> str:
    sqlstate = getattr(exc, "sqlstate", None) or "?"
    return scrub(f"{_first_line(exc)} (SQLSTATE {sqlstate})", [password])


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _dsn_password(dsn: str) -> str | None:
    try:
        return urlsplit(dsn).password
    except ValueError:
        return None


def _where(dsn: str) -> str:
    """Where a DSN points, without credentials: ``host:port/database``."""
    try:
        parts = urlsplit(dsn)
    except ValueError:
        return "the configured database"
    if not parts.scheme.startswith("postgres"):
        return "the configured database"
    host = parts.hostname or "localhost"
    try:
        port = parts.port or 5432
    except ValueError:
        port = 5432
    database = parts.path.lstrip("/") or "postgres"
    return f"{host}:{port}/{database}"


# --------------------------------------------------------------------------- dead letters

#: A parked dead letter's job idempotency key and gate identity: this prefix and its identity.
DEAD_LETTER_KEY_PREFIX = "dead_letter:"

#: The two answers of a ``bus_dead_lettered`` gate (``deadletters.GATE_CHOICES``).
DEAD_LETTER_REPLAY, DEAD_LETTER_DISMISS = deadletters.GATE_CHOICES

#: What a parked dead-letter job settles as: a replay did the job's work (the body is back on
#: its queue); a dismissal settles it with nothing done.
DEAD_LETTER_SETTLED = {DEAD_LETTER_REPLAY: "succeeded", DEAD_LETTER_DISMISS: "cancelled"}

_REPLAY_NEEDS_BROKER = (
    "gate {gate}: replay publishes the body to the broker, which the store alone cannot do: "
    "answer it with `reaper gates answer` (reaper.gates.answer_gate)"
)


def dead_letter_key(identity: str) -> str:
    """The job idempotency key and gate identity of the dead letter ``identity``."""
    return DEAD_LETTER_KEY_PREFIX + identity


class DeadLetterParks(list[Verdict]):
    """The ``park`` verdicts :meth:`PostgresStore.park_dead_letters` recorded (a list), with
    the identities it did not park beside them."""

    def __init__(self) -> None:
        super().__init__()
        #: Letters the database refused, each with the reason; rolled back alone.
        self.failed: list[tuple[str, str]] = []
        #: Letters parked before (an earlier pass, or another reaper just now): nothing written.
        self.already_parked: list[str] = []


@dataclass(frozen=True)
class ParkedDeadLetter:
    """What a parked ``bus.dead_letter`` job keeps of its letter (the ``dead_letter`` row),
    and the job's state. Everything but ``identity`` and ``queue`` is untrusted."""

    identity: str
    job_id: UUID
    queue: str
    message_id: str | None
    origin_queue: str | None
    reason: str | None
    body: str
    body_encoding: str
    body_bytes: int
    body_truncated: bool
    is_json_object: bool
    parked_at: datetime
    job_state: str

    def fields(self) -> dict[str, Any]:
        """The fields as ``deadletters.park_fields`` gave them, for ``replay_decision`` and
        ``decoded_body``."""
        return {
            "queue": self.queue,
            "identity": self.identity,
            "message_id": self.message_id,
            "origin_queue": self.origin_queue,
            "reason": self.reason,
            "body": self.body,
            "body_encoding": self.body_encoding,
            "body_bytes": self.body_bytes,
            "body_truncated": self.body_truncated,
            "is_json_object": self.is_json_object,
        }


#: Publishes a parked dead letter's body back (``reaper.gates``); raises to refuse.
ReplaySender = Callable[[Gate, ParkedDeadLetter], Awaitable[None]]


class _DeadLetterRefused(Exception):
    """A park found its identity half taken (a ``dead_letter`` row or gate without the job)."""


async def _park_dead_letter(
    conn: Any,
    letter: DeadLetter,
    *,
    now: datetime,
    depth: int,
    min_depth: int,
    owned_queue_pattern: str,
    dead_letter_queue_pattern: str,
    choices: str,
) -> Verdict | None:
    """Park one letter and append its event, in one transaction; None if already parked."""
    fields = deadletters.park_fields(letter)
    prompt = deadletters.gate_prompt(
        letter,
        owned_queue_pattern=owned_queue_pattern,
        dead_letter_queue_pattern=dead_letter_queue_pattern,
    )
    key = dead_letter_key(letter.identity)
    async with conn.transaction():
        row = await conn.fetchrow(
            QUERIES["park_dead_letter"],
            now,
            key,
            letter.identity,
            fields["queue"],
            fields["message_id"],
            fields["origin_queue"],
            fields["reason"],
            fields["body"],
            fields["body_encoding"],
            fields["body_bytes"],
            fields["body_truncated"],
            fields["is_json_object"],
            prompt,
            FLEET_PROJECT_ID,
            DEAD_LETTER_JOB_KIND,
            GATE_BUS_DEAD_LETTERED,
            choices,
        )
        job_id = row["job_id"]
        if job_id is None:
            return None  # parked before: the job's idempotency key decided
        if row["letter_job_id"] is None or row["gate_id"] is None:
            taken = "dead_letter row" if row["letter_job_id"] is None else "gate"
            raise _DeadLetterRefused(
                f"a {taken} with identity {key!r} exists without its {DEAD_LETTER_JOB_KIND} job"
            )
        verdict = deadletters.park_verdict(letter, depth=depth, min_depth=min_depth, job_id=job_id)
        canonical = canonical_json(verdict.payload())
        await _append_events(
            conn, [(verdict.stream, canonical, digest_of(canonical), verdict.trusted)], now
        )
    return verdict


async def _answer_bus_dead_lettered(conn: Any, gate: Gate, choice: str, now: datetime) -> None:
    # dismiss settles the parked job (a job no longer awaiting a human is left as it is);
    # replay needs the broker, so only PostgresStore.answer_dead_letter_gate can take it.
    if choice == DEAD_LETTER_REPLAY:
        raise GateError(_REPLAY_NEEDS_BROKER.format(gate=gate.id))
    if gate.job_id is not None:
        await conn.fetchval(
            QUERIES["settle_parked_job"], now, gate.job_id, DEAD_LETTER_SETTLED[choice]
        )


GATE_ANSWERS[GATE_BUS_DEAD_LETTERED] = _answer_bus_dead_lettered


# --------------------------------------------------------------------------- the scenario
# For `reaper demo` and the tests (reaper/scenario.py), never for a pass: a database of their
# own, and the named seeding queries of reaper/sql/scenario.sql.

#: A database name the scenario helpers accept: plain, so it is safe inside "..." as is.
_PLAIN_DATABASE_NAME = r"[a-z_][a-z0-9_]{0,62}"

_scenario_queries: dict[str, str] = {}


async def create_database(admin_dsn: str, name: str, *, password: str | None = None) -> None:
    """Create the database ``name`` on the server ``admin_dsn`` points at (connected to the
    database it names). Raises :class:`StoreUnavailable` with a one-line reason if it cannot."""
    await _administer(admin_dsn, password, f"creating database {name}", "CREATE DATABASE", name)


async def drop_database(admin_dsn: str, name: str, *, password: str | None = None) -> None:
    """Drop the database ``name`` (if it exists, closing its sessions): only ever a database
    the demo or a test created for itself."""
    await _administer(
        admin_dsn, password, f"dropping database {name}", "DROP DATABASE IF EXISTS", name
    )


async def _administer(
    dsn: str, password: str | None, doing: str, statement: str, name: str
) -> None:
    import re

    if re.fullmatch(_PLAIN_DATABASE_NAME, name) is None:
        raise ValueError(f"not a plain database name (lower case, digits, _): {name!r}")
    force = " WITH (FORCE)" if statement.startswith("DROP") else ""
    seam = PostgresStore(None, _where(dsn), password or _dsn_password(dsn), CONNECT_TIMEOUT_SECONDS)
    async with seam._seam(doing):
        conn = await asyncpg.connect(dsn, password=password, timeout=CONNECT_TIMEOUT_SECONDS)
        try:
            await conn.execute(f'{statement} "{name}"{force}')
        finally:
            await conn.close()


async def run_scenario_query(store: PostgresStore, name: str, *args: Any) -> list[dict[str, Any]]:
    """Run the query ``name`` of ``reaper/sql/scenario.sql`` in a transaction of its own and
    return its rows (as dicts)."""
    if not _scenario_queries:
        from reaper.sql import load_queries

        _scenario_queries.update(load_queries("scenario.sql"))
    query = _scenario_queries[name]
    async with (
        store._seam(f"running the scenario query {name}"),
        store._connection() as conn,
        conn.transaction(),
    ):
        rows = await conn.fetch(query, *args)
    return [dict(row) for row in rows]

"""``PostgresStore``: the job queue's record and the ledger in PostgreSQL, as the
:class:`~reaper.jobqueue.port.JobQueue` port says.

Each concern has its own module, and this class only holds the pool and hands each call to its
module: leases (:mod:`~reaper.jobqueue.leases`), sightings (:mod:`~reaper.jobqueue.sightings`),
gates (:mod:`~reaper.jobqueue.gates`), dead-letter parks (:mod:`~reaper.jobqueue.dead_letters`),
the ledger (:mod:`~reaper.jobqueue.ledger`), the fleet's turn (:mod:`~reaper.jobqueue.turns`)
and migrations (:mod:`~reaper.jobqueue.migrations`).
Every query is named in ``sql/queries.sql``; every query that depends on time takes ``now``
from the caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from reaper.core.dead_letters import DispatchPointer, QuietMark
from reaper.core.domain import (
    ClaimableHead,
    DeadLetter,
    Dispatch,
    Gate,
    LedgerEvent,
    SightingKey,
    Source,
    UnsentDispatch,
    Verdict,
)
from reaper.core.judge_leases import LeaseColumns, LeaseRulings
from reaper.core.observation import Observation
from reaper.jobqueue import (
    dead_letters,
    gates,
    leases,
    ledger,
    migrations,
    observations,
    quiet_marks,
    sightings,
    turns,
)
from reaper.jobqueue.database import ConnectionFactory, Database, WorkerPool
from reaper.jobqueue.migrations import DEFAULT_LOCK_TIMEOUT_SECONDS, MigrationRun
from reaper.jobqueue.port import (
    DatabaseFacts,
    DeadLetterParks,
    EventFilter,
    GateCount,
    LeaseMoves,
    ParkedDeadLetter,
    ParkRules,
    ReplaySender,
    Turn,
)
from reaper.jobqueue.sql import QUERIES

__all__ = ["PostgresStore"]


class PostgresStore:
    """The job queue and ledger in PostgreSQL, over an asyncpg pool."""

    def __init__(self, database: Database) -> None:
        self.database = database

    @classmethod
    async def connect(
        cls,
        dsn: str,
        *,
        password: str | None = None,
        pool_size: int = 4,
        statement_timeout_seconds: float = 30,
        factory: ConnectionFactory | None = None,
    ) -> PostgresStore:
        """Open a pool of at most ``pool_size`` connections (the worker's, opened by
        ``factory``, when it is given); every statement is bounded by
        ``statement_timeout_seconds``. Raises :class:`~reaper.errors.StoreUnavailable` when
        it cannot."""
        return cls(
            await Database.connect(
                dsn,
                password=password,
                pool_size=pool_size,
                statement_timeout_seconds=statement_timeout_seconds,
                factory=factory,
            )
        )

    @classmethod
    def borrowing(
        cls, pool: WorkerPool, *, connections: int = 1, statement_timeout_seconds: float = 30
    ) -> PostgresStore:
        """A store over a worker's own asyncpg pool, taking at most ``connections`` of it at
        once; closing the store leaves the pool open."""
        return cls(
            Database.borrowing(
                pool, connections=connections, statement_timeout_seconds=statement_timeout_seconds
            )
        )

    async def close(self) -> None:
        await self.database.close()

    async def migrate(
        self, *, lock_timeout_seconds: float = DEFAULT_LOCK_TIMEOUT_SECONDS
    ) -> list[str]:
        """Bring the schema up to date, online (:mod:`~reaper.jobqueue.migrations`); the names
        of the migrations recorded as applied (empty: there was nothing to apply). Raises
        :class:`~reaper.errors.MigrationStopped` when it must stop."""
        run = await self.migrate_schema(lock_timeout_seconds=lock_timeout_seconds)
        return list(run.applied)

    async def migrate_schema(
        self,
        *,
        dry_run: bool = False,
        lock_timeout_seconds: float = DEFAULT_LOCK_TIMEOUT_SECONDS,
        outbox: bool = False,
    ) -> MigrationRun:
        """Like :meth:`migrate`, with everything it ran (or, ``dry_run``, would run) and why;
        ``outbox`` adds the outbox dispatch schema where it is missing."""
        return await migrations.migrate(
            self.database,
            lock_timeout_seconds=lock_timeout_seconds,
            dry_run=dry_run,
            outbox=outbox,
        )

    async def database_facts(self) -> DatabaseFacts:
        async with self.database.session("reading the database's clock") as conn:
            now: datetime = await conn.fetchval(QUERIES["database_now"])
            outbox: bool = await conn.fetchval(QUERIES["dispatch_schema"])
        return DatabaseFacts(now, outbox)

    async def take_turn(self, name: str, interval_seconds: float, holder: str) -> Turn:
        return await turns.take_turn(self.database, name, interval_seconds, holder)

    async def hand_back_turn(self, name: str, turn: Turn, interval_seconds: float) -> bool:
        return await turns.hand_back_turn(self.database, name, turn, interval_seconds)

    async def observations(self, scope: str) -> list[Observation]:
        return await observations.observations(self.database, scope)

    async def keep_observations(self, scope: str, kept: Sequence[Observation]) -> None:
        await observations.keep(self.database, scope, kept)

    async def quiet_mark(self, scope: str, queue: str) -> QuietMark | None:
        return await quiet_marks.quiet_mark(self.database, scope, queue)

    async def keep_quiet_mark(self, scope: str, mark: QuietMark) -> None:
        await quiet_marks.keep(self.database, scope, mark)

    async def unsent_dispatches(self, project_id: UUID | None = None) -> list[UnsentDispatch]:
        return await leases.unsent_dispatches(self.database, project_id)

    # ----------------------------------------------------------------------- leases

    async def expired_lease_page(
        self,
        now: datetime,
        grace_seconds: int,
        size: int,
        after: tuple[datetime, UUID] | None = None,
        project_id: UUID | None = None,
    ) -> LeaseColumns:
        return await leases.expired_lease_page(
            self.database, now, grace_seconds, size, after, project_id
        )

    async def move_lease_page(
        self,
        page: LeaseColumns,
        rulings: LeaseRulings,
        now: datetime,
        *,
        dispatch: Dispatch = Dispatch.POLLING,
    ) -> LeaseMoves:
        return await leases.move_lease_page(self.database, page, rulings, now, dispatch)

    async def count_expired_leases(
        self,
        now: datetime,
        grace_seconds: int,
        project_id: UUID | None = None,
        after: tuple[datetime, UUID] | None = None,
    ) -> int:
        return await leases.count_expired_leases(
            self.database, now, grace_seconds, project_id, after
        )

    async def claimable_heads(
        self, now: datetime, known_phases: frozenset[str], project_id: UUID | None = None
    ) -> list[ClaimableHead]:
        return await leases.claimable_heads(self.database, now, known_phases, project_id)

    # ----------------------------------------------------------------------- sightings

    async def sightings_open_since(
        self, observed: Sequence[Verdict]
    ) -> dict[SightingKey, datetime]:
        return await sightings.open_since(self.database, observed)

    async def record_sightings(
        self,
        observed: Sequence[Verdict],
        *,
        now: datetime,
        sources_read: frozenset[Source],
        project_id: UUID | None = None,
        unread_queues: frozenset[str] = frozenset(),
    ) -> list[Verdict]:
        return await sightings.record_sightings(
            self.database,
            observed,
            now=now,
            sources_read=sources_read,
            project_id=project_id,
            unread_queues=unread_queues,
        )

    # ----------------------------------------------------------------------- dead letters

    async def count_parked_dead_letters(self, queue: str) -> int:
        return await dead_letters.count_parked(self.database, queue)

    async def parked_identities(self, identities: Sequence[str]) -> set[str]:
        return await dead_letters.parked_identities(self.database, identities)

    async def parked_envelopes(self, envelopes: Sequence[str]) -> dict[str, int]:
        return await dead_letters.parked_envelopes(self.database, envelopes)

    async def keep_envelopes(self, seen: Sequence[tuple[str, str]]) -> int:
        return await dead_letters.keep_envelopes(self.database, seen)

    async def park_dead_letters(
        self, letters: Sequence[DeadLetter], *, now: datetime, rules: ParkRules
    ) -> DeadLetterParks:
        return await dead_letters.park(self.database, letters, now=now, rules=rules)

    async def park_dispatch_pointers(
        self,
        pointers: Sequence[tuple[DeadLetter, DispatchPointer]],
        *,
        now: datetime,
        rules: ParkRules,
    ) -> DeadLetterParks:
        return await dead_letters.park_pointers(self.database, pointers, now=now, rules=rules)

    # ----------------------------------------------------------------------- gates

    async def list_gates(
        self,
        *,
        open_only: bool = True,
        kind: str | None = None,
        project_id: UUID | None = None,
        raised_before: datetime | None = None,
    ) -> list[Gate]:
        return await gates.list_gates(
            self.database,
            open_only=open_only,
            kind=kind,
            project_id=project_id,
            raised_before=raised_before,
        )

    async def gates_between(self, low: UUID, high: UUID, limit: int) -> list[Gate]:
        return await gates.gates_between(self.database, low, high, limit)

    async def open_gate_counts(self) -> list[GateCount]:
        return await gates.open_gate_counts(self.database)

    async def open_dead_letter_gates(self) -> dict[str, int]:
        return await gates.open_dead_letter_gates(self.database)

    async def parked_dead_letters(self, job_ids: Sequence[UUID]) -> dict[UUID, ParkedDeadLetter]:
        return await dead_letters.parked_letters_of(self.database, job_ids)

    async def answer_gate(
        self,
        gate_id: UUID,
        choice: str,
        now: datetime,
        *,
        answered_by: str | None = None,
        dispatch: Dispatch = Dispatch.POLLING,
        reason: str | None = None,
    ) -> Gate:
        return await gates.answer_gate(
            self.database,
            gate_id,
            choice,
            now,
            answered_by=answered_by,
            dispatch=dispatch,
            reason=reason,
        )

    async def answer_dead_letter_gate(
        self,
        gate_id: UUID,
        choice: str,
        now: datetime,
        *,
        replay: ReplaySender | None = None,
        answered_by: str | None = None,
        reason: str | None = None,
    ) -> tuple[Gate, ParkedDeadLetter | None]:
        return await dead_letters.answer_gate(
            self.database,
            gate_id,
            choice,
            now,
            replay=replay,
            answered_by=answered_by,
            reason=reason,
        )

    # ----------------------------------------------------------------------- ledger

    async def events(self, project_id: UUID) -> list[LedgerEvent]:
        async with self.database.session("reading the ledger") as conn:
            return await ledger.stream(conn, project_id)

    async def read_events(self, chosen: EventFilter) -> list[LedgerEvent]:
        async with self.database.session("reading the ledger") as conn:
            return await ledger.read(conn, chosen)

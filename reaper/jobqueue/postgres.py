"""``PostgresStore``: the job queue's record and the ledger in PostgreSQL, as the
:class:`~reaper.jobqueue.port.JobQueue` port says.

Each concern has its own module, and this class only holds the pool: each method of the port is
its module's function, bound to the store's :class:`Database` (:class:`_OnDatabase`), from
leases (:mod:`~reaper.jobqueue.leases`), sightings (:mod:`~reaper.jobqueue.sightings`), gates
(:mod:`~reaper.jobqueue.gates`), dead-letter parks (:mod:`~reaper.jobqueue.dead_letters`), the
ledger (:mod:`~reaper.jobqueue.ledger`) and the fleet's turn (:mod:`~reaper.jobqueue.turns`).
Every query is named in ``sql/queries.sql``; every query that depends on time takes ``now``
from the caller. The schema is :mod:`reaper.schema`'s (a pass never migrates); a gate's answer
is the desk's, over this store's :class:`Database` (:class:`~reaper.desk.postgres.PostgresDesk`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from datetime import datetime
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload
from uuid import UUID

from reaper.core.domain import ClaimableHead, Dispatch, UnsentDispatch
from reaper.core.judge_leases import LeaseColumns, LeaseRulings
from reaper.jobqueue import dead_letters, gates, leases, ledger, quiet_marks, sightings, turns
from reaper.jobqueue import observations as watched
from reaper.jobqueue.database import ConnectionFactory, Database, WorkerPool
from reaper.jobqueue.port import DatabaseFacts, LeaseMoves
from reaper.jobqueue.sql import QUERIES

__all__ = ["PostgresStore"]

P = ParamSpec("P")
R = TypeVar("R")


class _OnDatabase(Generic[P, R]):
    """A concern module's ``function(db, ...)`` as a method of the store: called on a store,
    it is called with the store's :class:`Database` first. Its parameters are the port's."""

    def __init__(self, function: Callable[Concatenate[Database, P], Coroutine[Any, Any, R]]):
        self._function = function
        self.__doc__ = function.__doc__

    @overload
    def __get__(self, store: None, owner: type[object]) -> _OnDatabase[P, R]: ...

    @overload
    def __get__(
        self, store: PostgresStore, owner: type[object]
    ) -> Callable[P, Coroutine[Any, Any, R]]: ...

    def __get__(
        self, store: PostgresStore | None, owner: type[object]
    ) -> _OnDatabase[P, R] | Callable[P, Coroutine[Any, Any, R]]:
        if store is None:
            return self
        return functools.partial(self._function, store.database)


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

    async def database_facts(self) -> DatabaseFacts:
        async with self.database.session("reading the database's clock") as conn:
            now: datetime = await conn.fetchval(QUERIES["database_now"])
            outbox: bool = await conn.fetchval(QUERIES["dispatch_schema"])
        return DatabaseFacts(now, outbox)

    take_turn = _OnDatabase(turns.take_turn)
    hand_back_turn = _OnDatabase(turns.hand_back_turn)
    observations = _OnDatabase(watched.observations)
    keep_observations = _OnDatabase(watched.keep)
    quiet_mark = _OnDatabase(quiet_marks.quiet_mark)
    keep_quiet_mark = _OnDatabase(quiet_marks.keep)

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

    record_sightings = _OnDatabase(sightings.record_sightings)
    sightings_open_since = _OnDatabase(sightings.sightings_open_since)

    # ----------------------------------------------------------------------- dead letters

    count_parked_dead_letters = _OnDatabase(dead_letters.count_parked)
    parked_identities = _OnDatabase(dead_letters.parked_identities)
    parked_envelopes = _OnDatabase(dead_letters.parked_envelopes)
    keep_envelopes = _OnDatabase(dead_letters.keep_envelopes)
    park_dead_letters = _OnDatabase(dead_letters.park)
    park_dispatch_pointers = _OnDatabase(dead_letters.park_pointers)
    parked_dead_letters = _OnDatabase(dead_letters.parked_letters_of)

    # ----------------------------------------------------------------------- gates

    list_gates = _OnDatabase(gates.list_gates)
    gates_between = _OnDatabase(gates.gates_between)
    open_gate_counts = _OnDatabase(gates.open_gate_counts)
    open_dead_letter_gates = _OnDatabase(gates.open_dead_letter_gates)

    # ----------------------------------------------------------------------- ledger

    events = _OnDatabase(ledger.stream)
    read_events = _OnDatabase(ledger.read)

"""``PostgresStore``: the job queue's record and the ledger in PostgreSQL, as the
:class:`~reaper.jobqueue.port.JobQueue` port says.

Each concern has its own module, and this class only holds the pool: each method of the port is
its module's function (leases, sightings, gates, dead-letter parks, the ledger, the fleet's
turn), bound to the store's :class:`Database` by :class:`~reaper.jobqueue.bound.OnDatabase`.
Every query is named in ``sql/queries.sql``; every query that depends on time takes ``now``
from the caller. The schema is :mod:`reaper.schema`'s (a pass never migrates); a gate's answer
is the desk's, over this store's :class:`Database` (:class:`~reaper.desk.postgres.PostgresDesk`).
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from reaper.core.domain import ClaimableHead, UnsentDispatch
from reaper.jobqueue import (
    dead_letters,
    gates,
    lease_reap,
    leases,
    ledger,
    quiet_marks,
    sightings,
    turns,
)
from reaper.jobqueue import observations as watched
from reaper.jobqueue.bound import OnDatabase
from reaper.jobqueue.database import ConnectionFactory, Database, WorkerPool
from reaper.jobqueue.port import DatabaseFacts
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

    async def database_facts(self) -> DatabaseFacts:
        async with self.database.session("reading the database's clock") as conn:
            now: datetime = await conn.fetchval(QUERIES["database_now"])
            outbox: bool = await conn.fetchval(QUERIES["dispatch_schema"])
        return DatabaseFacts(now, outbox)

    take_turn = OnDatabase(turns.take_turn)
    hand_back_turn = OnDatabase(turns.hand_back_turn)
    observations = OnDatabase(watched.observations)
    keep_observations = OnDatabase(watched.keep)
    quiet_mark = OnDatabase(quiet_marks.quiet_mark)
    keep_quiet_mark = OnDatabase(quiet_marks.keep)

    async def unsent_dispatches(self, project_id: UUID | None = None) -> list[UnsentDispatch]:
        return await leases.unsent_dispatches(self.database, project_id)

    # ----------------------------------------------------------------------- leases

    reap_leases = OnDatabase(lease_reap.reap_leases)

    count_expired_leases = OnDatabase(leases.count_expired_leases)

    async def claimable_heads(
        self, now: datetime, known_phases: frozenset[str], project_id: UUID | None = None
    ) -> list[ClaimableHead]:
        return await leases.claimable_heads(self.database, now, known_phases, project_id)

    # ----------------------------------------------------------------------- sightings

    record_sightings = OnDatabase(sightings.record_sightings)
    sightings_open_since = OnDatabase(sightings.sightings_open_since)

    # ----------------------------------------------------------------------- dead letters

    count_parked_dead_letters = OnDatabase(dead_letters.count_parked)
    parked_identities = OnDatabase(dead_letters.parked_identities)
    parked_envelopes = OnDatabase(dead_letters.parked_envelopes)
    keep_envelopes = OnDatabase(dead_letters.keep_envelopes)
    park_dead_letters = OnDatabase(dead_letters.park)
    park_dispatch_pointers = OnDatabase(dead_letters.park_pointers)
    parked_dead_letters = OnDatabase(dead_letters.parked_letters_of)

    # ----------------------------------------------------------------------- gates

    list_gates = OnDatabase(gates.list_gates)
    gates_between = OnDatabase(gates.gates_between)
    open_gate_counts = OnDatabase(gates.open_gate_counts)
    open_dead_letter_gates = OnDatabase(gates.open_dead_letter_gates)

    # ----------------------------------------------------------------------- ledger

    events = OnDatabase(ledger.stream)
    read_events = OnDatabase(ledger.read)

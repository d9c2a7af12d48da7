"""``PostgresStore``: the job queue's record and the ledger in PostgreSQL.

``PostgresStore``: the job queue's record and the ledger in PostgreSQL, as the
:class:`~reaper.jobqueue.port.JobQueue` port says.

The store holds the pool; its methods are written once, by concern, each a plain method that
runs named queries (``sql/``) over the connection seam (:class:`Database`): the lease reads and
the lease reap (:mod:`~reaper.jobqueue.leases`), sightings, dead-letter parks, gates read and
answered, the ledger, and what the fleet keeps across passes
(:mod:`~reaper.jobqueue.across_passes`). Every query that depends on time takes ``now`` from
the caller. The schema is :mod:`reaper.schema`'s (a pass never migrates).
"""

from __future__ import annotations

from datetime import datetime
from typing import Unpack

from reaper.jobqueue.across_passes import AcrossPasses
from reaper.jobqueue.database import Database, PoolOptions, WorkerPool
from reaper.jobqueue.dead_letters import DeadLetters
from reaper.jobqueue.gates import Gates
from reaper.jobqueue.leases import Leases
from reaper.jobqueue.ledger import Ledger
from reaper.jobqueue.port import DatabaseFacts
from reaper.jobqueue.sightings import Sightings
from reaper.jobqueue.sql import QUERIES

__all__ = ["PostgresStore"]


class PostgresStore(AcrossPasses, Leases, Sightings, DeadLetters, Gates, Ledger):
    """The job queue and ledger in PostgreSQL, over an asyncpg pool."""

    def __init__(self, database: Database) -> None:
        self.database = database

    @classmethod
    async def connect(cls, dsn: str, **options: Unpack[PoolOptions]) -> PostgresStore:
        """Open a pool of at most ``pool_size`` connections (the worker's, opened by
        ``factory``, when it is given); every statement is bounded by
        ``statement_timeout_seconds``. Raises :class:`~reaper.errors.StoreUnavailable` when
        it cannot."""
        return cls(await Database.connect(dsn, **options))

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

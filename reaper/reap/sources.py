"""The sources a pass reads, opened from the configuration: PostgreSQL and the broker.

The sources a pass reads, opened from the configuration: PostgreSQL (the job queue and the
ledger, where a person's answers to gates are taken too) and the broker's management API. A
source that cannot be opened is None with the reason beside it, and the
pass names it in ``unreadable``: opening never raises."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from reaper.broker.client import ManagementClient
from reaper.broker.http import BrokerTls
from reaper.broker.port import Broker
from reaper.config import Settings
from reaper.errors import ReaperError, SourceUnreadable
from reaper.jobqueue.database import ConnectionFactory, WorkerPool
from reaper.jobqueue.port import JobQueue
from reaper.jobqueue.postgres import PostgresStore

__all__ = ["Sources", "open_broker", "open_sources", "open_store", "store_sources"]


@dataclass
class Sources:
    """The opened sources of one pass (or of a long-lived process)."""

    store: JobQueue | None = None
    store_error: str | None = None
    broker: Broker | None = None
    broker_error: str | None = None

    async def close(self) -> None:
        if self.store is not None:
            await self.store.close()
        if self.broker is not None:
            await self.broker.aclose()


async def open_store(
    settings: Settings,
    *,
    pool_size: int | None = None,
    pool: WorkerPool | None = None,
    factory: ConnectionFactory | None = None,
) -> tuple[PostgresStore | None, str | None]:
    """The store, or None and why not. Over a worker's ``pool`` (borrowed, never closed by
    the store) or its connection ``factory`` when one is given, else from ``[database]``;
    at most ``pool_size`` connections at once (default ``[database] pool_size``)."""
    db = settings.database
    size = db.pool_size if pool_size is None else pool_size
    if pool is not None:
        store = PostgresStore.borrowing(
            pool, connections=size, statement_timeout_seconds=db.statement_timeout_seconds
        )
        return store, None
    try:
        return (
            await PostgresStore.connect(
                db.dsn_in_force(),
                password=db.password.get_secret_value() if db.password else None,
                pool_size=size,
                statement_timeout_seconds=db.statement_timeout_seconds,
                factory=factory,
            ),
            None,
        )
    except SourceUnreadable as exc:
        return None, exc.reason


@asynccontextmanager
async def store_sources(
    settings: Settings, doing: str, *, broker: bool = False
) -> AsyncIterator[tuple[Sources, JobQueue]]:
    """The sources of a command that cannot work without the store, and the store, closed on
    the way out. A store that cannot be opened raises :class:`~reaper.errors.ReaperError`
    ("cannot ``doing``: why"), which the command line prints as one line, exit 1."""
    sources = await open_sources(settings, broker=broker)
    try:
        if sources.store is None:
            raise ReaperError(f"cannot {doing}: {sources.store_error}")
        yield sources, sources.store
    finally:
        await sources.close()


def open_broker(settings: Settings) -> Broker:
    """The management API's client, over every management URL in force in order of
    preference: opening it does no I/O."""
    bus = settings.bus
    return ManagementClient(
        bus.urls_in_force(),
        bus.username,
        bus.password.get_secret_value(),
        vhost=bus.vhost,
        timeout_seconds=bus.timeout_seconds,
        tls=BrokerTls(bus.ca_file, bus.client_cert_file, bus.client_key_file, bus.verify),
    )


async def open_sources(settings: Settings, *, store: bool = True, broker: bool = True) -> Sources:
    """Connect to PostgreSQL and build the management client. Never raises for a source that
    cannot be reached: the reason is kept and the pass names it in ``unreadable``."""
    sources = Sources()
    if store:
        sources.store, sources.store_error = await open_store(settings)
    if broker:
        sources.broker = open_broker(settings)
    return sources

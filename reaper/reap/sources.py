"""The sources a pass reads, opened from the configuration: PostgreSQL (the job queue and the
ledger) and the broker's management API. A source that cannot be opened is None with the reason
beside it, and the pass names it in ``unreadable``: opening never raises."""

from __future__ import annotations

from dataclasses import dataclass

from reaper.broker.client import ManagementClient
from reaper.broker.port import Broker
from reaper.config import Settings
from reaper.errors import SourceUnreadable
from reaper.jobqueue.port import JobQueue
from reaper.jobqueue.postgres import PostgresStore

__all__ = ["Sources", "open_sources"]


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


async def open_sources(settings: Settings, *, store: bool = True, broker: bool = True) -> Sources:
    """Connect to PostgreSQL and build the management client. Never raises for a source that
    cannot be reached: the reason is kept and the pass names it in ``unreadable``."""
    sources = Sources()
    if store:
        db = settings.database
        try:
            sources.store = await PostgresStore.connect(
                db.dsn,
                password=db.password.get_secret_value() if db.password else None,
                pool_size=db.pool_size,
                statement_timeout_seconds=db.statement_timeout_seconds,
            )
        except SourceUnreadable as exc:
            sources.store_error = exc.reason
    if broker:
        bus = settings.bus
        sources.broker = ManagementClient(
            bus.management_url,
            bus.username,
            bus.password.get_secret_value(),
            vhost=bus.vhost,
            timeout_seconds=bus.timeout_seconds,
        )
    return sources

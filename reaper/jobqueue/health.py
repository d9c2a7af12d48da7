"""What ``reaper doctor`` reads of PostgreSQL: its own session (role, version, clock, TLS) and
which migrations are recorded, through the one seam."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from reaper.jobqueue.database import Database
from reaper.jobqueue.sql import QUERIES, migrations

__all__ = ["SessionFacts", "applied_migrations", "session_facts", "shipped_migrations"]


@dataclass(frozen=True)
class SessionFacts:
    role: str
    version: str
    now: datetime
    ssl: bool
    tls_version: str | None
    recorded: bool


async def session_facts(database: Database) -> SessionFacts:
    async with database.session("reading its own session") as conn:
        row = await conn.fetchrow(QUERIES["doctor_session"])
    return SessionFacts(
        row["role"], row["version"], row["now"], row["ssl"], row["tls_version"], row["recorded"]
    )


async def applied_migrations(database: Database) -> set[str]:
    async with database.session("reading which migrations are applied") as conn:
        return {r["name"] for r in await conn.fetch(QUERIES["applied_migrations"])}


def shipped_migrations() -> list[str]:
    """The reaper's own migrations, in order (the outbox's are optional)."""
    return [name for name, _ in migrations()]

"""What ``reaper doctor`` reads of PostgreSQL's session.

What ``reaper doctor`` reads of PostgreSQL's session: its role, version, clock, TLS, and
whether migrations are recorded there (which ones: :mod:`reaper.schema.catalog`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from reaper.jobqueue.database import Database
from reaper.jobqueue.sql import QUERIES

__all__ = ["SessionFacts", "session_facts"]


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

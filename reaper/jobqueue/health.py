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
    """What the doctor's own session is, as PostgreSQL answers it."""

    #: The role it connected as (``current_user``).
    role: str
    #: The server's version (``server_version``).
    version: str
    #: The database's clock (``clock_timestamp()``), against which the doctor checks skew.
    now: datetime
    #: Whether the session is encrypted, and with which TLS version (None without TLS).
    ssl: bool
    tls_version: str | None
    #: Whether ``reaper_migration`` exists here (the schema is the reaper's, recorded).
    recorded: bool


async def session_facts(database: Database) -> SessionFacts:
    async with database.session("reading its own session") as conn:
        row = await conn.fetchrow(QUERIES["doctor_session"])
    return SessionFacts(
        row["role"], row["version"], row["now"], row["ssl"], row["tls_version"], row["recorded"]
    )

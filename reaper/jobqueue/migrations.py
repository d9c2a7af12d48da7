"""``reaper db migrate``: the shipped schema (``sql/migrations/NNNN_*.sql``), applied in order,
each once, under an advisory lock so concurrent migrators take turns (SPEC §3)."""

from __future__ import annotations

from typing import Final

from reaper.jobqueue.database import Database
from reaper.jobqueue.sql import QUERIES, migrations

__all__ = ["MIGRATION_LOCK", "migrate"]

#: The (int4, int4) advisory lock migrators take turns on ("reap", 1).
MIGRATION_LOCK: Final = (0x72656170, 1)


async def migrate(db: Database) -> list[str]:
    """Apply every migration not yet applied, in order, each in its own transaction. Returns
    the names applied (empty when the schema is up to date)."""
    applied: list[str] = []
    async with db.session("migrating the schema") as conn:
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

"""The commands for running the reaper in production: ``reaper db grants`` and the doctor.

The commands for running the reaper in production: ``reaper db grants ROLE`` (the least
PostgreSQL privileges, printed or applied) and ``reaper doctor`` (:mod:`reaper.edges.doctor`)."""

from __future__ import annotations

import sys

from reaper.config import LoadedConfig
from reaper.errors import ReaperError
from reaper.jobqueue.database import Database
from reaper.schema.grants import apply_grants, check_role, grants_for, role_exists

__all__ = ["grants"]

EXIT_OK, EXIT_NOT_OK, EXIT_USAGE = 0, 1, 2


async def open_database(loaded: LoadedConfig) -> Database:
    db = loaded.settings.database
    return await Database.connect(
        db.dsn_in_force(),
        password=db.password.get_secret_value() if db.password else None,
        pool_size=1,
        statement_timeout_seconds=db.statement_timeout_seconds,
    )


async def grants(loaded: LoadedConfig, role: str, *, apply: bool) -> int:
    try:
        check_role(role)
    except ValueError as exc:
        print(f"reaper: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        database = await open_database(loaded)
    except ReaperError as exc:
        print(f"reaper: cannot read the schema: {exc.reason}", file=sys.stderr)
        return EXIT_NOT_OK
    try:
        needed = await grants_for(database, role)
        if not apply:
            print(f"-- The privileges queue-reaper needs on {database.where}, and no more.")
            print(f"-- Run as the tables' owner, or: reaper db grants {role} --apply")
            for grant in needed:
                print(f"{grant.statement}  -- {grant.why}")
            return EXIT_OK
        if not await role_exists(database, role):
            print(
                f"reaper: role {role!r} does not exist on {database.where}: create it first "
                f"(CREATE ROLE {role} LOGIN PASSWORD '...'), then grant",
                file=sys.stderr,
            )
            return EXIT_NOT_OK
        await apply_grants(database, needed)
        print(f"granted {role} the {len(needed)} privileges the reaper needs on {database.where}")
        return EXIT_OK
    except ReaperError as exc:
        print(f"reaper: {exc.reason}", file=sys.stderr)
        return EXIT_NOT_OK
    finally:
        await database.close()

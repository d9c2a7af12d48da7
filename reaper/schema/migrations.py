"""``reaper db migrate``, online: the plan run on a live host's tables.

``reaper db migrate``, online (SPEC §3, §10): the plan of :mod:`reaper.schema.plan` run on a
live host's tables without stalling their traffic. Only what the catalog
(:mod:`reaper.schema.catalog`) shows missing runs; every lock wait is bounded by a short
``lock_timeout``; a lock not had in time is tried again after a pause unless its holder's
transaction is still open, and then the run stops with :class:`~reaper.errors.MigrationStopped`
naming the blockers (:mod:`reaper.schema.blockers`), having changed nothing half-way. A
migration is recorded once the catalog shows every step of it in place; migrators take turns on
an advisory lock. ``docs/architecture.md`` ("Online migrations") tells the whole run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, TypeVar

from reaper.errors import MigrationStopped, scrub
from reaper.jobqueue.database import (
    Connection,
    Database,
    PostgresError,
    first_line,
    first_line_and_detail,
    is_lock_timeout,
    is_row_failure,
)
from reaper.schema.blockers import BlockingSession, LockWatch, watching
from reaper.schema.catalog import Catalog, read_catalog
from reaper.schema.plan import (
    IndexBuild,
    MigrationPlan,
    PlannedStatement,
    SchemaPlan,
    drop_index,
    plan,
    plan_migration,
)
from reaper.schema.sql import MIGRATE
from reaper.schema.steps import (
    HOST_TABLES,
    MIGRATIONS,
    OUTBOX_MIGRATIONS,
    Migration,
    declared_functions,
    declared_tables,
)

__all__ = [
    "DEFAULT_LOCK_TIMEOUT_SECONDS",
    "LOCK_ATTEMPTS",
    "MIGRATION_LOCK",
    "RETRY_PAUSE_SECONDS",
    "MigrationRun",
    "migrate",
    "one_line",
]

#: The (int4, int4) advisory lock migrators take turns on ("reap", 1).
MIGRATION_LOCK: Final = (0x72656170, 1)

#: How long a lock is waited for unless configured (``[database] lock_timeout_seconds``).
DEFAULT_LOCK_TIMEOUT_SECONDS: Final = 2.0

#: Tries at a lock before the run stops; a blocker still open after the pause ends them early.
LOCK_ATTEMPTS: Final = 3
RETRY_PAUSE_SECONDS: Final = 0.5

#: How often a migrator waiting for its turn asks again. It polls, rather than waiting inside
#: pg_advisory_lock, so that it holds no snapshot: a concurrent index build by the migrator
#: whose turn it is waits for every older snapshot of the database, and would wait for it.
TURN_POLL_SECONDS: Final = 0.2

T = TypeVar("T")


@dataclass(frozen=True)
class MigrationRun:
    """What a migration did (or, in a dry run, would do)."""

    dry_run: bool
    lock_timeout_seconds: float
    #: The migrations recorded as applied by this run, in order.
    applied: tuple[str, ...]
    #: The statements run, in order, each with what the catalog showed that made it needed.
    statements: tuple[PlannedStatement, ...]
    #: In a dry run, the plan as it would run (transactions and builds); else None.
    plan: SchemaPlan | None = None

    @property
    def up_to_date(self) -> bool:
        return not self.applied and not self.statements


async def migrate(
    db: Database,
    *,
    lock_timeout_seconds: float = DEFAULT_LOCK_TIMEOUT_SECONDS,
    dry_run: bool = False,
    outbox: bool = False,
) -> MigrationRun:
    """Bring the schema up to date (a dry run reads the catalog and runs nothing); with
    ``outbox``, the outbox dispatch schema too (a fresh install that wants it). Raises
    :class:`~reaper.errors.MigrationStopped` when it must stop, having changed nothing
    half-way."""
    if not lock_timeout_seconds > 0:
        raise ValueError("lock_timeout_seconds must be positive: 0 means no timeout at all")
    async with (
        db.session("migrating the schema") as conn,
        db.dedicated("watching the migration's lock waits") as watcher,
    ):
        await _take_turn(conn)
        try:
            pid = await conn.fetchval(
                MIGRATE["begin_migrating"], f"{_milliseconds(lock_timeout_seconds)}ms", column=3
            )
            async with watching(db, watcher, pid, lock_timeout_seconds) as watch:
                migrator = _Migrator(db, conn, watch, lock_timeout_seconds, outbox=outbox)
                return await migrator.run(dry_run)
        finally:
            await conn.execute(MIGRATE["end_migrating"])
            await conn.execute(MIGRATE["unlock_migrations"], *MIGRATION_LOCK)


async def _take_turn(conn: Connection) -> None:
    while True:
        if await conn.fetchval(MIGRATE["try_lock_migrations"], *MIGRATION_LOCK):
            return
        await asyncio.sleep(TURN_POLL_SECONDS)


def _milliseconds(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def one_line(sql: str, limit: int = 120) -> str:
    """A statement on one line, cut to ``limit`` characters, for messages."""
    text = " ".join(sql.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Migrator:
    """One run, on the migrator's own session, after its turn has come."""

    def __init__(
        self,
        db: Database,
        conn: Connection,
        watch: LockWatch,
        lock_timeout: float,
        *,
        outbox: bool = False,
    ) -> None:
        self.outbox = outbox
        self.db = db
        self.conn = conn
        self.watch = watch
        self.lock_timeout = lock_timeout
        self.ran: list[PlannedStatement] = []
        self.applied: list[str] = []

    async def run(self, dry_run: bool) -> MigrationRun:
        catalog = await self._locked("reading the catalog", None, self._catalog)
        schema_plan = plan(catalog, outbox=self.outbox)
        if schema_plan.refusal:
            raise MigrationStopped(schema_plan.refusal)
        if dry_run:
            return MigrationRun(
                dry_run=True,
                lock_timeout_seconds=self.lock_timeout,
                applied=tuple(m.name for m in schema_plan.migrations if not m.recorded),
                statements=schema_plan.statements,
                plan=schema_plan,
            )
        if schema_plan.record_table is not None:
            await self.conn.execute(schema_plan.record_table.sql)
            self.ran.append(schema_plan.record_table)
        for migration in schema_plan.migrations:
            await self._apply(migration)
        return MigrationRun(
            dry_run=False,
            lock_timeout_seconds=self.lock_timeout,
            applied=tuple(self.applied),
            statements=tuple(self.ran),
        )

    async def _catalog(self) -> Catalog:
        return await read_catalog(
            self.conn,
            tables=declared_tables(),
            functions=declared_functions(),
            host_tables=HOST_TABLES,
        )

    # ------------------------------------------------------------------ one migration

    async def _apply(self, migration: MigrationPlan) -> None:
        if migration.transactional or not migration.builds:
            await self._transaction(migration)
        for build in migration.builds:
            await self._build(migration.name, build)
        if migration.builds:
            await self._locked("recording it", migration.name, lambda: self._record(migration))

    async def _record(self, migration: MigrationPlan) -> None:
        await self._verify(migration)
        if not migration.recorded:
            await self.conn.execute(MIGRATE["record_migration"], migration.name)
            self.applied.append(migration.name)

    async def _transaction(self, migration: MigrationPlan) -> None:
        """Its transactional statements in one transaction; recorded in it when it builds no
        index."""
        current: list[PlannedStatement] = []

        async def attempt() -> None:
            current.clear()
            async with self.conn.transaction():
                timeout = MIGRATE["set_local_lock_timeout"].format(
                    milliseconds=_milliseconds(self.lock_timeout)
                )
                await self.conn.execute(timeout)
                for statement in migration.transactional:
                    current.append(statement)
                    await self.conn.execute(statement.sql)
                if not migration.builds:
                    current.clear()
                    await self._verify(migration)
                    if not migration.recorded:
                        await self.conn.execute(MIGRATE["record_migration"], migration.name)

        def statement() -> PlannedStatement | None:
            return current[-1] if current else None

        async def rolled_back() -> str:
            return (
                f"The transaction was rolled back: nothing of {migration.name} was changed, "
                "and it is not recorded."
            )

        await self._locked("recording it", migration.name, attempt, statement, rolled_back)
        self.ran.extend(migration.transactional)
        if not migration.builds and not migration.recorded:
            self.applied.append(migration.name)

    async def _verify(self, migration: MigrationPlan) -> None:
        """A migration is recorded only once the catalog shows every step of it in place."""
        left = plan_migration(_declared(migration.name), await self._catalog())
        if not left.complete:
            missing = "; ".join(s.reason for s in left.statements)
            raise MigrationStopped(
                f"migration {migration.name}: after its statements ran, the catalog still "
                f"shows: {missing}. It is not recorded."
            )

    async def _build(self, migration: str, build: IndexBuild) -> None:
        """One concurrent index build: an invalid index of that name (the plan's, or one an
        earlier attempt left) is dropped first. Or one concurrent drop of a retired index."""
        running: list[PlannedStatement] = []

        async def attempt() -> None:
            running.clear()
            valid = await self.conn.fetchval(MIGRATE["index_validity"], build.index)
            if build.retire:
                if valid is None:
                    return  # dropped meanwhile, by someone else
                running.append(build.create)  # a drop cut short is done again next run
                await self.conn.execute(build.create.sql)
                self.ran.append(build.create)
                return
            if valid is True:
                return  # built meanwhile, by someone else
            if valid is False:
                drop = build.drop or drop_index(
                    migration,
                    build.index,
                    f"an interrupted build left index {build.index} invalid: dropped first",
                )
                running.append(drop)
                await self.conn.execute(drop.sql)
                self.ran.append(drop)
            running.append(build.create)
            await self.conn.execute(build.create.sql)
            self.ran.append(build.create)

        def statement() -> PlannedStatement | None:
            return running[-1] if running else None

        async def cleaned_up() -> str:
            if build.retire:
                return (
                    f"Index {build.index} may be left invalid (PostgreSQL does not use it for "
                    f"queries): the next `reaper db migrate` drops it. {migration} is not "
                    "recorded."
                )
            return await self._drop_leftover(migration, build.index)

        await self._locked("", migration, attempt, statement, cleaned_up)

    async def _drop_leftover(self, migration: str, index: str) -> str:
        """After a build was cut short: drop the invalid index it left, if it can in time."""
        try:
            valid = await self.conn.fetchval(MIGRATE["index_validity"], index)
            if valid is None:
                return f"The build left nothing behind. {migration} is not recorded."
            if valid is True:
                return f"Index {index} is in place. {migration} is not recorded."
            drop = drop_index(migration, index, "the build was cut short and left it invalid")
            await self.conn.execute(drop.sql)
        except PostgresError as exc:
            if not is_row_failure(exc):
                raise
            return (
                f"The interrupted build left index {index} invalid (PostgreSQL does not use it "
                f"for queries; dropping it failed too: {first_line(exc)}): the next "
                f"`reaper db migrate` drops it and builds it again. {migration} is not recorded."
            )
        self.ran.append(drop)
        return (
            f"The interrupted build's invalid index {index} was dropped: nothing is left "
            f"behind. {migration} is not recorded."
        )

    # ------------------------------------------------------------------ lock waits

    async def _locked(
        self,
        doing: str,
        migration: str | None,
        attempt: Callable[[], Awaitable[T]],
        statement: Callable[[], PlannedStatement | None] = lambda: None,
        aftermath: Callable[[], Awaitable[str]] | None = None,
    ) -> T:
        """Run ``attempt`` (a transaction or one concurrent statement), trying a lock held
        past lock_timeout again after a pause unless its holder's transaction is still open.
        Stops with :class:`MigrationStopped` naming the blockers and what was undone."""
        for number in range(1, LOCK_ATTEMPTS + 1):
            self.watch.clear()
            try:
                return await attempt()
            except PostgresError as exc:
                if not (is_lock_timeout(exc) or is_row_failure(exc)):
                    raise
                failed = exc
            blockers = self.watch.seen
            done = self._done()
            undone = await aftermath() if aftermath else ""
            what = self._what(doing, migration, statement())
            if not is_lock_timeout(failed):
                head = f"{what} failed: {first_line_and_detail(failed)}."
                raise MigrationStopped(self._stopped(head, undone, done, blocked=False)) from None
            still: tuple[BlockingSession, ...] = ()
            if number < LOCK_ATTEMPTS:
                await asyncio.sleep(RETRY_PAUSE_SECONDS)
                still = await self.watch.still_open(blockers)
                if not still:
                    continue
            raise MigrationStopped(
                self._blocked(what, number, still or blockers, bool(still), undone, done),
                blocking_pids=tuple(b.pid for b in still or blockers),
            ) from None
        raise AssertionError("unreachable")  # the last attempt returns or raises

    def _what(self, doing: str, migration: str | None, statement: PlannedStatement | None) -> str:
        where = f"migration {migration}" if migration else "reaper db migrate"
        if statement is not None:
            return f"{where}: {one_line(statement.sql)}"
        return f"{where}, {doing}" if doing else where

    def _blocked(
        self,
        what: str,
        attempts: int,
        blockers: tuple[BlockingSession, ...],
        long: bool,
        undone: str,
        done: str,
    ) -> str:
        lines = [
            f"{what} could not take its lock within lock_timeout = {self.lock_timeout:g} s "
            f"({attempts} attempt{'s' if attempts > 1 else ''}), and stopped."
        ]
        if blockers:
            lines.extend(f"  blocked by {b.describe()}" for b in blockers)
        else:
            lines.append(
                "  no blocking session was seen: it ended before it could be looked at"
                + (f" (the watch failed: {self.watch.failed})" if self.watch.failed else "")
            )
        if long:
            lines.append(
                f"  Its transaction was still open {RETRY_PAUSE_SECONDS:g} s later: a long "
                "transaction is reported, not waited for."
            )
        return self._stopped("\n".join(lines), undone, done, blocked=True)

    def _done(self) -> str:
        """What this run has committed so far, for a person."""
        if not (self.applied or self.ran):
            return "Before that, this run changed nothing."
        recorded = ", ".join(self.applied) or "no migration"
        return (
            f"Before that, this run recorded {recorded} and ran {len(self.ran)} statement(s), "
            "each complete in itself."
        )

    def _stopped(self, head: str, undone: str, done: str, *, blocked: bool) -> str:
        lines = [head]
        if undone:
            lines.append(f"  {undone}")
        lines.append(f"  {done}")
        lines.append(
            "  Run `reaper db migrate` again once the blocker is gone "
            "(`reaper db migrate --dry-run` shows what is still to do)."
            if blocked
            else "  `reaper db migrate --dry-run` shows what is still to do."
        )
        return scrub("\n".join(lines), [self.db.password])


def _declared(name: str) -> Migration:
    return next(m for m in (*MIGRATIONS, *OUTBOX_MIGRATIONS) if m.name == name)

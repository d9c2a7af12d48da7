"""The one seam to PostgreSQL, and the only module that imports asyncpg.

The rest of the store borrows a connection through :meth:`Database.session`, inside which any
driver or network failure becomes :class:`~reaper.errors.StoreUnavailable` with a scrubbed
one-line reason a person can act on; nothing above the store sees a driver type.

The pool is the reaper's own (:meth:`Database.connect`, from a DSN or a worker's connection
factory) or a worker's asyncpg pool it borrows from (:meth:`Database.borrowing`): at most
``connections`` of it at once, each with the reaper's session settings while it holds it and
its own defaults once given back; the worker's pool is never closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final, TypedDict
from urllib.parse import parse_qs, urlsplit

import asyncpg

from reaper.core.tls import tls_words
from reaper.errors import ReaperError, StoreUnavailable, scrub
from reaper.jobqueue.sql import QUERIES

#: ``-v``: each session's work, as the pass reads and writes.
_log = logging.getLogger("reaper.postgresql")

__all__ = [
    "CONNECT_TIMEOUT_SECONDS",
    "Connection",
    "ConnectionFactory",
    "Database",
    "PoolOptions",
    "PostgresError",
    "Record",
    "WorkerPool",
    "execute_once",
    "first_line",
    "first_line_and_detail",
    "is_lock_timeout",
    "is_row_failure",
    "is_transient",
    "where",
]

#: A connection of the pool and a row it returns (asyncpg's; typed loosely, as asyncpg ships
#: no type information).
Connection = Any
Record = Any

#: A worker's own asyncpg pool (``asyncpg.create_pool(...)``), which the reaper may borrow from.
WorkerPool = Any

#: A worker's way of opening one connection: ``lambda: asyncpg.connect(dsn)``.
ConnectionFactory = Callable[[], Awaitable[Connection]]

#: The driver's error for a statement the server refused; callers tell a row's fault from
#: the database's with :func:`is_row_failure`.
PostgresError: Final = asyncpg.PostgresError

#: Seconds to wait for a connection before calling the store unavailable.
CONNECT_TIMEOUT_SECONDS: Final = 10.0

#: ``work_mem`` of the store's sessions (a batch of lease moves needs a few MB).
WORK_MEM: Final = "64MB"

#: The reaper's session settings, on every connection it uses (its own, or one borrowed).
_SESSION_SETTINGS: Final = {
    "application_name": "queue-reaper",
    # a batch of moves carries each event's payload through sorts and CTEs: keep them in
    # memory rather than spilling to temporary files
    "work_mem": WORK_MEM,
    # short statements: compiling them would cost more than running them
    "jit": "off",
    # each statement planned for its own parameters: a batch's arrays, and a ledger that
    # grows under a mass expiry (a plan cached while the event table was small scans it
    # whole for every stream of every batch, and a pass slows as it goes)
    "plan_cache_mode": "force_custom_plan",
}

#: SQLSTATE classes that say the database, not one row, is the problem: the store is then
#: unavailable, instead of the row failing (connection exception, insufficient resources,
#: operator intervention incl. statement timeout, system error, internal error).
_STORE_FAILURE_CLASSES: Final = frozenset({"08", "53", "57", "58", "XX"})

#: SQLSTATEs that are no row's fault and pass: deadlock detected, serialization failure.
_TRANSIENT: Final = frozenset({"40P01", "40001"})

#: A database name the administration helper accepts: plain, so it is safe inside "..." as is.
_PLAIN_DATABASE_NAME: Final = r"[a-z_][a-z0-9_]{0,62}"


class PoolOptions(TypedDict, total=False):
    """How :meth:`Database.connect` opens its pool, for those that open one through it."""

    password: str | None
    pool_size: int
    statement_timeout_seconds: float
    factory: ConnectionFactory | None


class Database:
    """A pool of at most ``pool_size`` connections to one database, behind one seam."""

    def __init__(self, dsn: str, password: str | None, statement_timeout: float) -> None:
        self.where = where(dsn)
        self.password = password or _dsn_password(dsn)
        self.statement_timeout = statement_timeout
        self._dsn = dsn
        self._pool: Any = None
        self.pool_size = 1
        #: Set when the pool is a worker's: bounds how many of its connections are taken.
        self._borrowed: asyncio.Semaphore | None = None

    @classmethod
    async def connect(
        cls,
        dsn: str,
        *,
        password: str | None = None,
        pool_size: int = 4,
        statement_timeout_seconds: float = 30,
        factory: ConnectionFactory | None = None,
    ) -> Database:
        """Open the pool (one connection at once, at most ``pool_size``); every statement is
        bounded by ``statement_timeout_seconds``. With ``factory`` the pool's connections are
        the worker's, opened by it (``dsn`` then only names the database in messages). Raises
        :class:`StoreUnavailable` when it cannot."""
        database = cls(dsn, password, statement_timeout_seconds)
        database.pool_size = max(1, pool_size)
        async with database.seam("connecting"):
            if factory is None:
                database._pool = await asyncpg.create_pool(
                    dsn,
                    password=password,
                    min_size=1,
                    max_size=database.pool_size,
                    timeout=CONNECT_TIMEOUT_SECONDS,
                    server_settings=database._server_settings(),
                )
            else:

                async def opened(*_args: object, **_kwargs: object) -> Connection:
                    return await factory()

                database._pool = await asyncpg.create_pool(
                    min_size=1,
                    max_size=database.pool_size,
                    connect=opened,
                    init=database._apply_settings,
                )
        return database

    @classmethod
    def borrowing(
        cls,
        pool: WorkerPool,
        *,
        connections: int = 1,
        statement_timeout_seconds: float = 30,
        named: str = "the worker's pool",
    ) -> Database:
        """Borrow from a worker's asyncpg ``pool``: at most ``connections`` of it at once, each
        with the reaper's session settings while it holds it. Opens nothing; closing it leaves
        the worker's pool as it was."""
        database = cls("", None, statement_timeout_seconds)
        database.where = named
        database.pool_size = max(1, connections)
        database._pool = pool
        database._borrowed = asyncio.Semaphore(database.pool_size)
        return database

    @property
    def borrowed(self) -> bool:
        """Whether the pool is a worker's, borrowed from."""
        return self._borrowed is not None

    def _timeout_ms(self) -> str:
        return str(int(self.statement_timeout * 1000))

    async def _apply_settings(self, conn: Connection) -> None:
        await conn.execute(
            QUERIES["apply_session_settings"],
            _SESSION_SETTINGS["application_name"],
            _SESSION_SETTINGS["work_mem"],
            _SESSION_SETTINGS["jit"],
            self._timeout_ms(),
            _SESSION_SETTINGS["plan_cache_mode"],
        )

    def _server_settings(self) -> dict[str, str]:
        return {**_SESSION_SETTINGS, "statement_timeout": self._timeout_ms()}

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None and self._borrowed is None:
            with contextlib.suppress(Exception):
                await pool.close()

    @contextlib.asynccontextmanager
    async def session(self, doing: str) -> AsyncIterator[Connection]:
        """A pooled connection for ``doing`` (words for a person: "reading expired leases"),
        with every failure inside turned into :class:`StoreUnavailable`."""
        started = time.monotonic()
        async with self.seam(doing), self.connection() as conn:
            yield conn
        _log.debug(
            "postgresql %s: %s (%.1f ms)", self.where, doing, 1e3 * (time.monotonic() - started)
        )

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        """A pooled connection, outside the seam (the caller has entered one)."""
        if self._pool is None:
            raise StoreUnavailable(f"the store for {self.where} is closed")
        if self._borrowed is None:
            async with self._pool.acquire() as conn:
                yield conn
            return
        async with self._borrowed, self._pool.acquire() as conn:
            await self._apply_settings(conn)
            try:
                yield conn
            finally:
                # The worker's connection goes back with its own defaults (asyncpg's pool
                # resets it on release too; this holds for a pool that does not).
                with contextlib.suppress(Exception):
                    await conn.execute(QUERIES["reset_session_settings"])

    @contextlib.asynccontextmanager
    async def dedicated(self, doing: str) -> AsyncIterator[Connection]:
        """A connection of its own, outside the pool, closed afterwards, with every failure
        inside turned into :class:`StoreUnavailable` (the migrator watches its own lock waits
        from one, whatever the pool's size)."""
        async with self.seam(doing):
            conn = await asyncpg.connect(
                self._dsn,
                password=self.password,
                timeout=CONNECT_TIMEOUT_SECONDS,
                server_settings=self._server_settings(),
            )
            try:
                yield conn
            finally:
                with contextlib.suppress(Exception):
                    await conn.close()

    @contextlib.asynccontextmanager
    async def seam(self, doing: str) -> AsyncIterator[None]:
        """Turn every driver and network failure into :class:`StoreUnavailable`."""
        try:
            yield
        except ReaperError:
            raise
        except (
            asyncpg.PostgresError,
            asyncpg.InterfaceError,
            # A connection killed in the middle of a statement can leave the protocol in a
            # state asyncpg reports as its own internal error: the database went away all
            # the same.
            asyncpg.InternalClientError,
            ConnectionError,
            OSError,
        ) as exc:
            raise StoreUnavailable(self.reason(doing, exc)) from None

    def reason(self, doing: str, exc: BaseException) -> str:
        """Why ``doing`` failed, for a person, scrubbed of the password."""
        tls = tls_words(
            exc,
            host=self.where.split(":", 1)[0],
            ca_key="sslrootcert (in the DSN or database.sslrootcert)",
            verify_key="sslmode=verify-full",
        )
        if tls is not None:
            hint = tls
        elif isinstance(exc, OSError) and (files := _unreadable_files(self._dsn)):
            hint = f"{files}: correct the path in the DSN or [database], or make the file readable"
        elif isinstance(exc, asyncpg.ClientConfigurationError) and "root certificate" in str(exc):
            hint = (
                f"{first_line(exc)}: sslmode verify-ca and verify-full need the CA that signed "
                "the server's certificate; set sslrootcert (in the DSN or database.sslrootcert)"
            )
        elif "rejected SSL upgrade" in str(exc) or "does not support SSL" in str(exc):
            hint = (
                f"{first_line(exc)}: the server does not offer TLS; turn ssl on in its "
                "postgresql.conf (a reload applies it), or lower sslmode"
            )
        elif isinstance(exc, asyncpg.InsufficientPrivilegeError):
            hint = f"{first_line(exc)}: {self.privilege_fix()}"
        elif isinstance(exc, ConnectionRefusedError):
            hint = "connection refused: is PostgreSQL running and listening there?"
        elif isinstance(exc, TimeoutError):
            hint = f"no answer within {CONNECT_TIMEOUT_SECONDS:g} s: is the host reachable?"
        elif isinstance(
            exc, asyncpg.InvalidPasswordError | asyncpg.InvalidAuthorizationSpecificationError
        ):
            hint = f"authentication failed: check the user and password ({first_line(exc)})"
        elif isinstance(exc, asyncpg.InvalidCatalogNameError):
            hint = f"{first_line(exc)}: create it or correct the DSN"
        elif isinstance(exc, asyncpg.QueryCanceledError):
            hint = f"a statement ran past the statement timeout of {self.statement_timeout:g} s"
        elif isinstance(exc, asyncpg.UndefinedTableError | asyncpg.UndefinedFunctionError):
            hint = f"{first_line(exc)}: the schema is missing or old, run `reaper db migrate`"
        else:
            hint = f"{type(exc).__name__}: {first_line(exc)}"
        return scrub(f"PostgreSQL at {self.where}, {doing}: {hint}", [self.password])

    def row_reason(self, exc: BaseException) -> str:
        """Why one row could not be written, for a person, scrubbed."""
        sqlstate = getattr(exc, "sqlstate", None) or "?"
        fix = f": {self.privilege_fix()}" if sqlstate == "42501" else ""
        return scrub(f"{first_line(exc)} (SQLSTATE {sqlstate}){fix}", [self.password])

    def privilege_fix(self) -> str:
        """What to do about a privilege the connected role lacks (SQLSTATE 42501)."""
        role = _dsn_user(self._dsn) or "ROLE"
        return (
            f"the role lacks a privilege the reaper needs; run `reaper db grants {role} --apply` "
            "as the tables' owner (`reaper doctor` lists what is missing)"
        )


def is_row_failure(exc: BaseException) -> bool:
    """Whether an error is about the rows of a statement (a trigger raising, a constraint
    violated), as opposed to the database being unavailable."""
    if not isinstance(exc, asyncpg.PostgresError):
        return False
    sqlstate = str(getattr(exc, "sqlstate", "") or "")
    return sqlstate[:2] not in _STORE_FAILURE_CLASSES


def is_transient(exc: BaseException) -> bool:
    """Whether a statement failed for the moment only (a deadlock, a serialization failure)
    and is worth running again as it is."""
    return str(getattr(exc, "sqlstate", "") or "") in _TRANSIENT


def is_lock_timeout(exc: BaseException) -> bool:
    """Whether a statement gave up waiting for a lock (``lock_timeout``, SQLSTATE 55P03)."""
    return isinstance(exc, asyncpg.LockNotAvailableError)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def first_line_and_detail(exc: BaseException) -> str:
    """The server's message and, where it gave one, its DETAIL (which key is duplicated)."""
    detail = getattr(exc, "detail", None)
    return f"{first_line(exc)} ({detail})" if detail else first_line(exc)


def _dsn_user(dsn: str) -> str | None:
    try:
        return urlsplit(dsn).username
    except ValueError:
        return None


def _unreadable_files(dsn: str) -> str | None:
    """The DSN's TLS files that cannot be read, with key and why: asyncpg names no file."""
    found = []
    for key, paths in parse_qs(urlsplit(dsn).query).items():
        if key in ("sslrootcert", "sslcert", "sslkey") and not os.access(paths[-1], os.R_OK):
            why = "not readable" if os.path.exists(paths[-1]) else "No such file or directory"
            found.append(f"{key} {paths[-1]}: {why}")
    return "; ".join(found) or None


def _dsn_password(dsn: str) -> str | None:
    try:
        return urlsplit(dsn).password
    except ValueError:
        return None


def where(dsn: str) -> str:
    """Where a DSN points, without credentials: ``host:port/database``."""
    try:
        parts = urlsplit(dsn)
    except ValueError:
        return "the configured database"
    if not parts.scheme.startswith("postgres"):
        return "the configured database"
    host = parts.hostname or "localhost"
    try:
        port = parts.port or 5432
    except ValueError:
        port = 5432
    database = parts.path.lstrip("/") or "postgres"
    return f"{host}:{port}/{database}"


async def execute_once(
    dsn: str, statement: str, *, doing: str, password: str | None = None, database: str
) -> None:
    """Run one administrative ``statement`` naming ``database`` (``{database}`` in it is
    replaced by the quoted name) on a connection of its own, for the demo's and the tests' own
    databases: ``CREATE DATABASE {database}``. Raises ``ValueError`` for a name that is not
    plain and :class:`StoreUnavailable` when the server refuses."""
    if re.fullmatch(_PLAIN_DATABASE_NAME, database) is None:
        raise ValueError(f"not a plain database name (lower case, digits, _): {database!r}")
    seam = Database(dsn, password, CONNECT_TIMEOUT_SECONDS)
    async with seam.seam(doing):
        conn = await asyncpg.connect(dsn, password=password, timeout=CONNECT_TIMEOUT_SECONDS)
        try:
            await conn.execute(statement.format(database=f'"{database}"'))
        finally:
            await conn.close()

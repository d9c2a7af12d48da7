"""The idle-loop hook workers import: one bounded pass when the fleet's turn is theirs.

An idle worker's ``await reaper.run_if_due(project_id)`` returns at once when not due; it never
raises into the worker, and shares the fleet's turn with ``reaper serve``
(``docs/behaviour.md``, "The worker hook"):

    reaper = QueueReaper.from_config(pool=worker_pool)
    while True:
        if not await claim_and_run_one(project_id):
            await reaper.run_if_due(project_id)
            await wait_for_work()
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import os
import random
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final
from uuid import UUID

from reaper.config import Settings, load_config
from reaper.errors import scrub
from reaper.jobqueue.database import ConnectionFactory, WorkerPool
from reaper.jobqueue.port import JobQueue, Turn
from reaper.reap.result import PassResult
from reaper.reap.run import Mode, run_pass, utcnow
from reaper.reap.sources import Sources, open_broker, open_store

__all__ = ["TURN", "HookRun", "QueueReaper"]

log = logging.getLogger("reaper.hook")

#: Set while a pass of this process runs: the HTTP client's own INFO lines (one per request)
#: are then not the worker's to read; the pass logs one line of its own instead.
_IN_PASS: contextvars.ContextVar[bool] = contextvars.ContextVar("reaper_in_pass", default=False)


class _QuietDuringPass(logging.Filter):
    """Drops the HTTP client's records below WARNING made inside a reaper pass; the host's own
    requests, and every warning, pass through."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or not _IN_PASS.get()


_QUIET: Final = _QuietDuringPass()


def _quiet_http_client() -> None:
    http = logging.getLogger("httpx")
    if _QUIET not in http.filters:
        http.addFilter(_QUIET)


#: The name of the fleet's one turn (``reaper_turn.name``): one whole pass per interval over
#: the database, whoever takes it (a worker's hook or ``reaper serve``).
TURN: Final = "pass"

#: The most a hook that lost the turn adds, at random, to the time the turn frees, so that a
#: fleet spreads its next asks (a tenth of the interval, at most this many seconds).
MAX_JITTER_SECONDS: Final = 5.0

#: What ``reaper serve`` adds to the time the turn frees: it comes first, and so keeps the turn
#: while it runs, which keeps its metrics those of the fleet's pass.
SERVE_LEAD_SECONDS: Final = 0.05


@dataclass(frozen=True)
class HookRun:
    """What one call did. ``due``: the local interval had passed, so the turn was asked for;
    ``turn``: the turn as found (None when it could not be asked); ``result``: the pass, when
    the turn was this caller's."""

    due: bool
    turn: Turn | None = None
    result: PassResult | None = None
    error: str | None = None

    @property
    def ran(self) -> bool:
        return self.result is not None

    @property
    def ok(self) -> bool:
        return self.error is None and (self.result is None or self.result.ok)


class QueueReaper:
    """One per worker process (or one in ``reaper serve``)."""

    def __init__(
        self,
        settings: Settings,
        *,
        pool: WorkerPool | None = None,
        connection_factory: ConnectionFactory | None = None,
        holder: str | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        clock: Callable[[], datetime] = utcnow,
        jitter: Callable[[], float] = random.random,
        connect: Callable[[Settings], Awaitable[Sources]] | None = None,
    ) -> None:
        if pool is not None and connection_factory is not None:
            raise ValueError("give the hook a pool or a connection factory, not both")
        self._settings = settings
        self._pool = pool
        self._factory = connection_factory
        self._connect = connect
        self._monotonic = monotonic
        self._clock = clock
        self._jitter = jitter
        self.holder = holder or self.default_holder()
        #: ``monotonic()`` at or after which the next call asks for the turn (None: at once).
        self._next_ask: float | None = None
        self._running = False
        self._kept: Sources | None = None

    @classmethod
    def from_config(
        cls,
        config_dir: Path | None = None,
        environ: Mapping[str, str] | None = None,
        *,
        pool: WorkerPool | None = None,
        connection_factory: ConnectionFactory | None = None,
    ) -> QueueReaper:
        """Build from the declared configuration (raises ``ConfigError`` at start-up, where
        a worker should fail loudly, never later inside its loop). ``pool``: the worker's own
        asyncpg pool, shared; ``connection_factory``: how the worker opens a connection."""
        settings = load_config(config_dir, environ).settings
        return cls(settings, pool=pool, connection_factory=connection_factory)

    @staticmethod
    def default_holder() -> str:
        """Who takes the turn, as ``reaper_turn.taken_by`` shows it: host and process."""
        return f"{socket.gethostname()}:{os.getpid()}"

    @property
    def interval_seconds(self) -> int:
        return self._settings.queue.reap.interval_seconds

    def is_due(self) -> bool:
        """Whether the next call asks for the turn (no I/O)."""
        if self._running:
            return False
        return self._next_ask is None or self._monotonic() >= self._next_ask

    def seconds_until_due(self) -> float:
        if self._next_ask is None:
            return 0.0
        return max(0.0, self._next_ask - self._monotonic())

    async def run_if_due(self, project_id: UUID | None = None) -> HookRun:
        """The worker's call: nothing when not due; else the turn, and the pass if it is
        this worker's. Never raises."""
        if not self.is_due():
            return HookRun(due=False)
        return await self._take_turn_and_run(project_id, serve=False)

    async def run_turn(self) -> HookRun:
        """``reaper serve``'s call every interval: the same turn as the hooks', asked for first
        (it comes back as the turn frees, the hooks a little later). When PostgreSQL cannot be
        reached, the pass runs all the same, to report it unreadable. Never raises."""
        return await self._take_turn_and_run(None, serve=True)

    async def run_now(self, project_id: UUID | None = None) -> PassResult:
        """One whole pass now, turn or not (raises what it cannot report)."""
        _quiet_http_client()
        token = _IN_PASS.set(True)
        sources = await self._sources()
        try:
            return await self._pass(sources, project_id, whole=True)
        finally:
            await self._release(sources)
            _IN_PASS.reset(token)

    async def _take_turn_and_run(self, project_id: UUID | None, *, serve: bool) -> HookRun:
        # Claimed before the first await, so a concurrent caller in the same loop sees it.
        self._running = True
        _quiet_http_client()
        token = _IN_PASS.set(True)
        try:
            return await self._turn_and_run(project_id, serve=serve)
        finally:
            _IN_PASS.reset(token)

    async def _turn_and_run(self, project_id: UUID | None, *, serve: bool) -> HookRun:
        self._next_ask = self._monotonic() + self.interval_seconds  # until the turn says otherwise
        sources: Sources | None = None
        try:
            async with asyncio.timeout(max(self.interval_seconds, 1)):
                sources = await self._sources(broker=False)
                turn: Turn | None = None
                if sources.store is not None:
                    turn = await sources.store.take_turn(TURN, self.interval_seconds, self.holder)
                    self._schedule(turn, SERVE_LEAD_SECONDS if serve else None)
                    if not turn.mine:
                        return HookRun(due=True, turn=turn)
                elif not serve:
                    error = f"the turn could not be asked for: {sources.store_error}"
                    log.warning("queue reap skipped: %s", error)
                    return HookRun(due=True, error=error)
                result = await self._pass(sources, project_id, whole=serve)
                if result.leases.remaining and turn is not None and sources.store is not None:
                    await self._next_turn_at_once(sources.store, turn)
            if any(u.queue is None for u in result.unreadable):
                # Reconnect next time rather than keep a pool pointing at a dead server
                # (forgotten here, closed below). A queue on a node that is down is not that.
                self._kept = None
        except Exception as exc:  # never raised into the worker: logged and returned
            error = scrub(f"{type(exc).__name__}: {exc}") if str(exc) else type(exc).__name__
            if isinstance(exc, TimeoutError):
                error = f"the pass did not finish within {self.interval_seconds} s"
            log.warning("queue reap failed: %s", error)
            self._kept = None  # closed below: the next pass starts afresh
            return HookRun(due=True, error=error)
        finally:
            if sources is not None:
                await self._release(sources)
            self._running = False
        self._log(result, project_id)
        return HookRun(due=True, turn=turn, result=result)

    async def _next_turn_at_once(self, store: JobQueue, turn: Turn) -> None:
        """The pass left expired leases when its lease reap's budget was spent: the turn is
        handed back and asked for again at once, not after the interval (one pass at a time
        still: the next begins once this one has ended)."""
        if await store.hand_back_turn(TURN, turn, self.interval_seconds):
            self._next_ask = self._monotonic()

    def _schedule(self, turn: Turn, lead: float | None) -> None:
        """When to ask again: when the turn frees, plus the jitter (or ``lead``). Counted from
        the answer's arrival, which is after the database measured ``free_in_seconds``: never
        early by the time the ask took."""
        spread = min(self.interval_seconds / 10, MAX_JITTER_SECONDS)
        extra = lead if lead is not None else spread * self._jitter()
        self._next_ask = self._monotonic() + turn.free_in_seconds + extra

    async def _pass(self, sources: Sources, project_id: UUID | None, *, whole: bool) -> PassResult:
        """A whole pass; or, for a hook switched off (``enabled = false``), the lease reap
        alone. ``project_id`` never narrows the pass: every project is measured."""
        enabled = whole or self._settings.queue.reap.enabled
        broker = sources.broker
        if enabled and broker is None:
            broker = sources.broker = open_broker(self._settings)
        return await run_pass(
            self._settings,
            sources if enabled else dataclasses.replace(sources, broker=None),
            mode=Mode.FULL if enabled else Mode.LEASES_ONLY,
            clock=self._clock,
            monotonic=self._monotonic,
        )

    async def _sources(self, *, broker: bool = True) -> Sources:
        if self._kept is not None:
            return self._kept
        if self._connect is not None:
            sources = await self._connect(self._settings)
        else:
            store, error = await open_store(
                self._settings,
                pool_size=self._settings.database.hook_connections,
                pool=self._pool,
                factory=self._factory,
            )
            sources = Sources(store=store, store_error=error)
            if broker:
                sources.broker = open_broker(self._settings)
        if self._settings.database.keep_connections and sources.store is not None:
            self._kept = sources
        return sources

    async def _release(self, sources: Sources) -> None:
        """Close what a pass opened, unless it is kept between passes."""
        if sources is self._kept:
            return
        await _close(sources)

    async def _drop_kept(self) -> None:
        kept, self._kept = self._kept, None
        if kept is not None:
            await _close(kept)

    async def aclose(self) -> None:
        await self._drop_kept()

    @staticmethod
    def _log(result: PassResult, project_id: UUID | None) -> None:
        """One line per pass: INFO when ok with nothing new, WARNING when something new was
        recorded or the pass is not ok (naming the first few)."""
        new = [r.verdict for r in result.surfaced() if r.recorded]
        problems = result.problems()
        said = [f"{p.label} {p.subject}" for p in problems[:3]]
        said += [f"new {v.condition.value} on {v.queue or v.object}" for v in new[:3]]
        more = max(0, len(problems) - 3) + max(0, len(new) - 3)
        log.log(
            logging.WARNING if problems or new else logging.INFO,
            "queue reap %s in %.2f s: %d verdict(s)%s%s%s",
            result.status(),
            result.duration_seconds,
            result.verdict_count,
            f"; {'; '.join(said)}" if said else "",
            f"; and {more} more" if more else "",
            f" (the turn fell to project {project_id}'s worker)" if project_id else "",
        )


async def _close(sources: Sources) -> None:
    try:
        await sources.close()
    except Exception:  # closing a broken connection must not mask the pass's outcome
        log.debug("closing sources failed", exc_info=True)

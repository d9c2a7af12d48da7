"""The idle-loop hook workers import.

A worker that finds no work calls ``await reaper.run_if_due(project_id)``. Not due: it
returns at once, having done no I/O at all. Due: one bounded pass, at most one at a time and
at most one per ``interval_seconds`` in the process; its failure is logged and returned,
never raised into the worker. ``[queue.reap] enabled = false`` switches only this hook off.

    from reaper import QueueReaper

    reaper = QueueReaper.from_config()
    while True:
        if not await claim_and_run_one(project_id):
            await reaper.run_if_due(project_id)
            await wait_for_work()
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from uuid import UUID

from reaper.config import Settings, load_config
from reaper.core.domain import Action
from reaper.errors import scrub
from reaper.reap.result import PassResult
from reaper.reap.run import run_pass, utcnow
from reaper.reap.sources import Sources, open_sources

log = logging.getLogger("reaper.hook")


@dataclass(frozen=True)
class HookRun:
    """What one ``run_if_due`` call did."""

    due: bool
    result: PassResult | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and (self.result is None or self.result.ok)


class QueueReaper:
    """One per worker process. Holds its connections between passes."""

    def __init__(
        self,
        settings: Settings,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        clock: Callable[[], datetime] = utcnow,
        connect: Callable[[Settings], Awaitable[Sources]] = open_sources,
    ) -> None:
        self._settings = settings
        self._connect = connect
        self._monotonic = monotonic
        self._clock = clock
        self._last_started: float | None = None
        self._running = False
        self._sources: Sources | None = None

    @classmethod
    def from_config(
        cls, config_dir: Path | None = None, environ: Mapping[str, str] | None = None
    ) -> QueueReaper:
        """Build from the declared configuration (raises ``ConfigError`` at start-up, where
        a worker should fail loudly, never later inside its loop)."""
        return cls(load_config(config_dir, environ).settings)

    @property
    def interval_seconds(self) -> int:
        return self._settings.queue.reap.interval_seconds

    def is_due(self) -> bool:
        if not self._settings.queue.reap.enabled or self._running:
            return False
        last = self._last_started
        return last is None or self._monotonic() - last >= self.interval_seconds

    async def run_if_due(self, project_id: UUID | None = None) -> HookRun:
        if not self.is_due():
            return HookRun(due=False)
        # Claimed before the first await, so a concurrent caller in the same loop sees it.
        self._running = True
        self._last_started = self._monotonic()
        try:
            result = await self.run_now(project_id)
        except Exception as exc:  # never raised into the worker: logged and returned
            error = scrub(f"{type(exc).__name__}: {exc}") if str(exc) else type(exc).__name__
            if isinstance(exc, TimeoutError):
                error = f"the pass did not finish within {self.interval_seconds} s"
            log.warning("queue reap failed: %s", error)
            return HookRun(due=True, error=error)
        finally:
            self._running = False
        self._log(result)
        return HookRun(due=True, result=result)

    async def run_now(self, project_id: UUID | None = None) -> PassResult:
        """One bounded pass now, due or not (``reaper serve`` calls this every interval).
        A pass never outlives its interval: a worker's idle loop must come back."""
        try:
            async with asyncio.timeout(max(self.interval_seconds, 1)):
                result = await self._pass(project_id)
        except BaseException:
            await self._drop_sources()
            raise
        if result.unreadable:
            # Reconnect next time rather than keep a pool pointing at a dead server.
            await self._drop_sources()
        return result

    async def _pass(self, project_id: UUID | None) -> PassResult:
        if self._sources is None or self._sources.store is None:
            await self._drop_sources()
            self._sources = await self._connect(self._settings)
        sources = self._sources
        return await run_pass(
            self._settings,
            store=sources.store,
            broker=sources.broker,
            project_id=project_id,
            clock=self._clock,
            store_error=sources.store_error,
            broker_error=sources.broker_error,
        )

    async def _drop_sources(self) -> None:
        sources, self._sources = self._sources, None
        if sources is not None:
            try:
                await sources.close()
            except Exception:  # closing a broken connection must not mask the pass's outcome
                log.debug("closing sources failed", exc_info=True)

    async def aclose(self) -> None:
        await self._drop_sources()

    @staticmethod
    def _log(result: PassResult) -> None:
        for entry in result.unreadable:
            log.warning("queue reap could not read %s: %s", entry.source, entry.error)
        for r in result.verdicts:
            v = r.verdict
            if v.action is Action.SURFACE and r.recorded:
                log.warning(
                    "queue.stuck %s %s on %s: measured %s %s (threshold %s)",
                    v.source.value,
                    v.condition.value,
                    v.queue or v.object,
                    v.measured,
                    v.unit.value,
                    v.threshold,
                )
        log.info(
            "queue reap %s in %.2f s: %d verdict(s)",
            "ok" if result.ok else "NOT ok",
            result.duration_seconds,
            len(result.verdicts),
        )

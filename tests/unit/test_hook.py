"""The worker hook: not due means no I/O at all; due means one bounded pass that never
raises into the worker."""

from __future__ import annotations

import asyncio
import inspect
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from reaper.broker.client import ManagementClient
from reaper.config import load_config
from reaper.edges.hook import QueueReaper
from reaper.jobqueue.memory import MemoryJobQueue
from reaper.reap.sources import Sources

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


class CountingStore:
    """The in-memory job queue, counting every call the hook makes to it."""

    def __init__(self) -> None:
        self.calls = 0
        self.inner = MemoryJobQueue(clock=lambda: NOW)

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)
        if name == "close" or not inspect.iscoroutinefunction(method):
            return method

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return await method(*args, **kwargs)

        return counted


def overview_handler(request: httpx.Request) -> httpx.Response:
    if request.url.path == "/api/overview":
        return httpx.Response(
            200,
            json={"product_name": "RabbitMQ", "rabbitmq_version": "4.0.5", "node": "rabbit@x"},
        )
    if request.url.path.startswith("/api/queues"):
        return httpx.Response(200, json={"items": [], "page": 1, "page_count": 1})
    if request.url.path.startswith("/api/policies"):
        return httpx.Response(200, json=[])
    return httpx.Response(200, json=[] if "consumers" in request.url.path else {})


class Harness:
    def __init__(self, handler: Any = overview_handler, **env: str) -> None:
        environ = {"REAPER_QUEUE__REAP__INTERVAL_SECONDS": "60", **env}
        self.settings = load_config(None, environ).settings
        self.http_requests = 0
        self.connects = 0
        self.store = CountingStore()
        self.monotonic = 1000.0
        self.handler = handler

    def transport(self) -> httpx.MockTransport:
        def count(request: httpx.Request) -> httpx.Response:
            self.http_requests += 1
            result: httpx.Response = self.handler(request)
            return result

        return httpx.MockTransport(count)

    async def connect(self, settings: Any) -> Sources:
        self.connects += 1
        client = ManagementClient(
            settings.bus.management_url, "guest", "guest", transport=self.transport()
        )
        return Sources(store=self.store, broker=client)

    def reaper(self) -> QueueReaper:
        return QueueReaper(
            self.settings,
            monotonic=lambda: self.monotonic,
            clock=lambda: NOW,
            connect=self.connect,
        )

    @property
    def io(self) -> int:
        return self.http_requests + self.store.calls + self.connects


@pytest.fixture(autouse=True)
def no_conf_dir(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # The environment alone configures these tests: never ./conf.d
    monkeypatch.chdir(tmp_path)


async def test_not_due_does_no_io_at_all() -> None:
    h = Harness()
    reaper = h.reaper()
    first = await reaper.run_if_due()
    assert first.due and first.result is not None
    io_after_first = h.io
    assert io_after_first > 0
    for step in range(10):
        h.monotonic += 5  # 50 s in all: still inside the 60 s interval
        run = await reaper.run_if_due()
        assert not run.due, step
    assert h.io == io_after_first
    h.monotonic += 15  # now 65 s since the first pass
    assert (await reaper.run_if_due()).due
    assert h.io > io_after_first


async def test_disabled_switches_off_only_the_hook() -> None:
    h = Harness(REAPER_QUEUE__REAP__ENABLED="false")
    reaper = h.reaper()
    assert not (await reaper.run_if_due()).due
    assert h.io == 0
    result = await reaper.run_now()  # the on-demand pass still runs
    assert result.broker is not None
    assert h.io > 0


async def test_one_pass_at_a_time() -> None:
    gate = asyncio.Event()

    def slow(request: httpx.Request) -> httpx.Response:
        return overview_handler(request)

    h = Harness(slow)
    original = h.store.expired_leases

    async def blocked(*args: Any, **kwargs: Any) -> list[Any]:
        await gate.wait()
        return await original(*args, **kwargs)

    h.store.expired_leases = blocked  # type: ignore[method-assign]
    reaper = h.reaper()
    first = asyncio.create_task(reaper.run_if_due())
    await asyncio.sleep(0.05)
    h.monotonic += 3600  # due again by the clock, but a pass is in flight
    second = await reaper.run_if_due()
    assert not second.due
    gate.set()
    assert (await first).due


async def test_a_failing_pass_is_returned_never_raised() -> None:
    h = Harness()

    async def broken(settings: Any) -> Sources:
        raise RuntimeError("boom with password=hunter2")

    reaper = QueueReaper(h.settings, monotonic=lambda: h.monotonic, connect=broken)
    run = await reaper.run_if_due()
    assert run.due and not run.ok
    assert run.error is not None and "boom" in run.error
    assert "hunter2" not in run.error


async def test_an_unreadable_broker_is_reported_not_raised() -> None:
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    h = Harness(down)
    run = await h.reaper().run_if_due()
    assert run.due and run.result is not None and not run.ok
    assert [u.source for u in run.result.unreadable] == ["broker"]

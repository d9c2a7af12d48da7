"""The worker hook: not due means no I/O at all; due means the fleet's turn, asked for in one
statement, and, when it is this worker's, one bounded pass over every project that never raises
into the worker. Over the in-memory job queue; ``tests/integration/test_fleet.py`` proves the
same on PostgreSQL and every broker, with a fleet."""

from __future__ import annotations

import asyncio
import inspect
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from reaper.broker.client import ManagementClient
from reaper.config import load_config
from reaper.core.domain import Condition
from reaper.edges.hook import TURN, QueueReaper
from reaper.reap.sources import Sources
from reaper.testing.memory import JobRow, MemoryJobQueue
from tests.support.leases import add_expired_leases, lease_row

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


class CountingStore:
    """The in-memory job queue, counting every call the hook makes to it (the database's
    clock is ``clock.now``, which a test moves)."""

    def __init__(self, inner: MemoryJobQueue | None = None) -> None:
        self.calls = 0
        self.now = NOW
        self.inner = inner or MemoryJobQueue(clock=lambda: self.now)
        self.closes = 0

    async def close(self) -> None:
        """A pass's connections closed; the database stays."""
        self.closes += 1

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)
        if not inspect.iscoroutinefunction(method):
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
    listing = (
        "consumers" in request.url.path
        or request.url.path.endswith("/channels")
        or request.url.path == "/api/nodes"
    )
    return httpx.Response(200, json=[] if listing else {})


class Harness:
    """One worker's hook over a store it may share with other harnesses (a fleet in memory)."""

    def __init__(
        self,
        handler: Any = overview_handler,
        *,
        shared: MemoryJobQueue | None = None,
        holder: str = "worker-1",
        **env: str,
    ) -> None:
        environ = {"REAPER_QUEUE__REAP__INTERVAL_SECONDS": "60", **env}
        self.settings = load_config(None, environ).settings
        self.http_requests = 0
        self.connects = 0
        self.store = CountingStore(shared)
        self.monotonic = 1000.0
        self.handler = handler
        self.holder = holder

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
            holder=self.holder,
            monotonic=lambda: self.monotonic,
            clock=lambda: NOW,
            jitter=lambda: 0.0,
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


async def test_disabled_leaves_the_lease_reap_running_and_nothing_else() -> None:
    h = Harness(REAPER_QUEUE__REAP__ENABLED="false")
    project = uuid.uuid4()
    expired = h.store.inner.add_job(lease_row(project, "gone", NOW - timedelta(minutes=5), now=NOW))
    stale = h.store.inner.add_job(JobRow(project_id=project, run_after=NOW - timedelta(days=1)))
    run = await h.reaper().run_if_due()
    assert run.due and run.ran and run.ok, run
    assert run.result is not None
    assert h.store.inner.jobs[expired].state == "ready"  # crash recovery never switches off
    assert h.store.inner.jobs[stale].state == "ready"
    read_back = run.result.leases.listing.sample  # the moves the pass read back as it ended
    conditions = {r.verdict.condition for r in (*read_back, *run.result.verdicts)}
    assert conditions == {Condition.LEASE_EXPIRED}  # no stale-ready, nothing of the broker
    assert run.result.broker is None and not run.result.unreadable
    assert h.http_requests == 0
    assert any("lease reap alone" in note for note in run.result.notes)


async def test_disabled_does_not_switch_off_an_on_demand_pass() -> None:
    h = Harness(REAPER_QUEUE__REAP__ENABLED="false")
    result = await h.reaper().run_now()
    assert result.broker is not None
    assert h.http_requests > 0


async def test_the_pass_covers_every_project_whoever_calls() -> None:
    h = Harness()
    mine, orphan = uuid.uuid4(), uuid.uuid4()  # orphan: a project no worker serves
    job = h.store.inner.add_job(
        lease_row(orphan, "gone", NOW - timedelta(minutes=5), now=NOW, attempts=0)
    )
    run = await h.reaper().run_if_due(mine)
    assert run.ran and run.result is not None and not run.result.unreadable, run
    assert h.store.inner.jobs[job].state == "ready"
    (event,) = h.store.inner.ledger[orphan]  # recorded under its own project
    assert event.payload["condition"] == "lease_expired"
    assert mine not in h.store.inner.ledger


async def test_one_whole_pass_per_interval_across_workers() -> None:
    shared = MemoryJobQueue(clock=lambda: first.store.now)
    first = Harness(shared=shared, holder="worker-1")
    second = Harness(shared=shared, holder="worker-2")
    a, b = first.reaper(), second.reaper()
    ran = await a.run_if_due()
    assert ran.ran and ran.turn is not None and ran.turn.mine
    lost = await b.run_if_due()
    assert lost.due and not lost.ran and lost.ok
    assert lost.turn is not None and not lost.turn.mine and lost.turn.taken_by == "worker-1"
    assert lost.turn.free_in_seconds == 60
    # the loser asked for the turn, and did nothing else: no connection, no broker request
    assert (second.store.calls, second.http_requests) == (1, 0)

    # it comes back when the turn frees (by the database's clock), not before
    first.store.now += timedelta(seconds=30)
    second.monotonic += 30
    assert not (await b.run_if_due()).due
    assert second.store.calls == 1
    first.store.now += timedelta(seconds=30)
    second.monotonic += 30
    taken = await b.run_if_due()
    assert taken.ran and taken.turn is not None and taken.turn.mine
    assert shared.turns[TURN][1] == "worker-2"


async def test_a_taker_that_died_holds_the_turn_one_interval_at_most() -> None:
    h = Harness()
    dead = await h.store.inner.take_turn(TURN, 60, "died-mid-pass")
    assert dead.mine
    reaper = h.reaper()
    assert not (await reaper.run_if_due()).ran
    h.store.now += timedelta(seconds=60)
    h.monotonic += 60
    assert (await reaper.run_if_due()).ran


async def test_a_fleet_asking_at_once_runs_one_pass() -> None:
    shared = MemoryJobQueue(clock=lambda: NOW)
    fleet = [Harness(shared=shared, holder=f"worker-{n}") for n in range(16)]
    runs = await asyncio.gather(*(h.reaper().run_if_due() for h in fleet))
    assert sum(run.ran for run in runs) == 1
    assert all(run.error is None for run in runs)
    assert sum(h.http_requests > 0 for h in fleet) == 1


async def test_the_loser_spreads_its_next_ask_with_jitter() -> None:
    shared = MemoryJobQueue(clock=lambda: NOW)
    winner = Harness(shared=shared)
    await winner.reaper().run_if_due()
    loser = Harness(shared=shared, holder="worker-2")
    reaper = QueueReaper(
        loser.settings,
        holder="worker-2",
        monotonic=lambda: loser.monotonic,
        jitter=lambda: 1.0,
        connect=loser.connect,
    )
    await reaper.run_if_due()
    # the turn frees in 60 s; the jitter adds at most a tenth of the interval, and 5 s at most
    assert reaper.seconds_until_due() == 65


async def test_serve_shares_the_turn_and_runs_even_without_the_database() -> None:
    shared = MemoryJobQueue(clock=lambda: NOW)
    worker = Harness(shared=shared)
    await worker.reaper().run_if_due()
    serve = Harness(shared=shared, holder="serve")
    run = await serve.reaper().run_turn()
    assert run.due and not run.ran and run.turn is not None and not run.turn.mine

    async def no_database(settings: Any) -> Sources:
        client = ManagementClient(
            settings.bus.management_url, "guest", "guest", transport=serve.transport()
        )
        return Sources(store=None, store_error="connection refused", broker=client)

    alone = QueueReaper(serve.settings, connect=no_database)
    reported = await alone.run_turn()  # serve reports the database unreadable, it does not skip
    assert reported.ran and reported.result is not None
    assert [u.source for u in reported.result.unreadable] == ["job_queue"]
    hook = await QueueReaper(serve.settings, connect=no_database).run_if_due()
    assert not hook.ran and hook.error is not None and "connection refused" in hook.error


async def test_one_pass_at_a_time() -> None:
    gate = asyncio.Event()

    def slow(request: httpx.Request) -> httpx.Response:
        return overview_handler(request)

    h = Harness(slow)
    original = h.store.reap_leases

    async def blocked(*args: Any, **kwargs: Any) -> Any:
        await gate.wait()
        return await original(*args, **kwargs)

    h.store.reap_leases = blocked  # type: ignore[method-assign]
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


def expired_leases(store: MemoryJobQueue, count: int) -> None:
    add_expired_leases(
        store,
        count,
        now=NOW,
        owner=lambda n: f"worker-{n % 7}",
        expired_ago=lambda n: timedelta(seconds=n % 600 + 1),
    )


async def test_a_pass_that_spent_its_lease_budget_hands_the_next_turn_over_at_once() -> None:
    shared = MemoryJobQueue(clock=lambda: NOW)
    expired_leases(shared, 2000)  # two of the in-memory double's pages
    env = {"REAPER_QUEUE__REAP__LEASE_REAP_BUDGET_SECONDS": "0.5"}
    h = Harness(shared=shared, holder="worker-1", **env)
    other = Harness(shared=shared, holder="worker-2", **env)
    read = h.store.inner._expired_batch

    def a_second_per_batch(*args: Any, **kwargs: Any) -> Any:
        h.monotonic += 1  # each batch read takes a second by the injected clock
        return read(*args, **kwargs)

    h.store.inner._expired_batch = a_second_per_batch  # type: ignore[method-assign]
    reaper, peer = h.reaper(), other.reaper()

    first = await reaper.run_if_due()
    assert first.ran and first.result is not None
    # a full page in 1 s: the budget of 0.5 s is spent, the page's leases moved, 1000 left
    assert first.result.leases.remaining == 1000
    assert sum(1 for j in shared.jobs.values() if j.state == "leased") == 1000
    assert any("1000 more expired lease(s) left" in n for n in first.result.notes)
    assert any("the next turn comes at once" in n for n in first.result.notes)
    # due again at once, without waiting out the interval, and the turn is free for it
    assert reaper.is_due() and reaper.seconds_until_due() == 0
    second = await reaper.run_if_due()
    assert second.ran and second.result is not None and second.result.leases.remaining == 0
    assert not [j for j in shared.jobs.values() if j.state == "leased"]
    # done: the turn is held for the interval again, by this worker, and the peer waits
    assert not reaper.is_due()
    lost = await peer.run_if_due()
    assert lost.due and not lost.ran and lost.turn is not None and not lost.turn.mine


async def test_a_pass_that_moved_every_lease_keeps_the_interval() -> None:
    shared = MemoryJobQueue(clock=lambda: NOW)
    expired_leases(shared, 10)
    h = Harness(shared=shared, REAPER_QUEUE__REAP__LEASE_REAP_BUDGET_SECONDS="1.5")
    reaper = h.reaper()
    ran = await reaper.run_if_due()
    assert ran.ran and ran.result is not None and ran.result.leases.remaining == 0
    assert not reaper.is_due() and reaper.seconds_until_due() == 60

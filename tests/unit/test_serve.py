"""``serve``: the server and its loop, with a fake ``run_once`` (the pass itself is tested
elsewhere against real services; here it only has to return a result or take its time)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest
from prometheus_client import CollectorRegistry

from reaper.core.records import Gate
from reaper.edges.metrics import ReaperMetrics
from reaper.edges.serve import ListenError, parse_listen, serve
from reaper.edges.status_page import PageTarget
from reaper.gates.board import GateBoard
from reaper.jobqueue.port import GateCount
from reaper.reap.leases import LeaseReapOutcome
from reaper.reap.progress import RecordedVerdict, Unreadable
from reaper.reap.result import PassResult
from tests.support.verdicts import broker_finding

REPO = Path(__file__).resolve().parents[2]


def a_pass() -> PassResult:
    now = datetime.now(UTC)
    surfaced = broker_finding("vibey.work", trusted=True)
    return PassResult(
        dry_run=False,
        started_at=now,
        finished_at=now,
        broker=None,
        verdicts=tuple((RecordedVerdict(surfaced, True),)),
    )


@dataclass
class Passes:
    """A fake ``run_once``: each pass waits for ``release`` (when given) and counts itself."""

    release: asyncio.Event | None = None
    started: int = 0
    finished: int = 0
    fail: bool = False
    #: Return a pass that ran but is not ok (the broker unreadable).
    not_ok: bool = False
    first_started: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self) -> PassResult:
        self.started += 1
        self.first_started.set()
        if self.release is not None:
            await self.release.wait()
        if self.fail:
            raise RuntimeError("boom at postgresql://reaper:hunter2@db/queue")
        self.finished += 1
        if self.not_ok:
            return replace(a_pass(), unreadable=(Unreadable("broker", "connection refused"),))
        return a_pass()


@dataclass
class Running:
    task: asyncio.Task[int]
    stop: asyncio.Event
    metrics: ReaperMetrics
    client: httpx.AsyncClient


async def wait_until(predicate: Callable[[], Any]) -> None:
    """Poll: the predicates read state the server and the loop update, with no event to await."""
    async with asyncio.timeout(5):
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


@pytest.fixture
async def start() -> AsyncIterator[Callable[..., Awaitable[Running]]]:
    running: list[Running] = []

    async def _start(run_once: Passes, interval: float = 60.0, **options: Any) -> Running:
        stop = asyncio.Event()
        metrics = ReaperMetrics(CollectorRegistry())
        bound: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(
            serve(
                "127.0.0.1:0",
                interval,
                run_once,
                metrics,
                stop=stop,
                on_listening=lambda host, port: bound.set_result(port),
                **options,
            )
        )
        port = await asyncio.wait_for(bound, 5)
        client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5)
        running.append(Running(task, stop, metrics, client))
        return running[-1]

    yield _start
    for r in running:
        r.stop.set()
        await r.client.aclose()
        if not r.task.done():
            r.task.cancel()
        await asyncio.gather(r.task, return_exceptions=True)


# --------------------------------------------------------------------------- --listen


@pytest.mark.parametrize(
    ("listen", "expected"),
    [
        ("127.0.0.1:9464", ("127.0.0.1", 9464)),
        ("0.0.0.0:80", ("0.0.0.0", 80)),
        ("localhost:0", ("localhost", 0)),
        ("[::1]:9464", ("::1", 9464)),
    ],
)
def test_parse_listen(listen: str, expected: tuple[str, int]) -> None:
    assert parse_listen(listen) == expected


@pytest.mark.parametrize(
    "listen", ["9464", "127.0.0.1", "127.0.0.1:", ":9464", "host:port", "h:70000", "::1:9464"]
)
def test_a_bad_listen_is_a_clear_error(listen: str) -> None:
    with pytest.raises(ListenError, match=r"--listen .*(HOST:PORT|port must be|brackets)"):
        parse_listen(listen)


async def test_a_port_in_use_is_a_clear_error(start: Callable[..., Awaitable[Running]]) -> None:
    running = await start(Passes())
    port = running.client.base_url.port
    with pytest.raises(ListenError, match=f"cannot listen on 127.0.0.1:{port}: .*in use"):
        await serve(f"127.0.0.1:{port}", 60, Passes(), ReaperMetrics(CollectorRegistry()))


# --------------------------------------------------------------------------- the server


async def test_healthz_is_503_before_the_first_pass_and_200_after(
    start: Callable[..., Awaitable[Running]],
) -> None:
    passes = Passes(release=asyncio.Event())
    running = await start(passes)
    await asyncio.wait_for(passes.first_started.wait(), 5)

    before = await running.client.get("/healthz")
    assert before.status_code == 503
    assert before.json()["status"] == "starting"
    # /metrics answers while the pass is still busy on the loop
    assert (await running.client.get("/metrics")).status_code == 200

    assert passes.release is not None
    passes.release.set()
    await wait_until(lambda: passes.finished == 1)
    await wait_until(lambda: running.metrics.last_result is not None)
    after = await running.client.get("/healthz")
    assert after.status_code == 200
    body = after.json()
    assert (body["status"], body["last_pass"]) == ("alive", "ok")
    assert body["last_pass_ok"] is True
    assert 0 <= body["last_pass_age_seconds"] < 5
    assert after.text.count("\n") == 1


async def test_healthz_is_liveness_and_never_calls_a_pass_ok_that_was_not(
    start: Callable[..., Awaitable[Running]],
) -> None:
    passes = Passes(not_ok=True)
    running = await start(passes)
    await wait_until(lambda: running.metrics.last_result is not None)

    response = await running.client.get("/healthz")

    assert response.status_code == 200  # the loop is alive: that is what liveness asks
    body = response.json()
    assert (body["status"], body["last_pass"], body["last_pass_ok"]) == ("alive", "not ok", False)
    assert "ok" not in (body["status"], body["last_pass"])


GATE = Gate(
    id=UUID("3f2a9c1e-0000-4000-8000-000000000001"),
    project_id=UUID("00000000-0000-4000-8000-0000000000aa"),
    job_id=UUID("00000000-0000-4000-8000-0000000000bb"),
    kind="delivery_exhausted",
    prompt="?",
    choices=("retry",),
    answer=None,
    answered_at=None,
    identity=None,
    created_at=datetime(2026, 1, 1, tzinfo=UTC),
    job_kind="<script>alert(1)</script>",
)

TARGET = PageTarget(
    database="postgresql://reaper@db/queue",
    vhost="/",
    management_urls=("http://rabbit:15672",),
    owned_queue_pattern=r"^vibey\\.",
    dead_letter_queue_pattern=r"\\.dead$",
)


async def test_the_gate_gauges_and_the_page_follow_the_gates_read_after_each_pass(
    start: Callable[..., Awaitable[Running]],
) -> None:
    now = GATE.created_at + timedelta(hours=2)

    async def gates() -> GateBoard:
        return GateBoard(now, (GateCount(GATE.kind, 1, GATE.created_at),), (GATE,))

    running = await start(Passes(), gates=gates, target=TARGET)
    registry = running.metrics.registry
    await wait_until(lambda: registry.get_sample_value("reaper_gates_open", {"kind": GATE.kind}))

    assert registry.get_sample_value("reaper_gates_open", {"kind": "bus_dead_lettered"}) == 0
    age = registry.get_sample_value("reaper_gate_oldest_open_age_seconds", {"kind": GATE.kind})
    assert age is not None and 7200 <= age < 7260
    metrics_text = (await running.client.get("/metrics")).text
    assert "_created" not in metrics_text
    page = await running.client.get("/")
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert "<code>3f2a9c1e</code>" in page.text
    assert "reaper gates answer 3f2a9c1e --choice retry" in page.text
    assert "reaper gates answer 3f2a9c1e --choice cancel" in page.text
    assert "<script" not in page.text and "&lt;script&gt;" in page.text
    assert '<a href="/metrics">' in page.text and '<a href="/healthz">' in page.text
    assert "<form" not in page.text and "src=" not in page.text


class PassesWithBoard(Passes):
    """Passes that return the board they read, as a real pass does."""

    board: GateBoard | None = None

    async def __call__(self) -> PassResult:
        result = await super().__call__()
        return replace(result, gates=replace(result.gates, board=self.board))


async def test_the_board_a_pass_read_is_kept_and_never_read_again(
    start: Callable[..., Awaitable[Running]],
) -> None:
    now = GATE.created_at + timedelta(hours=2)
    reads_after = 0

    async def gates() -> GateBoard:
        nonlocal reads_after
        reads_after += 1
        return GateBoard(now, (), ())

    passes = PassesWithBoard()
    passes.board = GateBoard(now, (GateCount(GATE.kind, 1, GATE.created_at),), (GATE,))
    running = await start(passes, gates=gates, target=TARGET)
    registry = running.metrics.registry
    await wait_until(lambda: registry.get_sample_value("reaper_gates_open", {"kind": GATE.kind}))

    assert reads_after == 0  # the pass's own board: the database is not opened again
    assert "<code>3f2a9c1e</code>" in (await running.client.get("/")).text


async def test_metrics_shows_the_verdict_metrics_after_the_first_pass(
    start: Callable[..., Awaitable[Running]],
) -> None:
    passes = Passes()
    running = await start(passes)
    await wait_until(lambda: running.metrics.last_result is not None)
    response = await running.client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert (
        'reaper_verdicts_total{action="surface",condition="holder_gone",dry_run="false",'
        'source="broker"} 1.0' in text
    )
    assert 'reaper_conditions_open{condition="holder_gone",source="broker"} 1.0' in text
    assert "reaper_last_pass_ok 1.0" in text
    assert (await running.client.get("/nope")).status_code == 404


async def test_a_pass_runs_every_interval_and_healthz_turns_stale(
    start: Callable[..., Awaitable[Running]],
) -> None:
    passes = Passes()
    running = await start(passes, interval=0.05)
    await wait_until(lambda: passes.finished >= 3)
    # the next pass hangs: three intervals later the last completed pass is stale
    passes.release = asyncio.Event()
    await wait_until(lambda: passes.started > passes.finished)
    await asyncio.sleep(0.3)
    stale = await running.client.get("/healthz")
    assert stale.status_code == 503
    assert stale.json()["status"] == "stale"
    passes.release.set()


async def test_a_failing_pass_is_logged_and_the_loop_goes_on(
    start: Callable[..., Awaitable[Running]], caplog: pytest.LogCaptureFixture
) -> None:
    passes = Passes(fail=True)
    running = await start(passes, interval=0.05)
    await wait_until(lambda: passes.started >= 3)
    registry = running.metrics.registry
    assert registry.get_sample_value("reaper_last_pass_ok") == 0
    assert (registry.get_sample_value("reaper_passes_total", {"result": "error"}) or 0) >= 2
    assert "pass failed" in caplog.text
    assert "hunter2" not in caplog.text
    assert not running.task.done()

    passes.fail = False
    await wait_until(lambda: registry.get_sample_value("reaper_last_pass_ok") == 1)


async def test_stop_lets_the_pass_in_flight_finish_then_returns_0(
    start: Callable[..., Awaitable[Running]],
) -> None:
    passes = Passes(release=asyncio.Event())
    running = await start(passes)
    await asyncio.wait_for(passes.first_started.wait(), 5)
    running.stop.set()
    await asyncio.sleep(0.2)
    assert not running.task.done()  # still waiting for the pass, not cut in half

    assert passes.release is not None
    passes.release.set()
    assert await asyncio.wait_for(running.task, 5) == 0
    assert passes.finished == 1
    assert passes.started == 1
    with pytest.raises(httpx.ConnectError):
        await running.client.get("/metrics")  # the server is closed


SERVE_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from datetime import UTC, datetime
    from prometheus_client import CollectorRegistry
    from reaper.edges.metrics import ReaperMetrics
    from reaper.edges.serve import serve
    from reaper.reap.result import PassResult

    async def run_once():
        print("pass started", flush=True)
        await asyncio.sleep(1.0)
        now = datetime.now(UTC)
        print("pass finished", flush=True)
        return PassResult(
            dry_run=False, started_at=now, finished_at=now, broker=None, verdicts=()
        )

    def listening(host, port):
        print(f"listening {port}", flush=True)

    code = asyncio.run(serve("127.0.0.1:0", 60, run_once, ReaperMetrics(CollectorRegistry()),
                             on_listening=listening))
    print("returned", code, flush=True)
    sys.exit(code)
    """
)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_mid_pass_finishes_the_pass_and_exits_0(sig: signal.Signals) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE_SCRIPT],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline().strip(), proc.stdout.readline().strip()]
        assert lines[0].startswith("listening "), lines
        assert lines[1] == "pass started", lines
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert out.splitlines() == ["pass finished", "returned 0"], err


async def test_a_pass_that_left_expired_leases_is_followed_by_the_next_at_once(
    start: Callable[..., Awaitable[Running]],
) -> None:
    left = [5, 0]  # the first pass's lease reap spent its budget with 5 leases left

    class Leftover(Passes):
        async def __call__(self) -> PassResult:
            result = await super().__call__()
            remaining = left.pop(0) if left else 0
            return replace(result, leases=LeaseReapOutcome(remaining=remaining))

    passes = Leftover()
    await start(passes, interval=3600.0)
    # the second pass comes at once, not an hour later; the third waits out the interval
    await wait_until(lambda: passes.finished >= 2)
    await asyncio.sleep(0.2)
    assert passes.started == 2

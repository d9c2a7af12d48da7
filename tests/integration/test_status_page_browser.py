"""``reaper serve``'s status page in a real headless Chromium (Debian's ``chromium``), on one
broker: a real pass parks a poison job and dead letters; once the letters are answered, the
page shows the open poison gate's short id and its commands, the owned queues with their
counts and bounds, and says the dead-letter queue is safe to clear, with the command a person
runs. It refreshes itself, says durations as a person does, shows a hostile queue name
escaped, and writes nothing. Its screenshot is kept in ``build/artefacts/`` (git-ignored)."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from reaper.config import Settings
from reaper.edges.commands import clear_notes, read_board
from reaper.edges.metrics import ReaperMetrics
from reaper.edges.serve import serve
from reaper.edges.status_page import page_target
from reaper.gates.answering import answer_gate
from reaper.gates.ids import short_id
from reaper.jobqueue.port import GateFilter
from reaper.jobqueue.postgres import PostgresStore
from reaper.reap.result import PassResult
from reaper.reap.run import reap_once
from reaper.reap.sources import open_sources
from tests.support.dead_letters import (
    DLQ,
    dead_letter_through,
    parked_after_passes,
    settings_for,
    wait_for_depth,
)
from tests.support.invariants import read_bodies
from tests.support.services import BrokerUnderTest, on_one_broker
from tests.support.store import insert_jobs, leased

#: The page is the subject; parking dead letters on every version is test_dead_letters_live's.
pytestmark = [pytest.mark.broker, pytest.mark.postgres, on_one_broker]

#: Flags for a headless run that reaches nothing but the page (a fresh profile each time).
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


def dump_dom(url: str, profile: Path) -> str:
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("chromium is not installed: run scripts/services (Debian's chromium package)")
    done = subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


#: Where the page's screenshot is kept for a person to look at (git-ignored).
ARTEFACTS = Path(__file__).resolve().parents[2] / "build" / "artefacts"
#: An owned queue whose name would clear a terminal and reverse text: shown escaped.
HOSTILE = "vibey.jobs.\x1b[2Jwipe\u202eevil"


def screenshot(url: str, profile: Path, path: Path) -> Path:
    """The page as a person sees it, 1400 px wide, saved to ``path``."""
    chromium = shutil.which("chromium")
    assert chromium is not None
    path.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--hide-scrollbars",
         "--window-size=1400,1500", f"--screenshot={path}", url],
        capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and path.stat().st_size > 10_000, done.stderr[-2000:]
    return path


@pytest.fixture
def settings(broker: BrokerUnderTest, pg_dsn: str, tmp_path: Path) -> Settings:
    config_dir = tmp_path / "conf.d"
    config_dir.mkdir()
    return settings_for(broker, pg_dsn, config_dir)


async def test_the_status_page_shows_what_waits_in_a_real_browser(
    broker: BrokerUnderTest,
    settings: Settings,
    store: PostgresStore,
    pg_dsn: str,
    tmp_path: Path,
) -> None:
    poison = leased(uuid.uuid4(), attempts=7, max_attempts=7)
    await insert_jobs(pg_dsn, [replace(poison, kind="render.video")])
    broker.declare_queue(DLQ, queue_type="quorum")
    broker.declare_queue(
        "vibey.jobs.render",
        queue_type="quorum",
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": DLQ},
    )
    broker.declare_queue(HOSTILE)
    for n in range(3):
        broker.publish("vibey.jobs.render", f'{{"n": {n}}}')
    broker.publish(HOSTILE, "{}")
    dead_letter_through(broker, DLQ, ['{"task": 1}', "not json"])
    await wait_for_depth(broker, DLQ, 2)
    await parked_after_passes(settings, DLQ, 2)
    sources = await open_sources(settings, broker=False)
    try:
        for gate in await store.list_gates(GateFilter(kind="bus_dead_lettered")):
            await answer_gate(sources, settings, gate.id, "dismiss", answered_by="ana")
    finally:
        await sources.close()
    [poison_gate] = await store.list_gates(GateFilter(kind="delivery_exhausted"))
    short = short_id(poison_gate.id)
    purge = f"rabbitmqctl purge_queue {DLQ} -p {broker.vhost}"
    # the text report says the same as the page
    notes = clear_notes(settings, await reap_once(settings))
    assert notes == [
        f"Safe to clear: {DLQ} (2 letter(s), every one parked and answered): `{purge}` (an act "
        "left to you: the reaper never clears a queue)"
    ]

    async def one_pass() -> PassResult:
        return await reap_once(settings)

    metrics = ReaperMetrics(CollectorRegistry())
    stop = asyncio.Event()
    bound: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        serve(
            "127.0.0.1:0",
            60,
            one_pass,
            metrics,
            stop=stop,
            on_listening=lambda host, port: bound.set_result(port),
            gates=lambda: read_board(settings),
            target=page_target(settings),
        )
    )
    try:
        port = await asyncio.wait_for(bound, 10)
        registry = metrics.registry
        open_poison = {"kind": "delivery_exhausted"}
        async with asyncio.timeout(60):
            # the board is read on the serve loop after its pass: poll the gauge it sets
            while registry.get_sample_value("reaper_gates_open", open_poison) != 1:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        url = f"http://127.0.0.1:{port}/"
        dom = await asyncio.to_thread(dump_dom, url, tmp_path / "profile")
        shot = ARTEFACTS / f"status-page-rabbitmq-{broker.version}.png"
        await asyncio.to_thread(screenshot, url, tmp_path / "profile-shot", shot)
        print(f"status page screenshot: {shot}")
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)

    assert "<title>queue-reaper status</title>" in dom
    assert f"<code>{short}</code>" in dom
    assert f"reaper gates answer {short} --choice retry" in dom
    assert f"reaper gates answer {short} --choice cancel" in dom
    assert "&quot;render.video&quot;" in dom or '"render.video"' in dom
    assert "Safe to clear" in dom and purge in dom
    assert "<script" not in dom and "<form" not in dom
    # it refreshes itself, and says how often
    assert '<meta http-equiv="refresh" content="60">' in dom and "refreshes every 60 s" in dom
    assert "NOT OK" not in dom  # the scenario is a healthy one: its findings are amber
    # durations as a person says them, short ids: no raw seconds, no whole gate id
    assert not re.search(r"\d+\.\d{2,} (seconds|against)", dom)
    assert str(poison_gate.id) not in dom
    assert re.search(r"last pass \d+ s ago", dom)
    # the owned queues at a glance: counts, the bound in force, the verdict
    render = dom[dom.index("<code>vibey.jobs.render</code>") :].split("</tr>")[0]
    assert re.findall(r"<td class=\"num\">(\d+)</td>", render) == ["3", "0", "0"], render
    assert "delivery limit" in render and ">ok<" in render
    # a hostile name is shown escaped, never raw
    assert "vibey.jobs.\\x1b[2Jwipe\\u202eevil" in dom
    assert "\x1b" not in dom and "\u202e" not in dom
    # the dead-letter queue: its letters parked and answered, safe to clear with the command
    letters = dom[dom.index(f"<code>{DLQ}</code></td>") :].split("</tr>")[0]
    assert re.findall(r"<td class=\"num\">(\d+)</td>", letters) == ["2", "2", "2"], letters
    assert "Last passes" in dom
    assert registry.get_sample_value("reaper_gates_open", {"kind": "bus_dead_lettered"}) == 0
    # the page says the queue may be cleared; the reaper never clears it
    assert len(read_bodies(broker, DLQ)) == 2

"""Every Python block of the README runs as written, against a real database and broker.

A block may call the two things a worker brings itself, ``claim_and_run_one`` and
``wait_for_work``; the test supplies them (no work to claim; the second wait ends the loop). A
block that defines ``async def drive(...)`` is driven for two turns of its loop."""

from __future__ import annotations

import asyncio
import inspect
import re
import uuid
from pathlib import Path

import pytest

from reaper.jobqueue.postgres import PostgresStore
from tests.conftest import BrokerUnderTest

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)

on_one_broker = pytest.mark.parametrize(
    "broker_server", ["4.3"], indirect=True, ids=["rabbitmq-4.3"]
)


class LoopEnded(Exception):
    """Ends a worker's loop after it has gone round twice."""


def test_the_readme_has_python_blocks() -> None:
    assert BLOCKS, "README.md shows no Python block"


@on_one_broker
@pytest.mark.parametrize("block", BLOCKS, ids=[f"block-{i}" for i in range(len(BLOCKS))])
async def test_a_readme_block_runs_as_written(
    block: str,
    broker: BrokerUnderTest,
    pg_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(README.parent)  # the block reads ./conf.d, as it would in a checkout
    monkeypatch.setenv("REAPER_DATABASE__DSN", pg_dsn)
    monkeypatch.setenv("REAPER_BUS__MANAGEMENT_URL", broker.management_url)
    monkeypatch.setenv("REAPER_BUS__VHOST", broker.vhost)
    waits = 0
    claims: list[object] = []

    async def claim_and_run_one(*args: object) -> bool:
        claims.append(args)
        return False

    async def wait_for_work(*args: object) -> None:
        nonlocal waits
        waits += 1
        if waits == 2:
            raise LoopEnded

    namespace: dict[str, object] = {
        "claim_and_run_one": claim_and_run_one,
        "wait_for_work": wait_for_work,
    }
    code = compile(block, f"README.md block {BLOCKS.index(block)}", "exec", flags=0x2000)
    result = eval(code, namespace)  # top-level await allowed (PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if inspect.iscoroutine(result):
        await result
    drive = namespace.get("drive")
    if inspect.iscoroutinefunction(drive):
        params = inspect.signature(drive).parameters
        with pytest.raises(LoopEnded):
            await asyncio.wait_for(drive(*[uuid.uuid4() for _ in params]), 60)
        assert len(claims) == 2
    store = await PostgresStore.connect(pg_dsn)
    await store.close()  # the block's database is still there and usable

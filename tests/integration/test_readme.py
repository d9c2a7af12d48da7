"""Every Python block of the README runs as written, against a real database and broker, and
so does its quick start, command by command.

A block may call the two things a worker brings itself, ``claim_and_run_one`` and
``wait_for_work``; the test supplies them (no work to claim) unless the block defines its own,
which then run as written. Either way the test counts the claims and ends the loop at the
second wait: a block that defines ``async def drive(...)`` is driven for two turns of its
loop."""

from __future__ import annotations

import asyncio
import inspect
import os
import re
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from reaper.jobqueue.postgres import PostgresStore
from tests.support.services import BrokerUnderTest, on_one_broker

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


class LoopEnded(Exception):
    """Ends a worker's loop after it has gone round twice."""


def _count_the_block_s_own(
    namespace: dict[str, object],
    ours_claim: object,
    ours_wait: object,
    claims: list[object],
) -> None:
    """Where the block defines its own claim and wait, they run as written, counted, and the
    second wait ends the loop."""
    theirs_claim, theirs_wait = namespace["claim_and_run_one"], namespace["wait_for_work"]
    if theirs_claim is not ours_claim:
        assert inspect.iscoroutinefunction(theirs_claim)

        async def counted_claim(*args: object) -> object:
            claims.append(args)
            return await theirs_claim(*args)  # type: ignore[operator]

        namespace["claim_and_run_one"] = counted_claim
    if theirs_wait is not ours_wait:
        assert inspect.iscoroutinefunction(theirs_wait)
        waited = 0

        async def counted_wait(*args: object) -> None:
            nonlocal waited
            waited += 1
            if waited == 2:
                raise LoopEnded
            await theirs_wait(*args)  # type: ignore[operator]

        namespace["wait_for_work"] = counted_wait


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
    _count_the_block_s_own(namespace, claim_and_run_one, wait_for_work, claims)
    drive = namespace.get("drive")
    if inspect.iscoroutinefunction(drive):
        params = inspect.signature(drive).parameters
        with pytest.raises(LoopEnded):
            await asyncio.wait_for(drive(*[uuid.uuid4() for _ in params]), 60)
        assert len(claims) == 2
    store = await PostgresStore.connect(pg_dsn)
    await store.close()  # the block's database is still there and usable


# --------------------------------------------------------------------------- the quick start

QUICK_START = re.search(
    r"## Quick start\n.*?```sh\n(.*?)```", README.read_text(encoding="utf-8"), re.S
)


def _command(line: str) -> str:
    return line.split("  #", 1)[0].strip()


@on_one_broker
async def test_the_quick_start_runs_as_written(
    broker: BrokerUnderTest, pg_empty_dsn: str, tmp_path: Path
) -> None:
    """Every command of the quick start, in order, on a fresh database and vhost, each exiting
    0; the variables it exports are the ones set here, pointing at the test's services."""
    assert QUICK_START is not None, "README.md has no quick start block"
    lines = [_command(line) for line in QUICK_START.group(1).splitlines() if line.strip()]
    assert lines[0].startswith("pip install queue-reaper")  # installed already: the package
    password = tmp_path / "rabbitmq-password"
    password.write_text(broker.password + "\n")
    ours = {
        "REAPER_DATABASE__DSN": pg_empty_dsn,
        "REAPER_BUS__MANAGEMENT_URL": broker.management_url,
        "REAPER_BUS__VHOST": broker.vhost,
        "REAPER_BUS__USERNAME": broker.username,
        "REAPER_BUS__PASSWORD_FILE": str(password),
    }
    exported = [
        line.removeprefix("export ").split("=", 1)[0]
        for line in lines
        if line.startswith("export ")
    ]
    assert exported == list(ours)
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("REAPER_")}
    env.update(ours, PYTHONPATH=str(README.parent))
    commands = [line for line in lines if line.startswith("reaper ")]
    assert [c.split()[1] for c in commands] == ["db", "doctor", "reap", "reap"]

    async def reaper(*argv: str) -> subprocess.CompletedProcess[str]:
        """``python -m reaper ARGV`` in a process of its own, with the quick start's exports."""
        return await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "reaper", *argv],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    for command in commands:
        done = await reaper(*shlex.split(command)[1:])
        # As the README says: on a broker where the reaper never ran, the first audit lists
        # the policies it would create and stays ok; a planned write is not a failure.
        if command == "reaper reap --dry-run":
            assert "Would do" in done.stdout and "WouldCreate" in done.stdout, done.stdout
        assert done.returncode == 0, f"{command}: {done.stdout}{done.stderr}"
    assert "0 failed: ready" in (await reaper("doctor")).stdout

"""Real reaper processes for the proof tests: the environment that points one at a test's database
and vhost, and :func:`run_reaper`, which can kill it at a chosen moment."""

from __future__ import annotations

import asyncio
import io
import json
import multiprocessing
import os
import signal
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reaper.edges.cli import main as reaper_main
from tests.support.invariants.expectation import KILL_POLL_SECONDS, PACKAGE_ROOT
from tests.support.services import BrokerUnderTest

#: Reaper processes are forked from a server that has imported the reaper once: each is still
#: a process of its own (its connections, its exit code, SIGKILL), without the 0.7 to 0.9
#: CPU-seconds of imports that every ``python -m reaper`` start pays (measured; the suite starts
#: a few hundred). A run under another program (``prefix``) is started as a command.
_FORKS = multiprocessing.get_context("forkserver")
_FORKS.set_forkserver_preload(["reaper.edges.cli"])


def reaper_env(
    broker: BrokerUnderTest | None,
    dsn: str,
    config_dir: Path,
    *,
    management_url: str | None = None,
    **overrides: str,
) -> dict[str, str]:
    """The environment of a real ``reaper`` process pointed at this test's database and vhost:
    environment only (``config_dir`` is an empty directory), every other ``REAPER_`` variable of
    the test's own environment removed. ``overrides``: more ``REAPER_*`` variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REAPER_")}
    # the package under test, not whichever checkout is installed (editable) elsewhere
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [PACKAGE_ROOT, env.get("PYTHONPATH")]))
    env.update(
        {
            "REAPER_CONFIG_DIR": str(config_dir),
            "REAPER_DATABASE__DSN": dsn,
            "REAPER_QUEUE__REAP__POLICY_VERIFY_WAIT_SECONDS": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    if broker is not None:
        env.update(
            {
                "REAPER_BUS__MANAGEMENT_URL": management_url or broker.management_url,
                "REAPER_BUS__VHOST": broker.vhost,
                "REAPER_BUS__USERNAME": broker.username,
                "REAPER_BUS__PASSWORD": broker.password,
            }
        )
    env.update(overrides)
    return env


@dataclass
class Run:
    """One real ``reaper reap --json`` process."""

    returncode: int | None
    killed: bool
    seconds: float
    report: dict[str, Any] | None
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.report is not None and bool(self.report["ok"])

    def ok_on(self, broker: BrokerUnderTest) -> bool:
        """``ok`` on every version: what a version cannot enforce (4.3's classic queues,
        ``NotEnforced``) is a finding, not a failed pass."""
        return self.ok

    def describe(self) -> str:
        if self.report is None:
            return f"exit {self.returncode}, no report; stderr: {self.stderr[-2000:]}"
        r = self.report
        # a policy that did not verify says why: its reason, failing queues and detail
        unverified = [
            (p["name"], p.get("reason"), p.get("queues_failing"), p.get("detail"))
            for p in r["policies"]
            if p["verified"] is False
        ]
        # the pass's own reasons first: a long log may be cut after a few hundred characters
        problems = [(p["kind"], p["subject"], p["detail"][:300]) for p in r.get("problems", ())]
        return (
            f"exit {self.returncode}, ok {r['ok']}, problems {problems}, "
            f"unreadable {r['unreadable']}, "
            f"policies {[(p['name'], p['action'], p['verified']) for p in r['policies']]}, "
            f"not verified {unverified}, "
            f"dead_letters {r['dead_letters']}, notes {r['notes'][:6]}"
        )


async def run_reaper(
    env: dict[str, str],
    workdir: Path,
    *,
    kill_after: float | None = None,
    kill_when: Callable[[], Awaitable[bool]] | None = None,
    limit_seconds: float = 180.0,
    args: Sequence[str] = ("reap", "--json"),
    prefix: Sequence[str] = (),
) -> Run:
    """Run the reaper's command line (``reap --json``) in a process of its own, forked from
    :data:`_FORKS`, to its end, or SIGKILL it: ``kill_after`` seconds after it was started, or
    as soon as ``kill_when()`` (polled every few milliseconds) answers True, if it is still
    running then. ``prefix`` runs ``python -m reaper`` under another program (``faketime``).
    Its output goes to files, so a large report never blocks it on a pipe."""
    if not prefix:
        return await _run_forked(env, workdir, kill_after, kill_when, limit_seconds, args)
    out, err = _output_files(workdir)
    with out, err:
        started = time.monotonic()
        process = await asyncio.create_subprocess_exec(
            *prefix,
            sys.executable,
            "-m",
            "reaper",
            *args,
            stdout=out,
            stderr=err,
            env=env,
            cwd=workdir,
        )
        killed = False
        deadline = started + (kill_after if kill_after is not None else limit_seconds)
        while process.returncode is None:
            wait = min(KILL_POLL_SECONDS, max(0.0, deadline - time.monotonic()))
            try:
                await asyncio.wait_for(process.wait(), wait)
                break
            except TimeoutError:
                pass
            expired = time.monotonic() >= deadline
            if expired and kill_after is None:
                process.kill()
                await process.wait()
                raise AssertionError(f"reaper ran past {limit_seconds} s") from None
            if expired or (kill_when is not None and await kill_when()):
                if process.returncode is None:
                    process.send_signal(signal.SIGKILL)
                    killed = True
                await process.wait()
        seconds = time.monotonic() - started
    return _finished(process.returncode, killed, seconds, out.name, err.name)


async def _run_forked(
    env: dict[str, str],
    workdir: Path,
    kill_after: float | None,
    kill_when: Callable[[], Awaitable[bool]] | None,
    limit_seconds: float,
    args: Sequence[str],
) -> Run:
    """:func:`run_reaper` in a process forked by :data:`_FORKS`."""
    out, err = _output_files(workdir)
    out.close()
    err.close()
    started = time.monotonic()
    process = _FORKS.Process(
        target=_as_python_m_reaper, args=(list(args), env, str(workdir), out.name, err.name)
    )
    process.start()
    killed = False
    deadline = started + (kill_after if kill_after is not None else limit_seconds)
    while process.exitcode is None:
        await asyncio.sleep(min(KILL_POLL_SECONDS, max(0.0, deadline - time.monotonic())))
        if process.exitcode is not None:
            break
        expired = time.monotonic() >= deadline
        if expired and kill_after is None:
            process.kill()
            process.join()
            raise AssertionError(f"reaper ran past {limit_seconds} s")
        if expired or (kill_when is not None and await kill_when()):
            if process.exitcode is None:
                process.kill()  # SIGKILL
                killed = True
            process.join()
    seconds = time.monotonic() - started
    returncode = process.exitcode
    process.close()
    return _finished(returncode, killed, seconds, out.name, err.name)


def _as_python_m_reaper(
    args: list[str], env: dict[str, str], cwd: str, out_name: str, err_name: str
) -> None:
    """In the forked process: what ``python -m reaper ARGS`` would run with ``env`` in ``cwd``,
    writing to the two files, unbuffered as ``PYTHONUNBUFFERED`` asks."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    for name, fd in ((out_name, 1), (err_name, 2)):
        opened = os.open(name, os.O_WRONLY | os.O_APPEND)
        os.dup2(opened, fd)
        os.close(opened)
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    sys.stdout = _text_stream(1, unbuffered, "strict")
    sys.stderr = _text_stream(2, unbuffered, "backslashreplace")
    sys.exit(reaper_main(args))


def _text_stream(fd: int, unbuffered: bool, errors: str) -> io.TextIOWrapper:
    raw = io.FileIO(fd, "w", closefd=False)
    if unbuffered:
        return io.TextIOWrapper(raw, encoding="utf-8", errors=errors, write_through=True)
    return io.TextIOWrapper(io.BufferedWriter(raw), encoding="utf-8", errors=errors)


def _finished(
    returncode: int | None, killed: bool, seconds: float, out_name: str, err_name: str
) -> Run:
    """The run, its output files read (and removed): the report unless it was killed."""
    text, stderr = _collect(out_name, err_name)
    report = None
    if not killed:
        try:
            report = json.loads(text)
        except ValueError:
            report = None
    return Run(returncode, killed, seconds, report, stderr)


def _output_files(workdir: Path) -> tuple[Any, Any]:
    workdir.mkdir(parents=True, exist_ok=True)
    name = uuid.uuid4().hex[:8]
    return (workdir / f"{name}.out").open("wb"), (workdir / f"{name}.err").open("wb")


def _collect(out_name: str, err_name: str) -> tuple[str, str]:
    out_path, err_path = Path(out_name), Path(err_name)
    text, stderr = out_path.read_text(), err_path.read_text()
    out_path.unlink()
    err_path.unlink()
    return text, stderr

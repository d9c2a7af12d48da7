"""Shared by the benchmarks: a scratch database of their own (created, cloned, dropped) and
the timing helpers. Benchmarks are scripts that print their figures, not tests."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import asyncpg

from reaper.jobqueue.database import Database
from reaper.schema.migrations import migrate

#: Plain TCP for every library alike: the server offers TLS (scripts/services turns it on), which
#: asyncpg and libpq take unless told otherwise and node-postgres (pg-boss) never asks for; a
#: library timed over TLS beside one without would be measured for its transport.
ADMIN_DSN = os.environ.get(
    "QR_BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres?sslmode=disable"
)


async def migrated(dsn: str) -> None:
    """The reaper's schema on the database at ``dsn`` (``reaper db migrate``)."""
    database = await Database.connect(dsn)
    try:
        await migrate(database)
    finally:
        await database.close()


def dsn_for(database: str) -> str:
    """:data:`ADMIN_DSN` for ``database`` (its options kept)."""
    return urlsplit(ADMIN_DSN)._replace(path=f"/{database}").geturl()


@contextlib.asynccontextmanager
async def scratch_database(prefix: str, template: str | None = None) -> AsyncIterator[str]:
    """A database of this run's own (a copy of ``template`` when given), dropped after."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(ADMIN_DSN)
    try:
        clause = f' TEMPLATE "{template}"' if template else ""
        await admin.execute(f'CREATE DATABASE "{name}"{clause}')
        yield name
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def median(values: list[float]) -> float:
    return statistics.median(values)


def report_result(benchmark: str, figures: dict[str, object]) -> None:
    """Print the machine-readable last line ``bench/run_all`` collects into its table."""
    import json

    print("RESULT " + json.dumps({"benchmark": benchmark, **figures}, sort_keys=True))


#: Runs the command in its arguments and prints, on its stderr, the command's peak RSS (KiB)
#: and exit status. A child's ``ru_maxrss`` starts at the RSS of the process that spawned it
#: (Linux keeps the high-water mark of the memory a process had before ``execve``, and a child
#: of fork or vfork had its parent's): spawned from this small interpreter, the command's
#: figure is its own, not a bench's that holds thousands of queue definitions.
_MEASURED = (
    "import os, subprocess, sys\n"
    "child = subprocess.Popen(sys.argv[1:], stderr=subprocess.DEVNULL)\n"
    "_, status, usage = os.wait4(child.pid, 0)\n"
    "print(usage.ru_maxrss, os.waitstatus_to_exitcode(status), file=sys.stderr)\n"
)


def measured(command: list[str]) -> list[str]:
    """``command`` run through :data:`_MEASURED`: its stderr's last line is the command's own
    peak RSS (KiB) and exit status (:func:`measured_peak`)."""
    return [sys.executable, "-I", "-c", _MEASURED, *command]


def measured_peak(stderr: str) -> tuple[float, int]:
    """The peak RSS (MB) and exit status a :func:`measured` command printed last."""
    peak_kib, status = stderr.strip().splitlines()[-1].split()
    return int(peak_kib) / 1024, int(status)


def own_peak_mb() -> float:
    """This process's own peak RSS in MB (``VmHWM``: the high-water mark of its memory since
    it started, unlike ``ru_maxrss``, which a child inherits from its parent)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def one_pass(env: dict[str, str]) -> tuple[float, float, dict[str, object]]:
    """Run ``reaper reap --json`` in a child; its own peak RSS (MB), wall time and report."""
    with tempfile.TemporaryFile(mode="w+") as out:
        started = time.perf_counter()
        child = subprocess.run(
            measured([sys.executable, "-m", "reaper", "reap", "--json"]),
            stdout=out,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
            check=False,
        )
        elapsed = time.perf_counter() - started
        peak, _ = measured_peak(child.stderr)
        out.seek(0)
        report: dict[str, object] = json.load(out)
    return peak, elapsed, report

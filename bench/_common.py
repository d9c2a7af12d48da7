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


def one_pass(env: dict[str, str]) -> tuple[float, float, dict[str, object]]:
    """Run ``reaper reap --json`` in a child; its peak RSS (MB), wall time and report."""
    with tempfile.TemporaryFile(mode="w+") as out:
        started = time.perf_counter()
        child = subprocess.Popen(
            [sys.executable, "-m", "reaper", "reap", "--json"],
            stdout=out,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        elapsed = time.perf_counter() - started
        out.seek(0)
        report: dict[str, object] = json.load(out)
    return usage.ru_maxrss / 1024, elapsed, report  # ru_maxrss is in KiB on Linux

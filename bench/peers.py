"""After a fleet crash, every job claimable again: this reaper's lease reap against the peers'
own rescue calls, on identical data, in one run (issue: mass expiry in one pass).

    python bench/peers.py                      # 10,000 among 100,000 and 200,000 among 2,000,000
    python bench/peers.py --quick              # the small size, one round (bench/run_all)
    python bench/peers.py --peers pgboss,oban --rounds 3 --procrastinate-budget 60

Each peer is the library itself, pinned to the version measured before, installed into its own
scratch environment under build/peers/ (never the project's): pg-boss from npm (Node), Oban
for Python (Python 3.12), procrastinate and pgqueuer from PyPI. A stamp per environment makes
the install idempotent. Each peer gets its own schema (its own installer) in its own scratch
database, seeded set-based (INSERT ... SELECT generate_series) with N jobs running past their
lease, heartbeat or expiry among M finished jobs, once per size; every measurement runs on a
fresh copy of that template (CREATE DATABASE ... TEMPLATE). Each round runs every library
back to back and the ratios are taken within the round; medians are reported.

What is called: pg-boss `supervise(queue)` (its expiry in batches, then the rest of its pass),
Oban's Lifeline rescue, procrastinate's `get_stalled_jobs()` then `retry_job(job)` for each,
and, pgqueuer having no rescue step, one dequeue of 10 with the stale set waiting (and idle).
This reaper: its lease reap as a pass runs it (`reaper_lease_reap`, the one function to swap).

The longest lock-holding transaction is sampled on the server, not timed in the client: every
few milliseconds a separate connection reads pg_stat_activity for the measured database's
backends that hold a transaction id (any row written or locked FOR UPDATE gives one), and a
transaction's length is the longest ``clock_timestamp() - xact_start`` seen for it. That
needs nothing from the libraries (no hook into their drivers), measures all five alike, and
reads the server's clock; it is short by at most one sampling interval, and counts from the
transaction's start (its reads before the first lock included).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import dsn_for, median, migrated, report_result, scratch_database

ROOT = Path(__file__).resolve().parents[1]
DRIVERS = Path(__file__).resolve().parent / "peer_drivers"
BUILD = ROOT / "build" / "peers"
PYTHON_312 = os.environ.get("QR_BENCH_PYTHON_312", "/root/.pyenv/versions/3.12.1/bin/python3.12")
NOW = datetime(2026, 9, 24, 12, 0, tzinfo=UTC)  # the reaper's seed and reap clock
#: The default pass interval (queue.reap.interval_seconds): a reap that needs more than one
#: pass waits this long between passes.
INTERVAL_SECONDS = 60
SAMPLE_SECONDS = 0.005
TARGET_TRANSACTION_SECONDS = 0.1
SIZES = {"small": (10_000, 100_000), "large": (200_000, 2_000_000)}


# --- scratch environments ---------------------------------------------------------------


@dataclass(frozen=True)
class Environment:
    """One peer's scratch environment: where it lives, what it pins, how it runs a driver."""

    name: str
    kind: str  # "npm" or "python"
    packages: tuple[str, ...]
    python: str = sys.executable

    @property
    def home(self) -> Path:
        return BUILD / self.name

    @property
    def stamp(self) -> str:
        return json.dumps({"kind": self.kind, "packages": self.packages, "python": self.python})

    def command(self, driver: str) -> list[str]:
        if self.kind == "npm":
            return ["node", str(self.home / driver)]
        return [str(self.home / "bin" / "python"), str(DRIVERS / driver)]


ENVIRONMENTS = {
    "pgboss": Environment("pgboss", "npm", ("pg-boss@12.38.0",)),
    "oban": Environment("oban", "python", ("oban==0.7.0",), python=PYTHON_312),
    "procrastinate": Environment("procrastinate", "python", ("procrastinate==3.10.0",)),
    "pgqueuer": Environment("pgqueuer", "python", ("pgqueuer==1.6.0", "asyncpg")),
}


def ensure_environment(env: Environment) -> None:
    """Install ``env`` unless its stamp says it already holds exactly these pins; exit with
    what to do when the registry or the interpreter is not there."""
    stamp = env.home / ".installed"
    if not (stamp.exists() and stamp.read_text() == env.stamp):
        install(env)
    if env.kind == "npm":  # node resolves the package from beside the script: run it there
        shutil.copy(DRIVERS / "pgboss.mjs", env.home / "pgboss.mjs")


def install(env: Environment) -> None:
    """A fresh environment for ``env``, stamped once every step has succeeded."""
    stamp = env.home / ".installed"
    print(f"installing {', '.join(env.packages)} into {env.home}", flush=True)
    shutil.rmtree(env.home, ignore_errors=True)
    env.home.mkdir(parents=True)
    if env.kind == "npm":
        steps = [
            ["npm", "init", "-y"],
            [
                *("npm", "install", "--no-audit", "--no-fund", "--save-exact"),
                *("--fetch-retries", "1", "--fetch-timeout", "60000", *env.packages),
            ],
        ]
        tool, registry = "npm", "the npm registry"
    else:
        if not Path(env.python).exists():
            sys.exit(
                f"peers: {env.name} needs {env.python} (set QR_BENCH_PYTHON_312 to a "
                "Python 3.12 interpreter), or leave it out with --peers"
            )
        steps = [
            [env.python, "-m", "venv", str(env.home)],
            [
                str(env.home / "bin" / "pip"),
                "install",
                *("--disable-pip-version-check", "--timeout", "60", "--retries", "1"),
                *env.packages,
            ],
        ]
        tool, registry = "pip", "PyPI"
    for step in steps:
        done = subprocess.run(step, cwd=env.home, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            sys.exit(
                f"peers: installing {env.name} failed ({' '.join(step[:3])} ...: exit "
                f"{done.returncode}):\n{tail}\n"
                f"Is {registry} reachable from here ({tool})? Run again once it answers; "
                f"nothing was measured. To measure without it: --peers without {env.name}."
            )
    stamp.write_text(env.stamp)


# --- seeds: N running past their lease among M finished, in each library's own schema -----

REAPER_SEED = (
    (
        """
INSERT INTO job (id, project_id, kind, phase, state, run_after, attempts, max_attempts,
                 lease_owner, lease_expires_at, finished_at, created_at, updated_at)
SELECT gen_random_uuid(),
       ('00000000-0000-4000-8000-' || lpad(to_hex(g % 100), 12, '0'))::uuid,
       'build', 'build', 'leased', $1::timestamptz - interval '2 hours', 1, 7,
       'worker-' || (g % 50), $1::timestamptz - (g % 3600 + 1) * interval '1 second',
       NULL, $1::timestamptz - interval '1 day', $1::timestamptz - interval '1 day'
FROM generate_series(1, $2::int) AS g
""",
        "running",
    ),
    (
        """
INSERT INTO job (id, project_id, kind, phase, state, run_after, attempts, max_attempts,
                 lease_owner, lease_expires_at, finished_at, created_at, updated_at)
SELECT gen_random_uuid(),
       ('00000000-0000-4000-8000-' || lpad(to_hex(g % 100), 12, '0'))::uuid,
       'build', 'build', 'succeeded', $1::timestamptz - interval '2 hours', 1, 7,
       NULL, NULL, $1::timestamptz - interval '1 hour',
       $1::timestamptz - interval '1 day', $1::timestamptz - interval '1 day'
FROM generate_series(1, $2::int) AS g
""",
        "finished",
    ),
)

PGBOSS_SEED = (
    (
        """
INSERT INTO pgboss.job (name, data, state, retry_limit, retry_count, expire_seconds,
                        start_after, created_on, started_on)
SELECT 'bench', jsonb_build_object('n', g), 'active', 2, 0, 900,
       now() - interval '1 day', now() - interval '1 day',
       now() - interval '2 hours' - (g % 3600) * interval '1 second'
FROM generate_series(1, $1::int) AS g
""",
        "running",
    ),
    (
        """
INSERT INTO pgboss.job (name, data, state, retry_limit, expire_seconds, start_after,
                        created_on, started_on, completed_on)
SELECT 'bench', jsonb_build_object('n', g), 'completed', 2, 900, now() - interval '1 day',
       now() - interval '1 day', now() - interval '2 hours', now() - interval '1 hour'
FROM generate_series(1, $1::int) AS g
""",
        "finished",
    ),
)

OBAN_SEED = (
    (
        """
INSERT INTO oban_jobs (state, queue, worker, attempt, max_attempts, args, attempted_by,
                       inserted_at, scheduled_at, attempted_at)
SELECT 'executing', 'default', 'Bench.Worker', 1, 20, jsonb_build_object('n', g),
       ARRAY['node-' || (g % 50)], timezone('UTC', now()) - interval '1 day',
       timezone('UTC', now()) - interval '1 day',
       timezone('UTC', now()) - interval '2 hours' - (g % 3600) * interval '1 second'
FROM generate_series(1, $1::int) AS g
""",
        "running",
    ),
    (
        """
INSERT INTO oban_jobs (state, queue, worker, attempt, max_attempts, args, attempted_by,
                       inserted_at, scheduled_at, attempted_at, completed_at)
SELECT 'completed', 'default', 'Bench.Worker', 1, 20, jsonb_build_object('n', g),
       ARRAY['node-' || (g % 50)], timezone('UTC', now()) - interval '1 day',
       timezone('UTC', now()) - interval '1 day', timezone('UTC', now()) - interval '2 hours',
       timezone('UTC', now()) - interval '1 hour'
FROM generate_series(1, $1::int) AS g
""",
        "finished",
    ),
)

# Workers whose heartbeat stopped an hour ago, each holding a share of the running jobs.
PROCRASTINATE_SEED = (
    (
        """
INSERT INTO procrastinate_workers (last_heartbeat)
SELECT now() - interval '1 hour' FROM generate_series(1, 50)
""",
        "none",
    ),
    (
        """
INSERT INTO procrastinate_jobs (queue_name, task_name, args, status, attempts, worker_id)
SELECT 'default', 'bench.task', jsonb_build_object('n', g), 'doing', 1,
       (SELECT min(id) FROM procrastinate_workers) + g % 50
FROM generate_series(1, $1::int) AS g
""",
        "running",
    ),
    (
        """
INSERT INTO procrastinate_jobs (queue_name, task_name, args, status, attempts)
SELECT 'default', 'bench.task', jsonb_build_object('n', g), 'succeeded', 1
FROM generate_series(1, $1::int) AS g
""",
        "finished",
    ),
)

# pgqueuer keeps finished jobs in its log table, not in the queue table.
PGQUEUER_SEED = (
    (
        """
INSERT INTO pgqueuer (priority, queue_manager_id, created, updated, heartbeat, execute_after,
                      status, entrypoint, attempts)
SELECT 0, ('00000000-0000-4000-8000-' || lpad(to_hex(g % 50), 12, '0'))::uuid,
       now() - interval '1 day', now() - interval '2 hours',
       now() - interval '2 hours' - (g % 3600) * interval '1 second', now() - interval '1 day',
       'picked', 'bench', 1
FROM generate_series(1, $1::int) AS g
""",
        "running",
    ),
    (
        """
INSERT INTO pgqueuer_log (created, job_id, status, priority, entrypoint, aggregated)
SELECT now() - interval '1 hour', -g, 'successful', 0, 'bench', true
FROM generate_series(1, $1::int) AS g
""",
        "finished",
    ),
)


@dataclass(frozen=True)
class Library:
    """How one library is installed, seeded, driven and checked."""

    name: str
    label: str
    #: Statements, each with the rows it writes: "running", "finished" or "none".
    seed: tuple[tuple[str, str], ...]
    driver: str
    mode: str
    record: str
    #: After the rescue: (jobs claimable again, per-job records written); None: not asked.
    check: str | None
    #: The seed's first parameter is the reaper's clock (its job table is seeded at NOW).
    clocked: bool = False


LIBRARIES = {
    "reaper": Library(
        "reaper",
        "queue-reaper lease reap",
        REAPER_SEED,
        "",
        "rescue",
        "an append-only event",
        "SELECT (SELECT count(*) FROM job WHERE state = 'ready'),"
        " (SELECT count(*) FROM event WHERE kind = 'QueueReaped')",
        clocked=True,
    ),
    "pgboss": Library(
        "pgboss",
        "pg-boss 12.38.0 supervise()",
        PGBOSS_SEED,
        "pgboss.mjs",
        "rescue",
        "the job's output overwritten",
        "SELECT (SELECT count(*) FROM pgboss.job WHERE state = 'retry'),"
        " (SELECT count(*) FROM pgboss.job WHERE output->'value'->>'message' = 'job timed out')",
    ),
    "oban": Library(
        "oban",
        "Oban (Python) 0.7.0 Lifeline",
        OBAN_SEED,
        "oban_rescue.py",
        "rescue",
        "a counter in meta",
        "SELECT (SELECT count(*) FROM oban_jobs WHERE state = 'available'),"
        " (SELECT count(*) FROM oban_jobs WHERE meta->>'rescued' = '1')",
    ),
    "procrastinate": Library(
        "procrastinate",
        "procrastinate 3.10.0 stalled+retry",
        PROCRASTINATE_SEED,
        "procrastinate_rescue.py",
        "rescue",
        "trigger rows in its events table",
        "SELECT (SELECT count(*) FROM procrastinate_jobs WHERE status = 'todo'),"
        " (SELECT count(*) FROM procrastinate_events)",
    ),
    "pgqueuer": Library(
        "pgqueuer",
        "pgqueuer 1.6.0 (no rescue)",
        PGQUEUER_SEED,
        "pgqueuer_dequeue.py",
        "dequeue",
        "none (the dequeue re-picks)",
        None,
    ),
}


async def seed_template(library: Library, database: str, expired: int, finished: int) -> None:
    """The library's own schema (its own installer) and the seed, vacuumed and checkpointed."""
    dsn = dsn_for(database)
    if library.name == "reaper":
        await migrated(dsn)
    else:
        env = ENVIRONMENTS[library.name]
        process = await asyncio.create_subprocess_exec(
            *env.command(library.driver),
            "install",
            dsn,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await process.communicate()
        if process.returncode != 0:
            raise RuntimeError(f"{library.name}'s installer failed:\n{err.decode()[-3000:]}")
    conn = await asyncpg.connect(dsn)
    try:
        # Triggers and foreign keys off while seeding: the rows are written as they would
        # stand, not replayed through the library's own history.
        await conn.execute("SET session_replication_role = replica")
        for statement, rows in library.seed:
            if rows == "none":
                await conn.execute(statement)
                continue
            count = expired if rows == "running" else finished
            await conn.execute(statement, *((NOW, count) if library.clocked else (count,)))
        await conn.execute("VACUUM ANALYZE")
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()


# --- the reaper's side: the one function to swap ----------------------------------------


async def reaper_lease_reap(dsn: str, ready: Callable[[], Awaitable[None]]) -> dict[str, object]:
    """This reaper's lease reap as one ``reaper reap`` pass runs it (``reap_seeded`` of
    bench/lease_reap.py: the pass's own code and sources, the default budget): every expired
    lease read in pages, judged and moved with one event each, in one pass. Returns the pass's
    seconds and the moves."""
    from lease_reap import reap_seeded

    seconds, _longest_batch, moved = await reap_seeded(dsn, ready)
    return {"seconds": seconds, "call_seconds": seconds, "passes": 1, "moved": moved}


async def reaper_driver(dsn: str) -> None:
    """``peers.py --reaper-driver DSN``: the reaper driven as the peers are (ready, "go")."""

    async def ready() -> None:
        print(json.dumps({"ready": True}), flush=True)
        await asyncio.to_thread(sys.stdin.readline)

    print(json.dumps(await reaper_lease_reap(dsn, ready)), flush=True)


# --- the measurement ---------------------------------------------------------------------


@dataclass
class LockWatch:
    """The longest transaction holding a transaction id in one database, sampled on the
    server every :data:`SAMPLE_SECONDS` from a connection of its own."""

    database: str
    held: dict[tuple[int, datetime], float] = field(default_factory=dict)
    samples: int = 0

    SAMPLE = """
    SELECT pid, xact_start, extract(epoch FROM clock_timestamp() - xact_start)::float8
    FROM pg_stat_activity
    WHERE datname = $1 AND backend_xid IS NOT NULL AND pid <> pg_backend_pid()
    """

    async def watch(self, stop: asyncio.Event) -> None:
        conn = await asyncpg.connect(dsn_for("postgres"))
        try:
            statement = await conn.prepare(self.SAMPLE)
            while not stop.is_set():
                for pid, start, held in await statement.fetch(self.database):
                    key = (pid, start)
                    self.held[key] = max(held, self.held.get(key, 0.0))
                self.samples += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), SAMPLE_SECONDS)
        finally:
            await conn.close()

    @property
    def longest(self) -> float:
        return max(self.held.values(), default=0.0)


@contextlib.asynccontextmanager
async def watching(database: str) -> AsyncIterator[Callable[[], Awaitable[LockWatch]]]:
    """A lock watch on ``database``, started by calling what this yields; stopped on exit."""
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    watch = LockWatch(database)

    async def start() -> LockWatch:
        tasks.append(asyncio.create_task(watch.watch(stop)))
        await asyncio.sleep(SAMPLE_SECONDS)  # connected before the clock starts
        return watch

    try:
        yield start
    finally:
        stop.set()
        await asyncio.gather(*tasks)


async def drive(library: Library, database: str, budget: float | None) -> dict[str, object]:
    """One measurement on a copy: the driver says ready, the watch starts, "go", the first
    JSON line is the measurement (the watch stops), further lines are merged in."""
    dsn = dsn_for(database)
    if library.name == "reaper":
        command = [sys.executable, __file__, "--reaper-driver", dsn]
    else:
        command = [*ENVIRONMENTS[library.name].command(library.driver), library.mode, dsn]
        if budget is not None and library.name == "procrastinate":
            command.append(str(budget))
    BUILD.mkdir(parents=True, exist_ok=True)
    with (BUILD / f"{library.name}.stderr").open("w") as stderr:
        process = await asyncio.create_subprocess_exec(
            *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=stderr
        )
        assert process.stdin and process.stdout
        async with watching(database) as start:
            ready = await process.stdout.readline()
            if not ready:
                await process.wait()
                raise RuntimeError(f"{library.name} did not start: see {stderr.name}")
            watch = await start()
            process.stdin.write(b"go\n")
            await process.stdin.drain()
            line = await process.stdout.readline()
        rest, _ = await process.communicate()
    if process.returncode != 0 or not line:
        raise RuntimeError(f"{library.name} exited {process.returncode}: see {stderr.name}")
    figures: dict[str, object] = json.loads(line)
    for extra in rest.decode().splitlines():
        figures.update(json.loads(extra))
    figures["longest_transaction"] = watch.longest
    figures["transactions_seen"] = len(watch.held)
    figures["samples"] = watch.samples
    return figures


async def measure(
    library: Library, template: str, expired: int, budget: float | None
) -> dict[str, object]:
    """``library``'s rescue on a fresh copy of its template, checked afterwards."""
    async with scratch_database(f"qr_peer_{library.name}", template=template) as copy:
        figures = await drive(library, copy, budget)
        if library.check is not None:
            conn = await asyncpg.connect(dsn_for(copy))
            try:
                claimable, records = await conn.fetchrow(library.check)
            finally:
                await conn.close()
            wanted = figures.get("retried", expired)
            if claimable != wanted:
                raise RuntimeError(
                    f"{library.name}: {claimable} of {wanted} rescued job(s) claimable after"
                )
            figures["claimable"], figures["records"] = claimable, records
    return figures


# --- the table ---------------------------------------------------------------------------


def seconds_text(seconds: float) -> str:
    return f"{seconds:.3f} s" if seconds < 10 else f"{seconds:.1f} s"


def row_for(
    name: str, runs: list[dict[str, object]], reaper_until: float, expired: int
) -> list[str]:
    library = LIBRARIES[name]
    longest = median([float(str(r["longest_transaction"])) for r in runs])
    longest_text = (
        f"{longest:.3f} s" if longest > 0 else f"< {SAMPLE_SECONDS * 1000:.0f} ms (none sampled)"
    )
    if name == "pgboss":  # the sample covers its whole call: retention's walk is in it too
        batch = median([float(str(r["longest_client_transaction"])) for r in runs])
        longest_text += f" (its expiry batches: {batch:.3f} s, timed in its client)"
    if name == "pgqueuer":
        dequeue = median([float(str(r["dequeue_seconds"])) for r in runs])
        idle = median([float(str(r["idle_dequeue_seconds"])) for r in runs])
        return [
            library.label,
            f"no rescue step: a dequeue of 10 takes {dequeue * 1000:.1f} ms with the stale "
            f"set waiting ({idle * 1000:.1f} ms idle)",
            f"{10 / dequeue:,.0f} jobs/s re-picked by one worker",
            "",
            library.record,
            longest_text,
        ]
    until = median([until_claimable(name, r) for r in runs])
    capped = [r for r in runs if r.get("capped")]
    finished = [r for r in runs if not r.get("capped")]
    if math.isinf(until):  # too many rounds capped for a median
        spent = median([float(str(r["seconds"])) for r in capped])
        retried = median([float(str(r["retried"])) for r in capped])
        records = median([float(str(r.get("records", 0))) for r in capped])
        return [
            library.label,
            f"not reached: capped at {spent:.0f} s, {retried:,.0f} of {expired:,} retried",
            f"{retried / spent:,.0f} jobs/s",
            "",
            f"{library.record} ({records:,.0f})",
            longest_text,
        ]
    work = median([float(str(r["seconds"])) for r in runs]) if name == "reaper" else until
    records = median([float(str(r.get("records", 0))) for r in finished])
    measured = seconds_text(until)
    if capped:
        budget = float(str(capped[0]["seconds"]))
        measured += (
            f" ({len(capped)} of {len(runs)} rounds capped at {budget:.0f} s, counted as longer)"
        )
    if name == "reaper":
        passes = int(median([float(str(r["passes"])) for r in runs]))
        if passes > 1:
            measured = (
                f"{seconds_text(until)}: {seconds_text(work)} of work in {passes} passes, "
                f"{passes - 1} waits of the {INTERVAL_SECONDS} s interval"
            )
    if name == "pgboss":
        call = median([float(str(r["call_seconds"])) for r in runs])
        measured += f" (whole supervise call {seconds_text(call)})"
    return [
        library.label,
        measured,
        f"{expired / work:,.0f} jobs/s",
        "1.00" if name == "reaper" else f"{until / reaper_until:.2f}",
        f"{library.record} ({records:,.0f})",
        longest_text,
    ]


def until_claimable(name: str, figures: dict[str, object]) -> float:
    """Seconds from the rescue's start until the last job is claimable again: the reaper's
    passes after the first each wait out the interval; a capped run's is unknown (longer than
    its budget: infinite, so that a median over rounds counts it as the longest)."""
    if figures.get("capped"):
        return math.inf
    seconds = float(str(figures["seconds"]))
    if name == "reaper":
        return seconds + (int(str(figures["passes"])) - 1) * INTERVAL_SECONDS
    return seconds


def print_table(rows: list[list[str]]) -> None:
    header = [
        "library",
        "time until all claimable",
        "jobs/s (of the work)",
        "its time / the reaper's",
        "per-job record",
        "longest lock-holding txn",
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in (header, ["-" * w for w in widths], *rows):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")


async def run_size(
    names: list[str], expired: int, finished: int, rounds: int, budget: float | None
) -> dict[str, object]:
    print(
        f"\n{expired:,} jobs running past their lease among {finished:,} finished, "
        f"{rounds} round(s)"
    )
    runs: dict[str, list[dict[str, object]]] = {n: [] for n in names}
    async with contextlib.AsyncExitStack() as stack:
        templates = {}
        for name in names:
            template = await stack.enter_async_context(scratch_database(f"qr_peer_seed_{name}"))
            started = time.perf_counter()
            await seed_template(LIBRARIES[name], template, expired, finished)
            print(f"  {name}: seeded in {time.perf_counter() - started:.1f} s", flush=True)
            templates[name] = template
        for round_no in range(1, rounds + 1):
            line = []
            for name in names:
                figures = await measure(LIBRARIES[name], templates[name], expired, budget)
                runs[name].append(figures)
                if name == "pgqueuer":
                    line.append(
                        f"pgqueuer dequeue {float(str(figures['dequeue_seconds'])) * 1000:.1f} ms"
                    )
                else:
                    capped = bool(figures.get("capped"))
                    shown = (
                        float(str(figures["seconds"])) if capped else until_claimable(name, figures)
                    )
                    line.append(f"{name} {seconds_text(shown)}" + (" (capped)" if capped else ""))
                line[-1] += f", txn {float(str(figures['longest_transaction'])):.3f} s"
                if "longest_client_transaction" in figures:
                    client = float(str(figures["longest_client_transaction"]))
                    line[-1] += f" (timed in its client: {client:.3f} s)"
            print(f"  round {round_no}: " + "; ".join(line), flush=True)
    reaper_until = median([until_claimable("reaper", r) for r in runs["reaper"]])
    rows = [row_for(n, runs[n], reaper_until, expired) for n in names]
    print()
    print_table(rows)
    summary: dict[str, object] = {
        "expired": expired,
        "finished": finished,
        "rounds": rounds,
        "reaper_until_s": round(reaper_until, 3),
        "reaper_work_s": round(median([float(str(r["seconds"])) for r in runs["reaper"]]), 3),
        "reaper_passes": int(median([float(str(r["passes"])) for r in runs["reaper"]])),
        "longest_transaction_s": {
            n: round(median([float(str(r["longest_transaction"])) for r in runs[n]]), 3)
            for n in names
        },
    }
    if "pgboss" in names:
        summary["pgboss_expiry_batch_s"] = round(
            median([float(str(r["longest_client_transaction"])) for r in runs["pgboss"]]), 3
        )
    for name in names:
        if name not in ("reaper", "pgqueuer"):
            until = median([until_claimable(name, r) for r in runs[name]])
            if not math.isinf(until):
                summary[f"{name}_until_s"] = round(until, 3)
            if name == "procrastinate":  # the only one with a budget
                summary[f"{name}_capped_rounds"] = sum(bool(r.get("capped")) for r in runs[name])
    if "pgboss" in names:
        # Ahead: this reaper's time until all claimable below pg-boss's, in the same round.
        per_round = [
            until_claimable("reaper", r) < until_claimable("pgboss", p)
            for r, p in zip(runs["reaper"], runs["pgboss"], strict=True)
        ]
        summary["ahead_of_pgboss"] = reaper_until < float(str(summary["pgboss_until_s"]))
        summary["ahead_of_pgboss_rounds"] = sum(per_round)
    if "pgqueuer" in names:
        summary["pgqueuer_dequeue_ms"] = round(
            median([float(str(r["dequeue_seconds"])) for r in runs["pgqueuer"]]) * 1000, 1
        )
        summary["pgqueuer_idle_dequeue_ms"] = round(
            median([float(str(r["idle_dequeue_seconds"])) for r in runs["pgqueuer"]]) * 1000, 1
        )
    return summary


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the small size only, one round")
    parser.add_argument("--sizes", default=None, help="small, large or small,large (the default)")
    parser.add_argument("--rounds", type=int, default=None, help="3 by default, 1 with --quick")
    parser.add_argument(
        "--peers",
        default=",".join(ENVIRONMENTS),
        help=f"which peers to run beside the reaper (default: {','.join(ENVIRONMENTS)})",
    )
    parser.add_argument(
        "--procrastinate-budget",
        type=float,
        default=None,
        help="stop procrastinate's retry loop after this many seconds and say so (its "
        "one-transaction-per-job loop takes minutes at the large size)",
    )
    parser.add_argument("--reaper-driver", metavar="DSN", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reaper_driver:
        await reaper_driver(args.reaper_driver)
        return 0
    peers = [p for p in args.peers.split(",") if p]
    unknown = sorted(set(peers) - set(ENVIRONMENTS))
    if unknown:
        parser.error(f"unknown peer(s) {', '.join(unknown)}: choose from {', '.join(ENVIRONMENTS)}")
    sizes = (args.sizes or ("small" if args.quick else "small,large")).split(",")
    rounds = args.rounds or (1 if args.quick else 3)
    for peer in peers:
        ensure_environment(ENVIRONMENTS[peer])
    names = ["reaper", *[p for p in ENVIRONMENTS if p in peers]]
    print(
        f"peers: {', '.join(LIBRARIES[n].label for n in names)}; {os.cpu_count()} cores; "
        "medians of the rounds; a lock-holding transaction sampled every "
        f"{SAMPLE_SECONDS * 1000:.0f} ms on the server"
        + (
            f"; procrastinate capped at {args.procrastinate_budget:g} s"
            if args.procrastinate_budget
            else ""
        )
    )
    summaries = [
        await run_size(names, *SIZES[size], rounds, args.procrastinate_budget) for size in sizes
    ]
    load = os.getloadavg()
    print(f"\nload average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    ahead = [bool(s.get("ahead_of_pgboss")) for s in summaries if "ahead_of_pgboss" in s]
    reaper_longest = max(float(s["longest_transaction_s"]["reaper"]) for s in summaries)  # type: ignore[index]
    ok_ahead = bool(ahead) and all(ahead)
    ok_txn = reaper_longest <= TARGET_TRANSACTION_SECONDS
    # each target its own verdict, then the whole: a passing figure is never printed beside FAIL
    print(
        "reaper ahead of pg-boss at "
        + ("every size run" if len(sizes) > 1 else "this size")
        + f": {'yes' if ok_ahead else 'no' if ahead else 'pg-boss not run'}"
        + f" ({'PASS' if ok_ahead else 'FAIL'}); the reaper's longest lock-holding transaction "
        f"{reaper_longest:.3f} s, target <= {TARGET_TRANSACTION_SECONDS} s "
        f"({'PASS' if ok_txn else 'FAIL'}): {'PASS' if ok_ahead and ok_txn else 'FAIL'}"
    )
    report_result(
        "peers",
        {
            "sizes": summaries,
            "ahead_of_pgboss": "yes" if ok_ahead else "no",
            "longest_transaction_s": reaper_longest,
            "load": [round(x, 2) for x in load],
            "quick": args.quick,
            "ok": ok_ahead and ok_txn,
        },
    )
    return 0 if ok_ahead and ok_txn else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))

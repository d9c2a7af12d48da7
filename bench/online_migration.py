"""Online migration (SPEC §10): the first `reaper db migrate` onto a live host's job table of
1,000,000 rows, while a writer claims jobs in short transactions, must never hold the writer
up for long. Target: the writer's longest single wait during the migration under 1 s.

    python bench/online_migration.py [--rows 1000000 --projects 100 --lock-timeout 2]

The host's job table is seeded once (generate_series) as a host has it: its primary key, but
none of the reaper's indexes and none of the columns the reaper adds (max_attempts,
finished_at, phase). On a copy of it, a writer claims one ready job per transaction
(UPDATE ... WHERE id = (SELECT ... FOR UPDATE SKIP LOCKED)) in a loop, and the real command
`python -m reaper db migrate` runs in its own process. On a second copy, the same writer runs
beside the old way of migrating (each migration's statements in one transaction, indexes
built inside it, not concurrently, no lock_timeout), for comparison. Printed: the migration's
duration, the writer's claims during it, and the writer's longest single wait.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import dsn_for, report_result, scratch_database

from reaper.schema.sql import migrations, without_description

REPO = Path(__file__).resolve().parents[1]
TARGET_LONGEST_WAIT_SECONDS = 1.0
#: Seconds the writer claims alone before the migration starts, and after it ends.
BEFORE_SECONDS = 2.0
AFTER_SECONDS = 1.0

HOST_JOB = """
CREATE TABLE job (
    id               uuid PRIMARY KEY,
    project_id       uuid NOT NULL,
    kind             text NOT NULL,
    state            text NOT NULL,
    priority         int NOT NULL DEFAULT 0,
    run_after        timestamptz NOT NULL DEFAULT now(),
    attempts         int NOT NULL DEFAULT 0,
    lease_owner      text,
    lease_expires_at timestamptz,
    idempotency_key  text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
)
"""

# 20% ready, 2% leased, the rest succeeded; one idempotency key per job.
SEED = """
INSERT INTO job (id, project_id, kind, state, run_after, attempts, lease_owner,
                 lease_expires_at, idempotency_key, created_at, updated_at)
SELECT ('00000000-0000-4000-8000-' || lpad(to_hex(g), 12, '0'))::uuid,
       ('00000000-0000-4000-9000-' || lpad(to_hex(g % $2), 12, '0'))::uuid,
       'build',
       CASE WHEN g % 5 = 0 THEN 'ready' WHEN g % 50 = 1 THEN 'leased' ELSE 'succeeded' END,
       now() - (g % 86400) * interval '1 second',
       1,
       CASE WHEN g % 50 = 1 THEN 'worker-' || g % 20 END,
       CASE WHEN g % 50 = 1 THEN now() + interval '1 hour' END,
       'key-' || g,
       now() - interval '2 days', now() - interval '2 days'
FROM generate_series(1, $1::int) AS g
"""

CLAIM = """
UPDATE job
SET state = 'leased', lease_owner = $1, lease_expires_at = now() + interval '10 minutes',
    attempts = attempts + 1, updated_at = now()
WHERE id = (SELECT id FROM job WHERE state = 'ready' AND run_after <= now()
            LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id
"""


@dataclass
class Writer:
    """Claims one ready job per transaction, in a loop, timing each claim."""

    dsn: str
    claims: list[tuple[float, float]] = field(default_factory=list)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        conn = await asyncpg.connect(self.dsn, server_settings={"application_name": "host-writer"})
        await conn.fetchval(CLAIM, "warm-up")
        self._task = asyncio.create_task(self._loop(conn))

    async def _loop(self, conn: asyncpg.Connection) -> None:
        try:
            while not self._stop.is_set():
                started = time.perf_counter()
                await conn.fetchval(CLAIM, "bench-writer")
                self.claims.append((started, time.perf_counter()))
        finally:
            await conn.close()

    async def stop(self) -> None:
        self._stop.set()
        assert self._task is not None
        await self._task

    def during(self, start: float, end: float) -> tuple[int, float]:
        """Claims finished within [start, end], and the longest wait of a claim overlapping it."""
        done = sum(1 for _, finished in self.claims if start <= finished <= end)
        waits = [f - s for s, f in self.claims if f >= start and s <= end]
        return done, max(waits, default=0.0)


async def seed(dsn: str, rows: int, projects: int) -> int:
    """The host's job table; the number of rows in it."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(HOST_JOB)
        await conn.execute(SEED, rows, projects)
        await conn.execute("VACUUM ANALYZE job")
        await conn.execute("CHECKPOINT")
        count: int = await conn.fetchval("SELECT count(*) FROM job")
        return count
    finally:
        await conn.close()


async def online(dsn: str, lock_timeout: float) -> tuple[float, float, Writer, str]:
    """`reaper db migrate`, the real command in a process of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REAPER_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["REAPER_DATABASE__DSN"] = dsn
    env["REAPER_DATABASE__LOCK_TIMEOUT_SECONDS"] = str(lock_timeout)
    env["REAPER_CONFIG_DIR"] = str(REPO / "bench")  # no *.toml there: the environment alone
    writer = Writer(dsn)
    await writer.start()
    await asyncio.sleep(BEFORE_SECONDS)
    started = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "reaper",
        "db",
        "migrate",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    ended = time.perf_counter()
    await asyncio.sleep(AFTER_SECONDS)
    await writer.stop()
    if process.returncode != 0:
        raise SystemExit(f"reaper db migrate exited {process.returncode}: {err.decode()}")
    return started, ended, writer, out.decode()


async def old_way(dsn: str) -> tuple[float, float, Writer]:
    """As `reaper db migrate` ran before: each migration's statements in one transaction,
    indexes built inside it (not concurrently), no lock_timeout."""
    writer = Writer(dsn)
    await writer.start()
    await asyncio.sleep(BEFORE_SECONDS)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("SET statement_timeout = 0")
        started = time.perf_counter()
        for _, statements in migrations():
            sql = ";\n".join(
                without_description(text).replace(" CONCURRENTLY", "")
                for name, text in statements.items()
                if name != "create_fleet_project"  # a template; the old schema had none
            )
            async with conn.transaction():
                await conn.execute(sql)
        ended = time.perf_counter()
    finally:
        await conn.close()
    await asyncio.sleep(AFTER_SECONDS)
    await writer.stop()
    return started, ended, writer


async def invalid_or_missing(dsn: str) -> list[str]:
    expected = ["job_project_idempotency_key_uq", "job_leased_expiry_idx"]
    expected += ["job_ready_project_run_after_idx"]
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " WHERE i.indisvalid AND c.relname = ANY($1::text[])",
            expected,
        )
    finally:
        await conn.close()
    return sorted(set(expected) - {r["relname"] for r in rows})


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--projects", type=int, default=100)
    parser.add_argument("--lock-timeout", type=float, default=2.0)
    parser.add_argument("--skip-old", action="store_true", help="do not measure the old way")
    args = parser.parse_args()
    print(
        f"online migration: a host job table of {args.rows:,} rows, a writer claiming one job "
        f"per transaction, lock_timeout {args.lock_timeout:g} s"
    )
    async with scratch_database("qr_bench_host") as host:
        started = time.perf_counter()
        count = await seed(dsn_for(host), args.rows, args.projects)
        print(f"seeded {count:,} rows in {time.perf_counter() - started:.1f}s")

        async with scratch_database("qr_bench_online", template=host) as copy:
            start, end, writer, output = await online(dsn_for(copy), args.lock_timeout)
            seconds = end - start
            claims, longest = writer.during(start, end)
            before_claims, before_longest = writer.during(start - BEFORE_SECONDS, start)
            missing = await invalid_or_missing(dsn_for(copy))
        print("`reaper db migrate` printed:")
        print("".join(f"    {line}\n" for line in output.splitlines()), end="")

        old: tuple[float, int, float] | None = None
        if not args.skip_old:
            async with scratch_database("qr_bench_old", template=host) as copy:
                old_start, old_end, old_writer = await old_way(dsn_for(copy))
                old_claims, old_longest = old_writer.during(old_start, old_end)
                old = (old_end - old_start, old_claims, old_longest)

    ok = longest < TARGET_LONGEST_WAIT_SECONDS and not missing
    print()
    print(
        f"writer alone, {BEFORE_SECONDS:g} s before:     {before_claims:8,} claims, "
        f"longest wait {before_longest * 1000:8.1f} ms"
    )
    print(
        f"online `reaper db migrate`:        {seconds:6.2f} s, {claims:8,} claims during it "
        f"({claims / seconds:,.0f}/s), longest wait {longest * 1000:8.1f} ms"
    )
    if old is not None:
        print(
            f"old way (in-transaction builds):   {old[0]:6.2f} s, {old[1]:8,} claims during it "
            f"({old[1] / old[0]:,.0f}/s), longest wait {old[2] * 1000:8.1f} ms"
        )
    if missing:
        print(f"indexes missing or invalid after the migration: {', '.join(missing)}")
    print(
        f"longest wait {longest * 1000:.1f} ms (target < {TARGET_LONGEST_WAIT_SECONDS * 1000:g} "
        f"ms): {'PASS' if ok else 'FAIL'}"
    )
    report_result(
        "online_migration",
        {
            "rows": args.rows,
            "migration_s": round(seconds, 2),
            "claims_during": claims,
            "longest_wait_ms": round(longest * 1000, 1),
            "before_longest_wait_ms": round(before_longest * 1000, 1),
            "old_migration_s": round(old[0], 2) if old else None,
            "old_claims_during": old[1] if old else None,
            "old_longest_wait_ms": round(old[2] * 1000, 1) if old else None,
            "ok": ok,
        },
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))

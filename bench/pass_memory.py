"""A pass's peak memory (SPEC §8): one real ``reaper reap --json`` over 1,000,000 jobs and
10,000 queues, at 1,000 and at 20,000 expired leases, each in a child process whose peak RSS
is read from the kernel (``os.wait4``: that child's own ``ru_maxrss``, started from a small
launcher so that it does not inherit the bench's own RSS: ``bench/_common.py``).

    python bench/pass_memory.py [--jobs 1000000 --projects 1000 --queues 10000
                                 --expired 1000,20000]

One database is seeded once (generate_series) and each size runs on a fresh copy of it
(CREATE DATABASE ... TEMPLATE) with that many leases expired by the database's clock. The
queues are real: a vhost of this run's own on the broker at ``--url`` (RabbitMQ 3.10 here),
filled with one definitions import, named as owned queues so the pass measures and verifies
every one; the vhost is deleted at the end. The report goes to a file and is parsed whole, so
the figure includes writing every verdict (the lease moves read back from the ledger as they
are written). Targets: peak RSS under 100 MB at the largest size, and at most ``--flat-mb``
(5 MB: a page or two of leases in flight) more at the largest number of expired leases than at
the smallest.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import asyncpg
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import dsn_for, migrated, one_pass, report_result, scratch_database
from broker_read import create_vhost, wait_for_statistics

TARGET_MB = 100.0

SEED = """
INSERT INTO job (id, project_id, kind, phase, state, run_after, attempts, max_attempts,
                 lease_owner, lease_expires_at, finished_at, created_at, updated_at)
SELECT gen_random_uuid(),
       ('00000000-0000-4000-8000-' || lpad(to_hex(g % $2), 12, '0'))::uuid,
       'build', 'build', s.state, now() - (g % 7200) * interval '1 second', 1, 7,
       CASE WHEN s.state = 'leased' THEN 'worker-' || (g % 50) END,
       CASE WHEN s.state = 'leased' THEN now() + interval '1 day' END,
       CASE WHEN s.state = 'succeeded' THEN now() - interval '1 hour' END,
       now() - interval '1 day', now() - interval '1 day'
FROM generate_series(1, $1::int) AS g
CROSS JOIN LATERAL (
    SELECT (ARRAY['succeeded', 'succeeded', 'succeeded', 'succeeded', 'succeeded',
                  'succeeded', 'succeeded', 'ready', 'ready', 'leased'])[g % 10 + 1] AS state
) AS s;
"""

#: ``$1`` of the leased jobs (every 10th poison) expired by the database's clock.
EXPIRE = """
UPDATE job AS j
SET lease_expires_at = now() - (1 + x.n % 3600) * interval '1 second',
    attempts = CASE WHEN x.n % 10 = 0 THEN j.max_attempts ELSE j.attempts END
FROM (SELECT id, row_number() OVER (ORDER BY id) AS n
      FROM job WHERE state = 'leased' ORDER BY id LIMIT $1::int) AS x
WHERE j.id = x.id
"""


async def seed(dsn: str, jobs: int, projects: int) -> None:
    await migrated(dsn)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(SEED, jobs, projects)
        await conn.execute("VACUUM ANALYZE")
    finally:
        await conn.close()


async def expire(dsn: str, expired: int) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(EXPIRE, expired)
        await conn.execute("ANALYZE job")
    finally:
        await conn.close()


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--projects", type=int, default=1000)
    parser.add_argument("--queues", type=int, default=10_000)
    parser.add_argument("--expired", default="1000,20000", help="comma-separated sizes")
    parser.add_argument("--flat-mb", type=float, default=5.0)
    parser.add_argument("--url", default="http://127.0.0.1:15672", help="management API")
    parser.add_argument("--user", default="guest")
    parser.add_argument("--password", default="guest")
    args = parser.parse_args()
    sizes = [int(s) for s in args.expired.split(",")]

    load = os.getloadavg()
    print(
        f"pass memory: {args.jobs:,} jobs in {args.projects:,} projects, {args.queues:,} "
        f"queues at {args.url}, expired leases {', '.join(f'{n:,}' for n in sizes)}; "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    vhost = f"qr-bench-memory-{uuid.uuid4().hex[:8]}"
    admin = httpx.Client(base_url=args.url, auth=(args.user, args.password), timeout=120)
    peaks: dict[int, float] = {}
    try:
        started = time.perf_counter()
        names = [f"vibey.bench.q{n:05d}" for n in range(args.queues)]
        create_vhost(admin, vhost, args.user, names)
        wait_for_statistics(admin, vhost, names)
        print(f"{args.queues:,} queues declared in {time.perf_counter() - started:.1f}s")
        async with scratch_database("qr_bench_memory") as template:
            started = time.perf_counter()
            await seed(dsn_for(template), args.jobs, args.projects)
            print(f"seeded in {time.perf_counter() - started:.1f}s")
            for expired in sizes:
                async with scratch_database("qr_bench_memory_copy", template=template) as copy:
                    await expire(dsn_for(copy), expired)
                    env = {
                        **os.environ,
                        "REAPER_DATABASE__DSN": dsn_for(copy),
                        "REAPER_BUS__MANAGEMENT_URL": args.url,
                        "REAPER_BUS__USERNAME": args.user,
                        "REAPER_BUS__PASSWORD": args.password,
                        "REAPER_BUS__VHOST": vhost,
                        "REAPER_QUEUE__REAP__POLICY_VERIFY_WAIT_SECONDS": "2",
                    }
                    peak, elapsed, report = one_pass(env)
                    verdicts = report["verdicts"]
                    assert isinstance(verdicts, list)
                    moved = sum(
                        1
                        for v in verdicts
                        if v["action"] in ("requeue", "park") and v["recorded"] is True
                    )
                    counted = report["lease_reap"]
                    assert isinstance(counted, dict) and counted["listed"], counted
                    assert moved == counted["moved"] == expired, (moved, counted, expired)
                    peaks[expired] = peak
                    print(
                        f"  {expired:>7,} expired leases: peak RSS {peak:6.1f} MB, pass "
                        f"{elapsed:.1f}s, {len(verdicts):,} verdicts in the JSON, "
                        f"{moved:,} moves recorded"
                    )
    finally:
        admin.delete(f"/api/vhosts/{quote(vhost, safe='')}")  # noqa: ASYNC212
        admin.close()  # noqa: ASYNC212

    load = os.getloadavg()
    largest, smallest = peaks[max(sizes)], peaks[min(sizes)]
    growth = largest - smallest
    ok_peak, ok_flat = largest < TARGET_MB, growth <= args.flat_mb
    print()
    print(f"peak RSS at {max(sizes):,} expired leases: {largest:.1f} MB (target < {TARGET_MB:g})")
    print(
        f"growth from {min(sizes):,} to {max(sizes):,} expired leases: {growth:+.1f} MB "
        f"(target <= {args.flat_mb:g} MB): {'PASS' if ok_peak and ok_flat else 'FAIL'}"
    )
    print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    report_result(
        "pass_memory",
        {
            "jobs": args.jobs,
            "queues": args.queues,
            "expired": sizes,
            "peak_mb": {str(k): round(v, 1) for k, v in peaks.items()},
            "growth_mb": round(growth, 1),
            "load": [round(x, 2) for x in load],
            "ok": ok_peak and ok_flat,
        },
    )
    return 0 if ok_peak and ok_flat else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))

"""Stale-ready measurement at scale (SPEC §8): the claimable-heads query over 1,000,000 jobs
must be index-driven (no sequential scan of ``job`` in its plan).

    python bench/stale_ready.py [--jobs 1000000 --projects 1000]

Seeds its own database (generate_series: most jobs finished, some ready, leased, waiting on
a dependency or in an unknown phase), prints ``EXPLAIN (ANALYZE, BUFFERS)`` of the query
with and without a known-phase filter, the time of the store's call, and whether any
sequential scan of ``job`` appears. Drops the database afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import dsn_for, report_result, scratch_database

from reaper.jobqueue.postgres import PostgresStore
from reaper.jobqueue.sql import QUERIES
from reaper.schema.migrations import migrate

NOW = datetime(2026, 9, 24, 12, 0, tzinfo=UTC)

# job g: project g / 50 % projects (so every project gets every state); 80% succeeded, 8%
# ready, 4% leased, 4% failed, 2% cancelled, 2% awaiting a human; phases build, review and
# deploy, and 1% in a phase this release does not know.
SEED_JOBS = """
INSERT INTO job (id, project_id, kind, phase, state, run_after, attempts, max_attempts,
                 lease_owner, lease_expires_at, finished_at, created_at, updated_at)
SELECT ('00000000-0000-4000-8000-' || lpad(to_hex(g), 12, '0'))::uuid,
       ('00000000-0000-4000-9000-' || lpad(to_hex(g / 50 % $3), 12, '0'))::uuid,
       'build',
       CASE WHEN g % 100 = 7 THEN 'from_a_newer_release'
            ELSE (ARRAY['build', 'review', 'deploy'])[g % 3 + 1] END,
       s.state,
       $1::timestamptz - (g % 86400) * interval '1 second' + interval '30 minutes',
       1, 7,
       CASE WHEN s.state = 'leased' THEN 'worker-' || g % 50 END,
       CASE WHEN s.state = 'leased' THEN $1::timestamptz + interval '10 minutes' END,
       CASE WHEN s.state IN ('succeeded', 'failed', 'cancelled')
            THEN $1::timestamptz - (g % 7200) * interval '1 second' END,
       $1::timestamptz - interval '2 days', $1::timestamptz - interval '2 days'
FROM generate_series(1, $2::int) AS g
CROSS JOIN LATERAL (
    SELECT CASE
        WHEN g % 50 < 40 THEN 'succeeded'
        WHEN g % 50 < 44 THEN 'ready'
        WHEN g % 50 < 46 THEN 'leased'
        WHEN g % 50 < 48 THEN 'failed'
        WHEN g % 50 < 49 THEN 'cancelled'
        ELSE 'awaiting_human' END AS state
) AS s
"""

# every ready job whose number is a multiple of 7 waits on the job seven before it
SEED_DEPENDENCIES = """
INSERT INTO job_dependency (job_id, depends_on)
SELECT ('00000000-0000-4000-8000-' || lpad(to_hex(g), 12, '0'))::uuid,
       ('00000000-0000-4000-8000-' || lpad(to_hex(g - 7), 12, '0'))::uuid
FROM generate_series(8, $1::int) AS g
WHERE g % 7 = 0 AND g % 50 BETWEEN 40 AND 43
"""


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    out = [plan]
    for child in plan.get("Plans", []):
        out.extend(_nodes(child))
    return out


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--projects", type=int, default=1_000)
    args = parser.parse_args()

    async with scratch_database("qr_bench_stale") as name:
        dsn = dsn_for(name)
        store = await PostgresStore.connect(dsn)
        try:
            await migrate(store.database)
            conn = await asyncpg.connect(dsn, server_settings={"jit": "off"})
            try:
                started = time.perf_counter()
                await conn.execute(SEED_JOBS, NOW, args.jobs, args.projects)
                await conn.execute(SEED_DEPENDENCIES, args.jobs)
                await conn.execute("VACUUM ANALYZE job")
                await conn.execute("VACUUM ANALYZE job_dependency")
                counts = dict(
                    await conn.fetch("SELECT state, count(*) FROM job GROUP BY state ORDER BY 1")
                )
                deps = await conn.fetchval("SELECT count(*) FROM job_dependency")
                print(
                    f"seeded {args.jobs:,} jobs in {args.projects:,} projects and {deps:,} "
                    f"dependencies in {time.perf_counter() - started:.1f}s: "
                    + ", ".join(f"{state} {n:,}" for state, n in counts.items())
                )

                seq_scan = False
                for label, phases in (
                    ("every phase", []),
                    ("known_phases = build, review", ["build", "review"]),
                ):
                    rows = await conn.fetch(
                        "EXPLAIN (ANALYZE, BUFFERS) " + QUERIES["claimable_heads"].rstrip(";"),
                        NOW,
                        phases,
                        None,
                    )
                    print(f"\n--- EXPLAIN (ANALYZE, BUFFERS), {label}")
                    print("\n".join(r[0] for r in rows))
                    plan = await conn.fetchval(
                        "EXPLAIN (FORMAT JSON) " + QUERIES["claimable_heads"].rstrip(";"),
                        NOW,
                        phases,
                        None,
                    )
                    nodes = _nodes(json.loads(plan)[0]["Plan"])
                    seq_scan |= any(
                        n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "job"
                        for n in nodes
                    )
            finally:
                await conn.close()

            await store.claimable_heads(NOW, frozenset())  # prepared, as in a live pool
            timings = []
            for _ in range(5):
                started = time.perf_counter()
                heads = await store.claimable_heads(NOW, frozenset())
                timings.append(time.perf_counter() - started)
            oldest = min(heads, key=lambda h: h.claimable_since)
            print(
                f"\nPostgresStore.claimable_heads over {args.jobs:,} jobs: {len(heads):,} "
                f"projects measured, best of 5 {min(timings) * 1000:.1f} ms "
                f"(median {sorted(timings)[2] * 1000:.1f} ms); oldest claimable since "
                f"{oldest.claimable_since.isoformat()}"
            )
        finally:
            await store.close()

    verdict = "FAIL: a sequential scan of job" if seq_scan else "PASS: no sequential scan of job"
    print(f"index-driven at {args.jobs:,} jobs: {verdict}")
    report_result(
        "stale_ready",
        {
            "jobs": args.jobs,
            "projects": len(heads),
            "best_ms": round(min(timings) * 1000, 1),
            "median_ms": round(sorted(timings)[2] * 1000, 1),
            "seq_scan": seq_scan,
            "ok": not seq_scan,
        },
    )
    return 1 if seq_scan else 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))

"""Mass expiry (SPEC §8, issue: after a fleet crash, every job claimable again in one pass):
N expired leases among M jobs, recovered by one pass.

    python bench/mass_expiry.py [--expired 200000 --jobs 2000000 --rounds 3] [--cli]

One database is seeded once (``bench/lease_reap.py``'s seed: N leases expired within the last
hour among M jobs in all, of which a tenth of the others hold live leases) and every round
runs on a fresh copy of it. Each round times the lease reap of one pass as ``reaper reap`` runs
it (:func:`lease_reap.reap_seeded`: the database's clock, the default budget and pool) and
prints its seconds, leases per second and the longest transaction that held row locks.
``--cli`` also runs the command itself once, ``python -m reaper reap`` as a process, on a copy,
and checks that every expired lease is requeued with its event, each stream gapless.
Targets: every lease moved in the one pass, no transaction over 0.1 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import dsn_for, median, report_result, scratch_database
from lease_reap import GAPS, NOW, reap_seeded, seed

LONGEST_TRANSACTION_S = 0.1

#: The events recording a lease moved (a whole pass also records its sightings).
LEASE_EVENTS = """
SELECT count(*) FROM event
WHERE kind = 'QueueReaped' AND payload ->> 'action' IN ('requeue', 'park')
"""
ROOT = Path(__file__).resolve().parents[1]

EXPIRED_LEFT = """
SELECT count(*) FROM job WHERE state = 'leased' AND lease_expires_at < $1::timestamptz
"""


async def run_cli(dsn: str, expired: int) -> dict[str, object]:
    """``reaper reap`` as an operator runs it, with no broker to reach (the job queue's part is
    what is measured; the broker is reported unreadable, so the pass exits 1)."""
    environ = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "REAPER_DATABASE__DSN": dsn,
        "REAPER_BUS__MANAGEMENT_URL": "http://127.0.0.1:9",
        "REAPER_BUS__TIMEOUT_SECONDS": "1",
    }
    started = time.perf_counter()
    process = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "reaper", "reap", "--json"],
        env=environ,
        cwd=ROOT / "bench",
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - started
    report = json.loads(process.stdout) if process.stdout.strip() else {}
    began, ended = report.get("started_at"), report.get("finished_at")
    pass_seconds = (
        (datetime.fromisoformat(ended) - datetime.fromisoformat(began)).total_seconds()
        if began and ended
        else None
    )
    conn = await asyncpg.connect(dsn)
    try:
        left = await conn.fetchval(EXPIRED_LEFT, NOW)
        events = await conn.fetchval(LEASE_EVENTS)
        gaps = await conn.fetchval(GAPS)
    finally:
        await conn.close()
    return {
        "seconds": round(elapsed, 2),
        "pass_seconds": None if pass_seconds is None else round(pass_seconds, 2),
        "moved_in_report": sum(
            1
            for v in report.get("verdicts", ())
            if v["action"] in ("requeue", "park") and v["recorded"] is True
        ),
        "left_noted": [n for n in report.get("notes", ()) if "expired lease(s) left" in n],
        "exit": process.returncode,
        "expired_left": left,
        "events": events,
        "gaps": gaps,
        "ok": left == 0 and events == expired and gaps == 0,
        "stderr": process.stderr.strip().splitlines()[-3:],
    }


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--expired", type=int, default=200_000)
    parser.add_argument("--jobs", type=int, default=2_000_000, help="jobs in all")
    parser.add_argument("--projects", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cli", action="store_true", help="also run `reaper reap` itself once")
    args = parser.parse_args()
    print(
        f"mass expiry: {args.expired:,} expired leases among {args.jobs:,} jobs, "
        f"{args.projects} projects, {args.rounds} round(s)"
    )
    seconds: list[float] = []
    longest: list[float] = []
    shortfall: list[int] = []
    cli: dict[str, object] | None = None
    async with scratch_database("qr_bench_seed") as template:
        started = time.perf_counter()
        await seed(dsn_for(template), args.expired, args.jobs - args.expired, args.projects)
        print(f"seeded in {time.perf_counter() - started:.1f}s")
        for round_no in range(1, args.rounds + 1):
            async with scratch_database("qr_bench_copy", template=template) as copy:
                elapsed, held, moved = await reap_seeded(dsn_for(copy))
            shortfall.append(args.expired - moved)  # left by a spent budget: not one pass
            seconds.append(elapsed)
            longest.append(held)
            print(
                f"  round {round_no}: one pass moved {moved:,} in {elapsed:.3f} s "
                f"({moved / elapsed:,.0f}/s); longest lock-holding transaction {held:.3f} s"
            )
        if args.cli:
            async with scratch_database("qr_bench_copy", template=template) as copy:
                cli = await run_cli(dsn_for(copy), args.expired)
            print(f"  reaper reap (the CLI, a process): {cli}")
    load = os.getloadavg()
    worst = max(longest)
    ok = worst <= LONGEST_TRANSACTION_S and not any(shortfall) and (cli is None or bool(cli["ok"]))
    print(
        f"one pass: median {median(seconds):.3f} s ({args.expired / median(seconds):,.0f}/s), "
        f"longest lock-holding transaction {worst:.3f} s (target <= {LONGEST_TRANSACTION_S} s): "
        f"{'PASS' if ok else 'FAIL'}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
        + (f"; left by a spent budget in each round: {shortfall}" if any(shortfall) else "")
    )
    report_result(
        "mass_expiry",
        {
            "expired": args.expired,
            "jobs": args.jobs,
            "seconds": round(median(seconds), 3),
            "seconds_rounds": [round(s, 3) for s in seconds],
            "per_s": round(args.expired / median(seconds)),
            "longest_transaction_s": round(worst, 3),
            "left_by_budget": shortfall,
            "cli": cli,
            "load": [round(x, 2) for x in load],
            "ok": ok,
        },
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))

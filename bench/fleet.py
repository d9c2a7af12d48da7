"""A fleet (SPEC §8, §10): 64 worker processes, each running the real hook in its idle loop
for several intervals, over 1,000,000 jobs in 1,000 projects with 50,000 expired leases and
300 owned queues on the broker (ten of them dead-letter queues holding letters).

    python bench/fleet.py [--workers 64 --jobs 1000000 --expired 50000 --queues 300
                           --interval 8 --intervals 6 --url http://127.0.0.1:15672]

Prints, for the measured window: whole passes per interval fleet-wide (target 1; a pass whose
lease reap spent its budget with leases left is followed at once by an early turn, counted
apart, which must not start before that pass ended), the peak of PostgreSQL connections to the
database (target: at most one per worker, no pass failing for connections under the default
max_connections of 100), management API requests per interval fleet-wide (target: one pass's
worth; a worker that does not get the turn sends none), dead-letter bodies read by quiet
passes (target 0), and whether every expired lease was moved exactly once. Seeds a database
and a vhost of its own and removes both afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import dsn_for, migrated, report_result, scratch_database

from reaper.config import load_config
from reaper.edges.hook import QueueReaper

#: Dead-letter queues among the owned queues, and the letters each holds.
DEAD_LETTER_QUEUES = 10
LETTERS_PER_QUEUE = 20

# job g of n: project g % projects; the first `expired` jobs hold leases that expired ten
# minutes ago (every 25th with its attempts spent: poison); of the rest 90% succeeded, 8%
# ready (recent: not stale), 2% leased and live.
SEED_JOBS = """
INSERT INTO job (id, project_id, kind, state, run_after, attempts, max_attempts, lease_owner,
                 lease_expires_at, finished_at, created_at, updated_at)
SELECT gen_random_uuid(),
       ('00000000-0000-4000-9000-' || lpad(to_hex(g % $3), 12, '0'))::uuid,
       'build', s.state, now() - interval '1 minute',
       CASE WHEN g <= $2 AND g % 25 = 0 THEN 7 ELSE 1 END, 7,
       CASE WHEN s.state = 'leased' THEN 'worker-' || g % 64 END,
       CASE WHEN g <= $2 THEN now() - interval '10 minutes'
            WHEN s.state = 'leased' THEN now() + interval '1 day' END,
       CASE WHEN s.state = 'succeeded' THEN now() - interval '1 hour' END,
       now() - interval '1 day', now() - interval '1 day'
FROM generate_series(1, $1::int) AS g
CROSS JOIN LATERAL (
    SELECT CASE WHEN g <= $2 THEN 'leased'
                WHEN g % 50 < 45 THEN 'succeeded'
                WHEN g % 50 < 49 THEN 'ready'
                ELSE 'leased' END AS state
) AS s
"""


# --------------------------------------------------------------------------- one worker


async def worker(args: argparse.Namespace) -> None:
    """One worker process: the real hook in an idle loop from ``start_at`` to ``stop_at``;
    prints one JSON line per hook call that was due."""
    requests = 0
    original = httpx.AsyncClient.send

    async def counted(self: httpx.AsyncClient, *a: Any, **k: Any) -> httpx.Response:
        nonlocal requests
        requests += 1
        return await original(self, *a, **k)

    httpx.AsyncClient.send = counted  # type: ignore[method-assign]
    env = {
        "REAPER_DATABASE__DSN": args.dsn,
        "REAPER_BUS__MANAGEMENT_URL": args.url,
        "REAPER_BUS__VHOST": args.vhost,
        "REAPER_QUEUE__REAP__INTERVAL_SECONDS": str(args.interval),
        "REAPER_QUEUE__REAP__POLICY_VERIFY_WAIT_SECONDS": str(args.interval / 2),
    }
    reaper = QueueReaper(load_config(None, env).settings, holder=f"worker-{args.index}")
    project = uuid.UUID(int=args.index)
    await asyncio.sleep(max(0.0, args.start_at - time.time()))
    runs = []
    while time.time() < args.stop_at:
        before = requests
        run = await reaper.run_if_due(project)
        if run.due:
            result = run.result
            runs.append(
                {
                    "at": time.time(),
                    "ran": run.ran,
                    "error": run.error,
                    "taken_at": run.turn.taken_at.timestamp() if run.turn else None,
                    "requests": requests - before,
                    "seconds": result.duration_seconds if result else None,
                    "leases_remaining": result.leases.remaining if result else 0,
                    "moved": sum(
                        1 for r in result.verdicts if r.verdict.action.value in ("requeue", "park")
                    )
                    if result
                    else 0,
                    "bodies_read": [d.bodies_read for d in result.dead_letters.queues]
                    if result
                    else [],
                    "parked_letters": sum(d.parked_new for d in result.dead_letters.queues)
                    if result
                    else 0,
                }
            )
        await asyncio.sleep(0.2)
    await reaper.aclose()
    print(json.dumps(runs))


# --------------------------------------------------------------------------- the fleet


async def seed(dsn: str, args: argparse.Namespace) -> None:
    await migrated(dsn)
    conn = await asyncpg.connect(dsn)
    try:
        started = time.monotonic()
        await conn.execute(SEED_JOBS, args.jobs, args.expired, args.projects)
        await conn.execute("ANALYZE job")
        took = time.monotonic() - started
        print(f"seeded {args.jobs:,} jobs ({args.expired:,} expired) in {took:.1f} s")
    finally:
        await conn.close()


def broker_world(url: str, vhost: str, queues: int) -> httpx.Client:
    client = httpx.Client(base_url=url, auth=("guest", "guest"), timeout=60)
    path = vhost.replace("/", "%2F")
    client.put(f"/api/vhosts/{path}").raise_for_status()
    client.put(
        f"/api/permissions/{path}/guest", json={"configure": ".*", "write": ".*", "read": ".*"}
    ).raise_for_status()
    for n in range(queues):
        dead = n < DEAD_LETTER_QUEUES
        name = f"vibey.fleet.q{n:03d}" + (".dead" if dead else "")
        client.put(
            f"/api/queues/{path}/{name}", json={"durable": True, "arguments": {}}
        ).raise_for_status()
        for m in range(LETTERS_PER_QUEUE if dead else 0):
            client.post(
                f"/api/exchanges/{path}/amq.default/publish",
                json={
                    "properties": {"message_id": f"{name}-{m}"},
                    "routing_key": name,
                    "payload": json.dumps({"letter": m}),
                    "payload_encoding": "string",
                },
            ).raise_for_status()
    return client


async def sample_connections(dsn: str, stop: asyncio.Event) -> dict[str, int]:
    conn = await asyncpg.connect(dsn)
    peak = {"all": 0, "reaper": 0, "samples": 0}
    try:
        while not stop.is_set():
            row = await conn.fetchrow(
                "SELECT count(*) AS all_, count(*) FILTER (WHERE application_name = "
                "'queue-reaper') AS reaper FROM pg_stat_activity WHERE datname = current_database()"
            )
            peak["all"] = max(peak["all"], int(row["all_"]) - 1)  # not this sampler
            peak["reaper"] = max(peak["reaper"], int(row["reaper"]))
            peak["samples"] += 1
            await asyncio.sleep(0.02)
    finally:
        await conn.close()
    return peak


async def measure(args: argparse.Namespace) -> int:
    vhost = f"qr-bench-fleet-{uuid.uuid4().hex[:8]}"
    async with scratch_database("qr_bench_fleet") as name:
        dsn = dsn_for(name)
        await seed(dsn, args)
        admin = broker_world(args.url, vhost, args.queues)
        try:
            await asyncio.sleep(6)  # the broker's statistics show the letters
            start_at = time.time() + args.startup
            stop_at = start_at + args.interval * args.intervals
            processes = [
                subprocess.Popen(  # noqa: ASYNC220 - started once, before anything is timed
                    [
                        sys.executable,
                        __file__,
                        "--worker",
                        "--index",
                        str(i),
                        "--dsn",
                        dsn,
                        "--url",
                        args.url,
                        "--vhost",
                        vhost,
                        "--interval",
                        str(args.interval),
                        "--start-at",
                        str(start_at),
                        "--stop-at",
                        str(stop_at),
                    ],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                for i in range(args.workers)
            ]
            stop = asyncio.Event()
            sampler = asyncio.create_task(sample_connections(dsn, stop))
            outputs = await asyncio.gather(*(asyncio.to_thread(p.communicate) for p in processes))
            stop.set()
            peak = await sampler
            codes = [p.returncode for p in processes]
            moved_once = await leases_moved_once(dsn, args.expired)
        finally:
            admin.delete(f"/api/vhosts/{vhost}")
            admin.close()
    runs = [run for out, _ in outputs for run in _runs_of(out)]
    return report(args, runs, peak, codes, moved_once)


def _runs_of(output: str) -> list[dict[str, Any]]:
    """A worker's runs: the last line it printed (none when it failed before printing)."""
    lines = output.strip().splitlines()
    runs: list[dict[str, Any]] = json.loads(lines[-1]) if lines else []
    return runs


async def leases_moved_once(dsn: str, expired: int) -> dict[str, int]:
    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow(
            """
            SELECT count(*) AS moves, count(DISTINCT payload ->> 'object') AS jobs
            FROM event
            WHERE kind = 'QueueReaped' AND payload ->> 'action' IN ('requeue', 'park')
              AND payload ->> 'source' = 'job_queue'
            """
        )
        left = await conn.fetchval(
            "SELECT count(*) FROM job WHERE state = 'leased' AND lease_expires_at < now()"
        )
    finally:
        await conn.close()
    return {"moves": int(row["moves"]), "jobs": int(row["jobs"]), "still_expired": int(left)}


def report(
    args: argparse.Namespace,
    runs: list[dict[str, Any]],
    peak: dict[str, int],
    codes: list[int | None],
    moved: dict[str, int],
) -> int:
    passes = sorted((r for r in runs if r["ran"]), key=lambda r: r["taken_at"])
    asks = len(runs)
    errors = [r["error"] for r in runs if r["error"]]
    gaps = [b["taken_at"] - a["taken_at"] for a, b in itertools.pairwise(passes)]
    # A pass whose lease reap spent its budget with leases left hands the turn back, and the
    # next pass starts as soon as it ends (an early turn): that gap may be under the interval,
    # but never under the pass before it (one pass at a time). Every other gap is a whole
    # interval.
    early = [a["leases_remaining"] > 0 for a in passes[:-1]]
    early_turns = sum(early)
    gaps_ok = all(
        (g >= a["seconds"] if left else g >= args.interval)
        for g, a, left in zip(gaps, passes, early, strict=False)
    )
    on_interval = len(passes) - early_turns
    per_interval = len(passes) / args.intervals
    losers = [r for r in runs if not r["ran"]]
    loser_requests = sum(r["requests"] for r in losers)
    pass_requests = [r["requests"] for r in passes]
    requests_per_interval = sum(r["requests"] for r in runs) / args.intervals
    # a quiet pass: every dead letter already parked by an earlier pass
    first_park = next((i for i, r in enumerate(passes) if r["parked_letters"]), None)
    quiet = passes[first_park + 1 :] if first_park is not None else []
    quiet_bodies = [sum(r["bodies_read"]) for r in quiet]
    all_letters = DEAD_LETTER_QUEUES * LETTERS_PER_QUEUE
    parked = sum(r["parked_letters"] for r in passes)

    print(f"\n{args.workers} workers, interval {args.interval} s, {args.intervals} intervals")
    print(f"hook calls that were due: {asks:,}; whole passes: {len(passes)}; errors: {len(errors)}")
    print(
        f"passes per interval fleet-wide: {per_interval:.2f} (target 1, besides early turns: "
        f"{early_turns} of the {len(passes)} passes came at once after a pass that left "
        "expired leases)"
    )
    shown = ", ".join(f"{g:.2f}" + ("*" if e else "") for g, e in zip(gaps, early, strict=True))
    print(
        f"gaps between passes: {shown} s (each >= {args.interval}; * after a pass that left "
        "leases: >= that pass's length)"
    )
    print(
        f"peak PostgreSQL connections to the database: {peak['all']} "
        f"({peak['reaper']} the reaper's, {peak['samples']} samples; max_connections 100)"
    )
    print(
        f"management API requests per interval: {requests_per_interval:.1f}; one pass: "
        f"median {statistics.median(pass_requests) if pass_requests else 0}; "
        f"by the {len(losers):,} calls that did not get the turn: {loser_requests}"
    )
    print(f"dead letters parked: {parked} of {all_letters}")
    print(f"bodies read by each quiet pass: {quiet_bodies} (target 0)")
    print(
        f"leases: {moved['moves']:,} moves of {moved['jobs']:,} jobs ({args.expired:,} expired); "
        f"still expired: {moved['still_expired']}"
    )
    ok = (
        all(code == 0 for code in codes)
        and not errors
        and 1 <= on_interval <= args.intervals + 1
        and gaps_ok
        and peak["reaper"] <= args.workers
        and peak["all"] < 100
        and loser_requests == 0
        and parked == all_letters
        and bool(quiet_bodies)
        and all(b == 0 for b in quiet_bodies)
        and moved["moves"] == moved["jobs"] == args.expired
        and moved["still_expired"] == 0
    )
    print(f"fleet: {'PASS' if ok else 'FAIL'}")
    if errors:
        print("errors:", *sorted(set(errors))[:5], sep="\n  ")
    report_result(
        "fleet",
        {
            "workers": args.workers,
            "jobs": args.jobs,
            "expired": args.expired,
            "queues": args.queues,
            "interval_s": args.interval,
            "intervals": args.intervals,
            "passes": len(passes),
            "passes_per_interval": round(per_interval, 2),
            "early_turns": early_turns,
            "peak_connections": peak["all"],
            "peak_reaper_connections": peak["reaper"],
            "requests_per_interval": round(requests_per_interval, 1),
            "pass_requests": statistics.median(pass_requests) if pass_requests else 0,
            "loser_requests": loser_requests,
            "quiet_bodies_read": sum(quiet_bodies),
            "quiet_passes": len(quiet_bodies),
            "leases_moved": moved["moves"],
            "errors": len(errors),
            "ok": ok,
        },
    )
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--projects", type=int, default=1_000)
    parser.add_argument("--expired", type=int, default=50_000)
    parser.add_argument("--queues", type=int, default=300)
    parser.add_argument("--interval", type=int, default=8)
    parser.add_argument("--intervals", type=int, default=6)
    parser.add_argument("--startup", type=float, default=30.0, help="seconds for 64 to start")
    parser.add_argument(
        "--url", default=os.environ.get("REAPER_BUS__MANAGEMENT_URL", "http://127.0.0.1:15672")
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--dsn", help=argparse.SUPPRESS)
    parser.add_argument("--vhost", help=argparse.SUPPRESS)
    parser.add_argument("--start-at", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--stop-at", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(worker(args))
        return 0
    return asyncio.run(measure(args))


if __name__ == "__main__":
    sys.exit(main())

"""A pass's peak memory whatever the dead letters weigh (SPEC §11): ``--letters`` letters, each
with a ``--header-mib`` header and a ``--body-mib`` body, on one owned dead-letter queue of a
real broker, parked by real ``reaper reap --json`` passes, each in a child process whose peak
RSS is read from the kernel (``os.wait4``: that child's own ``ru_maxrss``, started from a
small launcher so that it does not inherit the bench's own RSS: ``bench/_common.py``).

    python bench/hostile_memory.py [--url http://127.0.0.1:15672 --letters 100
                                    --header-mib 2 --body-mib 5]

The letters are published, by a child process of their own, through the management API
(``/api/exchanges/.../publish``), as anyone with publish rights and the management tag can:
AMQP itself refuses a header that large (a content header is one frame, and RabbitMQ's
``frame_max`` is 131,072 bytes; measured: ``frame_too_large,2097182,131064`` on 3.10, 4.0
and 4.3). Half carry a ``message_id``, half none (known by the digest of what was read).
Passes run until every letter is parked, at most ``--passes``, with ``bus.timeout_seconds`` at
``--timeout``: the broker builds a ``get``'s whole answer before it sends a byte, and took 11
to 15 s for 100 such letters (RabbitMQ 3.10, load average 7), past the default 10 s. Target:
every pass's peak RSS under 100 MB, and every letter parked, by message id or by digest. The
vhost and the scratch database are removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
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
from broker_read import create_vhost

TARGET_MB = 100.0
DLQ = "vibey.jobs.dead"
MIB = 1024 * 1024


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:15672", help="management API")
    parser.add_argument("--user", default="guest")
    parser.add_argument("--password", default="guest")
    parser.add_argument("--letters", type=int, default=100)
    parser.add_argument("--header-mib", type=float, default=2.0)
    parser.add_argument("--body-mib", type=float, default=5.0)
    parser.add_argument("--passes", type=int, default=10)
    parser.add_argument(
        "--timeout",
        default="60",
        help="bus.timeout_seconds for the passes (default 60: the broker builds a get's whole "
        "answer before its first byte, 11 to 15 s for 100 such letters, past the default 10)",
    )
    parser.add_argument("--publish-into", help=argparse.SUPPRESS)  # the publishing child
    return parser.parse_args()


def publish(admin: httpx.Client, vhost: str, args: argparse.Namespace) -> None:
    """Every letter, each body starting with its number (so no two digests are alike)."""
    header = "h" * int(args.header_mib * MIB)
    filler = "x" * int(args.body_mib * MIB)
    for n in range(args.letters):
        properties: dict[str, object] = {
            "headers": {"x-first-death-queue": "vibey.jobs", "big": header}
        }
        if n % 2 == 0:
            properties["message_id"] = f"hostile-{n:04d}"
        admin.post(
            f"/api/exchanges/{quote(vhost, safe='')}/amq.default/publish",
            json={
                "routing_key": DLQ,
                "payload": f'{{"letter": {n}, "pad": "{filler}"}}',
                "payload_encoding": "string",
                "properties": properties,
            },
        ).raise_for_status()


def wait_for_depth(admin: httpx.Client, vhost: str, depth: int) -> None:
    """Until the listing shows every letter, with statistics (the pass reads what it lists)."""
    path = f"/api/queues/{quote(vhost, safe='')}/{quote(DLQ, safe='')}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if admin.get(path).json().get("messages") == depth:
            return
        time.sleep(1)
    raise SystemExit(f"{DLQ} did not list {depth} messages in 60 s")


async def parked(dsn: str) -> tuple[int, int, int, int]:
    """Letters parked: by message id, by digest; of them, how many were cut on reading;
    and dead_letter rows in all."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch("SELECT identity, body_truncated FROM dead_letter")
        events = await conn.fetch(
            "SELECT payload ->> 'detail' AS detail FROM event "
            "WHERE kind = 'QueueReaped' AND payload ->> 'action' = 'park'"
        )
    finally:
        await conn.close()
    by_id = sum(1 for r in rows if r["identity"].startswith("msg:"))
    cut = sum(1 for e in events if "cut on reading" in (e["detail"] or ""))
    return by_id, len(rows) - by_id, cut, len(rows)


async def main() -> int:
    args = arguments()
    if args.publish_into:
        with httpx.Client(base_url=args.url, auth=(args.user, args.password), timeout=300) as a:
            publish(a, args.publish_into, args)
        return 0
    load = os.getloadavg()
    print(
        f"hostile memory: {args.letters} letters of {args.header_mib:g} MiB headers and "
        f"{args.body_mib:g} MiB bodies on {DLQ} at {args.url}; load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    vhost = f"qr-bench-hostile-{uuid.uuid4().hex[:8]}"
    admin = httpx.Client(base_url=args.url, auth=(args.user, args.password), timeout=300)
    peaks: list[float] = []
    try:
        create_vhost(admin, vhost, args.user, [DLQ])
        started = time.perf_counter()
        # In a child: a pass's child forked from this process would count whatever this
        # process grew to while building the letters as its own resident memory.
        subprocess.run(  # noqa: ASYNC221
            [sys.executable, __file__, *sys.argv[1:], "--publish-into", vhost], check=True
        )
        wait_for_depth(admin, vhost, args.letters)
        print(f"published in {time.perf_counter() - started:.1f}s")
        async with scratch_database("qr_bench_hostile") as database:
            dsn = dsn_for(database)
            await migrated(dsn)
            env = {
                **os.environ,
                "REAPER_DATABASE__DSN": dsn,
                "REAPER_BUS__MANAGEMENT_URL": args.url,
                "REAPER_BUS__USERNAME": args.user,
                "REAPER_BUS__PASSWORD": args.password,
                "REAPER_BUS__VHOST": vhost,
                "REAPER_QUEUE__REAP__POLICY_VERIFY_WAIT_SECONDS": "2",
                "REAPER_BUS__TIMEOUT_SECONDS": args.timeout,
            }
            by_id = by_digest = cut = rows = 0
            for number in range(1, args.passes + 1):
                peak, elapsed, report = one_pass(env)
                peaks.append(peak)
                by_id, by_digest, cut, rows = await parked(dsn)
                print(
                    f"  pass {number}: peak RSS {peak:6.1f} MB, {elapsed:5.1f}s, "
                    f"status {report['status']!r}; parked {rows} ({by_id} by message id, "
                    f"{by_digest} by digest; {cut} cut on reading)"
                )
                for problem in report["problems"]:  # type: ignore[attr-defined]
                    print(f"    {problem['kind']}: {problem['subject']}: {problem['detail']}")
                if rows >= args.letters:
                    break
                await asyncio.sleep(5)  # the listing's statistics catch up with the last read
    finally:
        admin.delete(f"/api/vhosts/{quote(vhost, safe='')}")  # noqa: ASYNC212
        admin.close()  # noqa: ASYNC212

    worst = max(peaks)
    every = rows == args.letters
    ok = worst < TARGET_MB and every
    print()
    print(f"peak RSS of the worst pass: {worst:.1f} MB (target < {TARGET_MB:g})")
    print(f"letters parked: {rows} of {args.letters}: {'PASS' if ok else 'FAIL'}")
    report_result(
        "hostile_memory",
        {
            "letters": args.letters,
            "header_mib": args.header_mib,
            "body_mib": args.body_mib,
            "peak_rss_mb": round(worst, 1),
            "parked": rows,
            "parked_by_message_id": by_id,
            "parked_by_digest": by_digest,
            "passes": len(peaks),
            "ok": ok,
        },
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

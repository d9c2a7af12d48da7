"""The pass's broker read against one column-projected listing (SPEC §8).

Against a real broker: creates a vhost holding ``--queues`` queues (one definitions import),
then times, best of ``--repeat`` runs each, alternating:

  (a) the pass's broker read: ``ManagementClient.facts()`` + ``ManagementClient.list_queues()``
  (b) one column-projected ``GET /api/queues/{vhost}?columns=...``, no pagination, plain httpx
  (c) one ``GET /api/queues/{vhost}/{name}`` per queue, for reference (once)

and prints seconds, request counts and the ratio a/b: PASS when a/b is at most 1.5 and the
pass made fewer requests than there are queues. Every timed read starts ``--pause`` seconds
after the one before: the management plugin serves a listing asked for again soon after another
from its cache (for a few times as long as computing it took; measured on 3.10: 0.28-0.33 s
right after a listing, 0.59-0.60 s five seconds later), and a pass comes minutes after the
last one, so both (a) and (b) are timed as they would be then, from no warm cache. The vhost
is deleted at the end. Exit code 0 on PASS, 1 on FAIL.

    python bench/broker_read.py [--url http://127.0.0.1:15672] [--queues 3000]

The test brokers: RabbitMQ 3.10 at http://127.0.0.1:15672 (the default), 4.0 at :15673, 4.3 at
:15674; ``bench/run_all`` runs it on each.
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

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import report_result

from reaper.broker.client import DEFAULT_PAGE_SIZE, ManagementClient
from reaper.broker.records import QUEUE_COLUMNS

TARGET_RATIO = 1.5
#: Statistics of freshly declared queues arrive a few seconds later; the pass reads settled
#: queues, so the bench waits for them before timing anything.
SETTLE_SECONDS = 60


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:15672", help="management API")
    parser.add_argument("--user", default="guest")
    parser.add_argument("--password", default="guest")
    parser.add_argument("--queues", type=int, default=3000)
    parser.add_argument("--page-size", type=int, default=DEFAULT_PAGE_SIZE)
    parser.add_argument("--repeat", type=int, default=5, help="runs of (a) and (b); best counts")
    parser.add_argument(
        "--pause",
        type=float,
        default=5.0,
        help="seconds before each timed read, for the management cache to expire (default 5)",
    )
    parser.add_argument("--skip-per-queue", action="store_true", help="do not time (c)")
    return parser.parse_args()


def create_vhost(admin: httpx.Client, vhost: str, user: str, names: list[str]) -> None:
    path = quote(vhost, safe="")
    admin.put(f"/api/vhosts/{path}").raise_for_status()
    admin.put(
        f"/api/permissions/{path}/{quote(user, safe='')}",
        json={"configure": ".*", "write": ".*", "read": ".*"},
    ).raise_for_status()
    queues = [
        {"name": n, "durable": True, "auto_delete": False, "arguments": {"x-queue-type": "classic"}}
        for n in names
    ]
    admin.post(f"/api/definitions/{path}", json={"queues": queues}, timeout=600).raise_for_status()


def wait_for_statistics(admin: httpx.Client, vhost: str, names: list[str]) -> None:
    """Wait, at most :data:`SETTLE_SECONDS`, until the listing names every queue with its
    statistics. A listing that answers anything but 200 (the vhost not served yet) is asked
    again, never read as a list."""
    deadline = time.monotonic() + SETTLE_SECONDS
    missing = "nothing read yet"
    while time.monotonic() < deadline:
        answer = admin.get(
            f"/api/queues/{quote(vhost, safe='')}", params={"columns": "name,messages_ready"}
        )
        if answer.status_code != 200:
            missing = f"the listing answered {answer.status_code}"
        else:
            counted = {str(q.get("name")) for q in answer.json() if "messages_ready" in q}
            left = len(set(names) - counted)
            missing = f"{left} of {len(names)} queues not listed with statistics" if left else ""
            if not missing:
                return
        time.sleep(1)
    print(f"warning: after {SETTLE_SECONDS} s {missing}")


async def pass_read(args: argparse.Namespace, vhost: str) -> tuple[float, int, int]:
    async with ManagementClient(
        args.url, args.user, args.password, vhost=vhost, page_size=args.page_size
    ) as client:
        started = time.perf_counter()
        await client.facts()
        queues = await client.list_queues()
        return time.perf_counter() - started, client.requests_made, len(queues)


async def one_listing(args: argparse.Namespace, vhost: str) -> tuple[float, int]:
    async with httpx.AsyncClient(
        base_url=args.url, auth=(args.user, args.password), timeout=60
    ) as http:
        started = time.perf_counter()
        r = await http.get(
            f"/api/queues/{quote(vhost, safe='')}", params={"columns": ",".join(QUEUE_COLUMNS)}
        )
        r.raise_for_status()
        listed = len(r.json())
        return time.perf_counter() - started, listed


async def per_queue(args: argparse.Namespace, vhost: str, names: list[str]) -> tuple[float, int]:
    """One GET per queue: the seconds and the 404s asked again. RabbitMQ 4.3 can answer 404
    for a queue its listing already names, for a moment after the queue was declared: such a
    read is asked again, at most :data:`SETTLE_SECONDS` in all, and counted."""
    deadline = time.monotonic() + SETTLE_SECONDS
    again = 0
    async with httpx.AsyncClient(
        base_url=args.url, auth=(args.user, args.password), timeout=60
    ) as http:
        started = time.perf_counter()
        for name in names:
            path = f"/api/queues/{quote(vhost, safe='')}/{quote(name, safe='')}"
            r = await http.get(path)
            while r.status_code == 404 and time.monotonic() < deadline:
                again += 1
                await asyncio.sleep(0.2)
                r = await http.get(path)
            r.raise_for_status()
        return time.perf_counter() - started, again


async def measure(args: argparse.Namespace, vhost: str, names: list[str]) -> bool:
    passes: list[tuple[float, int, int]] = []
    listings: list[tuple[float, int]] = []
    for _ in range(args.repeat):
        await asyncio.sleep(args.pause)
        listings.append(await one_listing(args, vhost))
        await asyncio.sleep(args.pause)
        passes.append(await pass_read(args, vhost))
    a_seconds, a_requests, a_queues = min(passes)
    b_seconds, b_queues = min(listings)
    ratio = a_seconds / b_seconds
    pages = -(-len(names) // args.page_size)

    print(f"broker {args.url}, vhost {vhost!r}, {len(names)} queues, page_size {args.page_size}")
    print(f"(a) pass broker read (facts + list_queues): {a_seconds:.3f} s, {a_requests} requests,")
    print(f"    {a_queues} queues ({pages} pages + overview, node and consumers reads)")
    print(f"(b) one column-projected listing:          {b_seconds:.3f} s, 1 request,")
    print(f"    {b_queues} queues")
    c_seconds: float | None = None
    if not args.skip_per_queue:
        c_seconds, again = await per_queue(args, vhost, names)
        print(
            f"(c) one GET per queue (reference):          {c_seconds:.3f} s, {len(names)} requests"
            + (f" ({again} answered 404 at first and were asked again)" if again else "")
        )
    ok = ratio <= TARGET_RATIO and a_requests < len(names) and a_queues == len(names)
    verdict = "PASS" if ok else "FAIL"
    print(f"ratio a/b = {ratio:.2f} (target <= {TARGET_RATIO}), best of {args.repeat}: {verdict}")
    report_result(
        "broker_read",
        {
            "url": args.url,
            "queues": len(names),
            "pass_s": round(a_seconds, 3),
            "pass_requests": a_requests,
            "queues_read": a_queues,
            "listing_s": round(b_seconds, 3),
            "per_queue_s": round(c_seconds, 3) if c_seconds is not None else None,
            "ratio": round(ratio, 2),
            "load": [round(x, 2) for x in os.getloadavg()],
            "ok": ok,
        },
    )
    return ok


def main() -> int:
    args = arguments()
    vhost = f"qr-bench-{uuid.uuid4().hex[:8]}"
    names = [f"vibey.bench.{i:05d}" for i in range(args.queues)]
    with httpx.Client(base_url=args.url, auth=(args.user, args.password), timeout=60) as admin:
        try:
            started = time.perf_counter()
            create_vhost(admin, vhost, args.user, names)
            wait_for_statistics(admin, vhost, names)
            print(f"created {args.queues} queues in {time.perf_counter() - started:.1f} s")
            ok = asyncio.run(measure(args, vhost, names))
        finally:
            admin.delete(f"/api/vhosts/{quote(vhost, safe='')}", timeout=600)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""A broker of many queues (SPEC §8): at each size, one paginated listing with the reaper's
columns against one whole pass over the same vhost, the pass's requests and its peak RSS.

    python bench/broker_scale.py [--sizes 1000,10000,50000] [--url http://127.0.0.1:15673]

For each size a vhost of this run's own is filled by one ``POST /api/definitions`` import: a
tenth quorum queues owned by the reaper (``vibey.jobs.*``, a dead-letter exchange each), one
in fifty of them owned dead-letter queues (``*.dlq``), 20 owned classic queues, and the rest
classic queues of another tenant. A first pass writes the declared policies; once every queue
lists its statistics and policy, the listing (``ManagementClient.queue_pages``: the reaper's
columns, 500 a page, the next pages in flight) and the pass (``run_pass`` over sources opened
as ``reaper reap`` opens them, in a child process whose peak RSS the kernel reports through
``os.wait4``) alternate ``--repeat`` times; the best of each is compared. The vhost is deleted
after each size. Targets at the largest size: the pass within 1.1x one listing, peak RSS under
100 MB and within 10 MB of the smallest size's, and requests that grow with pages.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import dsn_for, migrated, report_result, scratch_database

from reaper.broker.client import DEFAULT_PAGE_SIZE, ManagementClient
from reaper.config import load_config
from reaper.reap.run import run_pass
from reaper.reap.sources import open_sources

TARGET_RATIO = 1.1
TARGET_MB = 100.0
FLAT_MB = 10.0
OWNED_CLASSIC = 20
SETTLE_SECONDS = 600


def definitions(n: int) -> list[dict[str, object]]:
    """``n`` queues: a tenth owned quorum (one in fifty of those a dead-letter queue), 20 owned
    classic, the rest another tenant's classic queues."""
    queues: list[dict[str, object]] = []
    for i in range(n):
        arguments: dict[str, object] = {"x-queue-type": "classic"}
        if i % 10 == 0:
            dlq = i % 500 == 0
            name = f"vibey.jobs.p{i:06d}" + (".dlq" if dlq else "")
            arguments = {"x-queue-type": "quorum"}
            if not dlq:
                arguments["x-dead-letter-exchange"] = "vibey.dlx"
        elif i % 10 == 1 and i // 10 < OWNED_CLASSIC:
            name = f"vibey.runs.e{i:06d}"
        else:
            name = f"tenant.work.{i:06d}"
        queues.append({"name": name, "durable": True, "auto_delete": False, "arguments": arguments})
    return queues


def create_vhost(admin: httpx.Client, vhost: str, user: str, n: int) -> float:
    path = quote(vhost, safe="")
    admin.put(f"/api/vhosts/{path}").raise_for_status()
    admin.put(
        f"/api/permissions/{path}/{quote(user, safe='')}",
        json={"configure": ".*", "write": ".*", "read": ".*"},
    ).raise_for_status()
    started = time.perf_counter()
    admin.post(
        f"/api/definitions/{path}", json={"queues": definitions(n)}, timeout=1800
    ).raise_for_status()
    return time.perf_counter() - started


def settled(admin: httpx.Client, vhost: str, n: int, policies: bool) -> bool:
    """Every queue lists its statistics and, ``policies``, every owned one the policy it
    carries."""
    listed = admin.get(
        f"/api/queues/{quote(vhost, safe='')}",
        params={"columns": "name,messages_ready,policy"},
        timeout=600,
    ).json()
    return len(listed) == n and all(
        "messages_ready" in q
        and (not policies or q.get("policy") or not q["name"].startswith("vibey."))
        for q in listed
    )


def wait_settled(admin: httpx.Client, vhost: str, n: int, *, policies: bool) -> float:
    started = time.perf_counter()
    while not settled(admin, vhost, n, policies):
        if time.perf_counter() - started > SETTLE_SECONDS:
            print(f"  warning: {n:,} queues not settled after {SETTLE_SECONDS} s")
            break
        time.sleep(2)
    return time.perf_counter() - started


async def one_listing(url: str, user: str, password: str, vhost: str) -> tuple[float, int, int]:
    """One paginated listing with the reaper's columns: seconds, requests, queues."""
    async with ManagementClient(url, user, password, vhost=vhost) as client:
        started = time.perf_counter()
        listed = 0
        async for page in client.queue_pages():
            listed += len(page)
        return time.perf_counter() - started, client.requests_made, listed


async def child() -> None:
    """One pass as ``reaper reap`` runs it, configured from the environment; prints JSON."""
    settings = load_config().settings
    sources = await open_sources(settings)
    try:
        started = time.perf_counter()
        result = await run_pass(
            settings,
            store=sources.store,
            broker=sources.broker,
            store_error=sources.store_error,
            broker_error=sources.broker_error,
        )
        seconds = time.perf_counter() - started
        requests = sources.broker.requests_made if sources.broker else 0
    finally:
        await sources.close()
    inventory = result.inventory()
    print(
        json.dumps(
            {
                "seconds": seconds,
                "requests": requests,
                "status": result.status(),
                "queues": (inventory.queues_owned or 0) + (inventory.queues_foreign or 0),
                "verdicts": len(list(result.surfaced())),
                "unreadable": [u.error for u in result.unreadable][:3],
            }
        )
    )


def one_pass(env: dict[str, str]) -> tuple[float, float, dict[str, object]]:
    """A pass in a child: its peak RSS (MB), wall seconds and what it printed."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, __file__, "--child"], stdout=subprocess.PIPE, env=env, text=True
    )
    assert process.stdout is not None
    out = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.perf_counter() - started
    figures: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return usage.ru_maxrss / 1024, elapsed, figures  # ru_maxrss is in KiB on Linux


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


async def one_size(args: argparse.Namespace, admin: httpx.Client, dsn: str, n: int) -> dict:
    vhost = f"qr-bench-scale-{uuid.uuid4().hex[:8]}"
    try:
        imported = create_vhost(admin, vhost, args.user, n)
        env = {
            **os.environ,
            "REAPER_DATABASE__DSN": dsn,
            "REAPER_BUS__MANAGEMENT_URL": args.url,
            "REAPER_BUS__USERNAME": args.user,
            "REAPER_BUS__PASSWORD": args.password,
            "REAPER_BUS__VHOST": vhost,
        }
        wait_settled(
            admin, vhost, n, policies=False
        )  # statistics first: a queue without them is kept
        warm_mb, warm_s, warm = one_pass(env)  # writes the policies
        waited = wait_settled(admin, vhost, n, policies=True)
        print(
            f"  {n:,} queues: imported in {imported:.1f} s; first pass (writes the policies) "
            f"{warm_s:.1f} s, {warm_mb:.0f} MB, {warm['status']}; settled {waited:.0f} s later"
        )
        listings, passes = [], []
        for _ in range(args.repeat):
            listings.append(await one_listing(args.url, args.user, args.password, vhost))
            passes.append(one_pass(env))
        for (l_s, l_req, listed), (mb, wall, figures) in zip(listings, passes, strict=True):
            print(
                f"    listing {l_s:.2f} s ({l_req} requests, {listed:,} queues); pass "
                f"{figures['seconds']:.2f} s in the pass, {wall:.2f} s whole process, "
                f"{figures['requests']} requests, peak RSS {mb:.1f} MB, {figures['status']}"
            )
        listing_s = min(l_s for l_s, _, _ in listings)
        best = min(passes, key=lambda p: float(p[2]["seconds"]))  # type: ignore[arg-type]
        pass_s = float(best[2]["seconds"])  # type: ignore[arg-type]
        return {
            "queues": n,
            "listing_s": round(listing_s, 2),
            "listing_requests": listings[0][1],
            "pass_s": round(pass_s, 2),
            "pass_wall_s": round(min(p[1] for p in passes), 2),
            "ratio": round(pass_s / listing_s, 2),
            "requests": best[2]["requests"],
            "peak_mb": round(max(p[0] for p in passes), 1),
            "status": best[2]["status"],
            "uptime": uptime(),
        }
    finally:
        admin.delete(f"/api/vhosts/{quote(vhost, safe='')}", timeout=1800)  # noqa: ASYNC212


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,50000", help="comma-separated")
    parser.add_argument("--url", default="http://127.0.0.1:15673", help="management API")
    parser.add_argument("--user", default="guest")
    parser.add_argument("--password", default="guest")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        await child()
        return 0
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"broker scale at {args.url}, sizes {', '.join(f'{n:,}' for n in sizes)}")
    print(f"  {uptime()}")
    rows = []
    with httpx.Client(base_url=args.url, auth=(args.user, args.password), timeout=120) as admin:
        async with scratch_database("qr_bench_scale") as database:
            await migrated(dsn_for(database))
            for n in sizes:
                rows.append(await one_size(args, admin, dsn_for(database), n))
    print()
    print(
        f"{'queues':>8} {'listing s':>10} {'pass s':>8} {'ratio':>6} {'requests':>9} "
        f"{'pages':>6} {'peak MB':>8}  uptime"
    )
    for r in rows:
        pages = -(-r["queues"] // DEFAULT_PAGE_SIZE)
        print(
            f"{r['queues']:>8,} {r['listing_s']:>10} {r['pass_s']:>8} {r['ratio']:>6} "
            f"{r['requests']:>9} {pages:>6} {r['peak_mb']:>8}  {r['uptime']}"
        )
    largest, smallest = rows[-1], rows[0]
    growth = largest["peak_mb"] - smallest["peak_mb"]
    ok_ratio = largest["ratio"] <= TARGET_RATIO
    ok_memory = largest["peak_mb"] < TARGET_MB and growth <= FLAT_MB
    ok_requests = all(r["requests"] < r["queues"] / 10 + 20 for r in rows)
    ok = ok_ratio and ok_memory and ok_requests
    print(
        f"at {largest['queues']:,} queues: pass {largest['ratio']}x one listing (target <= "
        f"{TARGET_RATIO}); peak RSS {largest['peak_mb']} MB (target < {TARGET_MB:g}), "
        f"{growth:+.1f} MB from {smallest['queues']:,} queues (target <= {FLAT_MB:g}); "
        f"requests grow with pages: {ok_requests}: {'PASS' if ok else 'FAIL'}"
    )
    report_result(
        "broker_scale", {"url": args.url, "sizes": rows, "growth_mb": round(growth, 1), "ok": ok}
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))

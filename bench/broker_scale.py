"""A broker of many queues (SPEC §8): at each size, one paginated listing with the reaper's
columns against one whole pass over the same vhost, the pass's requests and its peak RSS.

    python bench/broker_scale.py [--sizes 1000,10000] [--url http://127.0.0.1:15673]
    python bench/broker_scale.py --sizes 1000,10000,50000 --own-broker --version 4.3

For each size a vhost of this run's own is filled by ``POST /api/definitions`` imports of
5,000 queues each: a tenth quorum queues owned by the reaper (``vibey.jobs.*``, a dead-letter
exchange each), one in fifty of them owned dead-letter queues (``*.dlq``), 20 owned classic
queues, and the rest classic queues of another tenant. A first pass writes the declared
policies, asked again while it could not read the broker (a page that outlasted
``--timeout-seconds``, the reaper's ``bus.timeout_seconds``: such a pass writes no policy, and
the timed pass would then write them itself); once every queue lists its statistics and
policy, the listing
(``ManagementClient.queue_pages``: the reaper's columns, 500 a page, the next pages in flight)
and the pass (``run_pass`` over sources opened as ``reaper reap`` opens them, in a child
process that reports its own peak RSS, ``VmHWM``) alternate ``--repeat`` times; the best of each is
compared. Targets at the largest size: the pass within 1.1x one listing, peak RSS under 100 MB
and within 10 MB of the smallest size's, and requests that grow with pages.

Every wait is bounded by ``--wait-seconds`` and says what it waited for when it gives up. The
vhost is deleted after each size and on any exit (SIGINT and SIGTERM included), and the bench
waits until the broker no longer lists it; leftovers of an earlier run are deleted first
(``bench/_scratch_vhost.py``). With ``--own-broker`` each size runs on a throwaway node of
its own instead (``bench/_own_broker.py``), stopped and removed after it, vhost and all.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import dsn_for, migrated, own_peak_mb, report_result, scratch_database
from _own_broker import TREES, own_broker
from _scratch_vhost import ScratchVhosts, exit_on_signals

from reaper.broker.client import DEFAULT_PAGE_SIZE, ManagementClient
from reaper.config import load_config
from reaper.reap import measure as measure_step
from reaper.reap.run import run_pass
from reaper.reap.sources import open_sources

TARGET_RATIO = 1.1
TARGET_MB = 100.0
FLAT_MB = 10.0
OWNED_CLASSIC = 20
#: The largest size run on a broker others use (the test brokers of scripts/services).
SHARED_BROKER_LIMIT = 20_000
#: Queues per definitions import: each import is one request, which the broker must finish
#: before it closes the request.
IMPORT_BATCH = 5000
#: The bound of one page of the settle-wait's listing: a page that outlasts it is asked again
#: (within the wait), so that one answer the node never sends cannot hold the whole wait.
SETTLE_PAGE_SECONDS = 120.0
#: The default bound of each wait (the import, statistics, policies, one listing, one pass):
#: at 10,000 queues on 2 shared cores the import took 36 s and a listing 10 to 20 s.
WAIT_SECONDS = 600.0


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


def fill_vhost(admin: httpx.Client, vhost: str, n: int, seconds: float) -> float:
    """Import ``n`` queues into ``vhost`` by definitions imports of :data:`IMPORT_BATCH`
    queues each, all within ``seconds``. (RabbitMQ 4.0 closed one import of 50,000 queues
    after about five minutes with 36,677 made: a request is cut long before such an import
    ends on 2 busy cores.)"""
    started = time.perf_counter()
    deadline = time.monotonic() + seconds
    queues = definitions(n)
    for first in range(0, n, IMPORT_BATCH):
        try:
            admin.post(
                f"/api/definitions/{quote(vhost, safe='')}",
                json={"queues": queues[first : first + IMPORT_BATCH]},
                timeout=max(1.0, deadline - time.monotonic()),
            ).raise_for_status()
        except httpx.HTTPError as e:
            raise SystemExit(
                f"  the import of queues {first:,} to {first + IMPORT_BATCH:,} of {n:,} failed "
                f"({type(e).__name__}: {e}) {time.perf_counter() - started:.0f} s in: the broker "
                "is overloaded or the size too large for it; try a smaller --sizes or a larger "
                "--wait-seconds"
            ) from None
    return time.perf_counter() - started


def unsettled(admin: httpx.Client, vhost: str, n: int, policies: bool, deadline: float) -> str:
    """What is not settled yet ('' when nothing is): every queue lists its statistics and,
    ``policies``, every owned one the policy it carries. Read a page at a time, each page
    bounded by :data:`SETTLE_PAGE_SECONDS` and every page by ``deadline``."""
    listed = without_counts = without_policy = 0
    page, pages = 1, 1
    while page <= pages:
        answer = admin.get(
            f"/api/queues/{quote(vhost, safe='')}",
            params={
                "page": page,
                "page_size": DEFAULT_PAGE_SIZE,
                "columns": "name,messages_ready,policy",
            },
            timeout=max(1.0, min(SETTLE_PAGE_SECONDS, deadline - time.monotonic())),
        ).json()
        pages = int(answer.get("page_count") or 1)
        for q in answer["items"]:
            listed += 1
            without_counts += "messages_ready" not in q
            without_policy += policies and not q.get("policy") and q["name"].startswith("vibey.")
        page += 1
    missing = [
        f"{n - listed:,} of {n:,} queues not listed" if listed < n else "",
        f"{without_counts:,} without statistics" if without_counts else "",
        f"{without_policy:,} owned without their policy" if without_policy else "",
    ]
    return ", ".join(m for m in missing if m)


def wait_settled(
    admin: httpx.Client, vhost: str, n: int, *, policies: bool, seconds: float
) -> tuple[float, str]:
    """Wait at most ``seconds`` for :func:`unsettled` to find nothing: the seconds waited and
    what was still missing when the wait gave up ('' when it did not)."""
    started = time.monotonic()
    deadline = started + seconds
    missing = "nothing read yet"  # what the last whole walk found missing
    broken: list[str] = []  # the walks a page cut short, and why
    while time.monotonic() < deadline:
        try:
            missing = unsettled(admin, vhost, n, policies, deadline)
        except httpx.TimeoutException:
            # a page the node did not answer in time: the walk is asked again, within the
            # deadline
            broken.append("a page did not answer in time")
            continue
        except httpx.TransportError as e:
            # a busy node closes a kept-alive connection as a request goes out (seen on 4.3
            # at 50,000 queues): asked again, within the deadline
            broken.append(f"the listing broke off ({type(e).__name__}: {e})")
            time.sleep(2)
            continue
        if not missing:
            break
        time.sleep(2)
    waited = time.monotonic() - started
    if missing:
        what = "statistics and policies" if policies else "statistics"
        cut = f" ({len(broken)} walk(s) cut short, the last: {broken[-1]})" if broken else ""
        print(
            f"  gave up waiting for {what} after {waited:.0f} s: {missing}{cut}. The passes "
            "below judge fewer queues than a settled broker's would (one listed without "
            "statistics is named, not judged); a broker this slow to emit them is loaded (see "
            "uptime) or too small for the size (4.0.5 at 50,000 queues: a few dozen to a "
            "hundred never listed them)"
        )
    return waited, missing


async def one_listing(
    url: str, user: str, password: str, vhost: str, request_seconds: float
) -> tuple[float, int, int]:
    """One paginated listing with the reaper's columns, each request bounded by ``request_seconds``
    as the pass's are: seconds, requests, queues."""
    async with ManagementClient(
        url, user, password, vhost=vhost, timeout_seconds=request_seconds
    ) as client:
        started = time.perf_counter()
        listed = 0
        async for page in client.queue_pages():
            listed += len(page)
        return time.perf_counter() - started, client.requests_made, listed


def time_listings(spent: list[float]) -> None:
    """Add each of the pass's listings' seconds (:func:`read_listing`, paged and folded) to
    ``spent``: what is left of the pass is what it does beyond its listing."""
    read_listing = measure_step.read_listing

    async def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await read_listing(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - started)

    measure_step.read_listing = timed  # type: ignore[assignment]


async def child() -> None:
    """One pass as ``reaper reap`` runs it, configured from the environment; prints JSON."""
    settings = load_config().settings
    listings: list[float] = []
    time_listings(listings)
    sources = await open_sources(settings)
    try:
        started = time.perf_counter()
        result = await run_pass(settings, sources)
        seconds = time.perf_counter() - started
        requests = sources.broker.requests_made if sources.broker else 0
    finally:
        await sources.close()
    inventory = result.inventory()
    print(
        json.dumps(
            {
                "seconds": seconds,
                "listing_seconds": sum(listings),
                "requests": requests,
                "status": result.status(),
                "queues": (inventory.queues_owned or 0) + (inventory.queues_foreign or 0),
                "verdicts": len(list(result.surfaced())),
                "unreadable": [u.error for u in result.unreadable][:3],
                # what the pass held past its pages, and whether it wrote a policy (then it
                # waits for the policy to be applied and verifies it on a listing of its own)
                "kept": len(result.queues),
                "unavailable": sum(1 for u in result.unreadable if u.queue is not None),
                "sources_unreadable": [u.error for u in result.unreadable if u.queue is None],
                "policy_writes": [p.name for p in result.policies.outcomes if p.write],
                # this process's own (not ru_maxrss: that starts at the bench's own RSS,
                # which holds the queues' definitions, and grew with them)
                "peak_mb": own_peak_mb(),
            }
        )
    )


def one_pass(env: dict[str, str], seconds: float) -> tuple[float, float, dict[str, object]]:
    """A pass in a child, killed if it outlasts ``seconds``: its peak RSS (MB), wall seconds
    and what it printed."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, __file__, "--child"], stdout=subprocess.PIPE, env=env, text=True
    )
    try:
        out, _ = process.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        raise SystemExit(
            f"  the pass did not finish within {seconds:.0f} s (killed): the broker is "
            "overloaded or the pass stuck; run the size alone with --wait-seconds larger"
        ) from None
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    elapsed = time.perf_counter() - started
    if process.returncode != 0:
        raise SystemExit(f"  the pass's process exited {process.returncode}; its output: {out}")
    figures: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return float(figures["peak_mb"]), elapsed, figures  # type: ignore[arg-type]


def first_pass(env: dict[str, str], seconds: float) -> tuple[float, float, dict[str, object]]:
    """The pass that writes the declared policies, asked again, within ``seconds`` in all,
    while the broker could not be read: a pass that could not read the broker (a page of the
    listing that outlasted the request timeout: RabbitMQ sorts the whole vhost for each page,
    and a busy node serves a page of a big vhost in seconds) writes no policy, and every pass
    after it would write them in its place and be timed doing so."""
    deadline = time.monotonic() + seconds
    while True:
        mb, wall, figures = one_pass(env, max(1.0, deadline - time.monotonic()))
        broken = figures["sources_unreadable"]
        if not broken or time.monotonic() + wall > deadline:
            return mb, wall, figures
        print(f"  the first pass ({wall:.0f} s) could not read a source: {broken[0]}; again")  # type: ignore[index]


def held(figures: dict[str, object]) -> str:
    """What a pass kept past its pages, and the policies it wrote, in words."""
    wrote = figures.get("policy_writes") or []
    return (
        f"kept {figures.get('kept')} queues, {figures.get('unavailable')} unavailable"
        + (f"; wrote {', '.join(map(str, wrote))}" if wrote else "")  # type: ignore[call-overload]
    )


def beyond(figures: dict[str, object]) -> float:
    """The pass's seconds outside its listing of the queues."""
    return float(figures["seconds"]) - float(figures["listing_seconds"])  # type: ignore[arg-type]


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


async def one_size(
    args: argparse.Namespace, admin: httpx.Client, vhosts: ScratchVhosts, dsn: str, n: int
) -> dict:
    vhost = vhosts.create()
    wait = args.wait_seconds
    try:
        imported = fill_vhost(admin, vhost, n, wait)
        env = {
            **os.environ,
            "REAPER_DATABASE__DSN": dsn,
            "REAPER_BUS__MANAGEMENT_URL": args.url,
            "REAPER_BUS__USERNAME": args.user,
            "REAPER_BUS__PASSWORD": args.password,
            "REAPER_BUS__VHOST": vhost,
            "REAPER_BUS__TIMEOUT_SECONDS": str(args.timeout_seconds),
        }
        # statistics first: a queue without them is kept
        stats_s, _ = wait_settled(admin, vhost, n, policies=False, seconds=wait)
        warm_mb, warm_s, warm = first_pass(env, wait)
        waited, missing = wait_settled(admin, vhost, n, policies=True, seconds=wait)
        print(
            f"  {n:,} queues: imported in {imported:.1f} s, statistics {stats_s:.0f} s later; "
            f"first pass (writes the policies) {warm_s:.1f} s, {warm_mb:.0f} MB, "
            f"{warm['status']} ({held(warm)}); settled {waited:.0f} s later"
        )
        listings, passes = [], []
        for _ in range(args.repeat):
            listings.append(
                await asyncio.wait_for(
                    one_listing(args.url, args.user, args.password, vhost, args.timeout_seconds),
                    timeout=wait,
                )
            )
            passes.append(one_pass(env, wait))
            (l_s, l_req, listed), (mb, wall, figures) = listings[-1], passes[-1]
            print(
                f"    listing {l_s:.2f} s ({l_req} requests, {listed:,} queues); pass "
                f"{figures['seconds']:.2f} s in the pass ({beyond(figures):.2f} s beyond its "
                f"listing), {wall:.2f} s whole process, "
                f"{figures['requests']} requests, peak RSS {mb:.1f} MB, {figures['status']}; "
                f"{held(figures)} ({uptime()})"
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
            "beyond_listing_s": round(min(beyond(p[2]) for p in passes), 2),
            "requests": best[2]["requests"],
            "peak_mb": round(max(p[0] for p in passes), 1),
            "status": best[2]["status"],
            # a pass that could not read a source measured nothing
            "read": not any(p[2]["sources_unreadable"] for p in passes),
            "unsettled": missing,
            "uptime": uptime(),
        }
    finally:
        if not args.own_broker:  # an own node goes with its vhost
            vhosts.delete(vhost)


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000", help="comma-separated")
    parser.add_argument("--url", default="http://127.0.0.1:15673", help="management API")
    parser.add_argument("--user", default="guest")
    parser.add_argument("--password", default="guest")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument(
        "--wait-seconds",
        type=float,
        default=WAIT_SECONDS,
        help="bound of each wait: the import, statistics, policies, one listing, one pass",
    )
    parser.add_argument(
        "--timeout-seconds",
        type=float,
        default=10.0,
        help="each management request's bound, the listing's and the pass's alike "
        "(bus.timeout_seconds; default the reaper's own, 10)",
    )
    parser.add_argument(
        "--own-broker",
        action="store_true",
        help="each size on a throwaway node of the bench's own (instead of --url): sizes "
        f"above {SHARED_BROKER_LIMIT:,} allowed",
    )
    parser.add_argument(
        "--version", choices=sorted(TREES), default="4.0", help="the --own-broker's RabbitMQ"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args()


@contextlib.contextmanager
def broker(args: argparse.Namespace) -> Iterator[tuple[httpx.Client, ScratchVhosts]]:
    """The broker of one size: ``--url``'s, or a node of the bench's own."""
    with contextlib.ExitStack() as stack:
        if args.own_broker:
            args.url = stack.enter_context(own_broker(args.version))
        admin = stack.enter_context(
            httpx.Client(base_url=args.url, auth=(args.user, args.password), timeout=120)
        )
        vhosts = ScratchVhosts(admin, "qr-bench-scale-", args.user, "bench/broker_scale.py")
        if args.own_broker:
            yield admin, vhosts
            return
        vhosts.sweep()
        try:
            yield admin, vhosts
        finally:
            if not vhosts.delete_all():
                print("  a vhost of this run is still on the broker (above): delete it")


async def measure(args: argparse.Namespace) -> int:
    sizes = [int(s) for s in args.sizes.split(",")]
    where = f"own {args.version} node" if args.own_broker else args.url
    print(f"broker scale at {where}, sizes {', '.join(f'{n:,}' for n in sizes)}")
    print(f"  {uptime()}")
    rows = []
    async with scratch_database("qr_bench_scale") as database:
        await migrated(dsn_for(database))
        for n in sizes:
            with broker(args) as (admin, vhosts):
                rows.append(await one_size(args, admin, vhosts, dsn_for(database), n))
    print()
    print(
        f"{'queues':>8} {'listing s':>10} {'pass s':>8} {'ratio':>6} {'beyond s':>9} "
        f"{'requests':>9} {'pages':>6} {'peak MB':>8}  uptime"
    )
    for r in rows:
        pages = -(-r["queues"] // DEFAULT_PAGE_SIZE)
        print(
            f"{r['queues']:>8,} {r['listing_s']:>10} {r['pass_s']:>8} {r['ratio']:>6} "
            f"{r['beyond_listing_s']:>9} {r['requests']:>9} {pages:>6} {r['peak_mb']:>8}  "
            f"{r['uptime']}"
        )
    print(
        "(beyond s: the pass's seconds outside its own listing, the least of the repeats; the "
        "ratio moves with the listing's own spread on a loaded broker)"
    )
    largest, smallest = rows[-1], rows[0]
    growth = largest["peak_mb"] - smallest["peak_mb"]
    ok_ratio = largest["ratio"] <= TARGET_RATIO
    ok_memory = largest["peak_mb"] < TARGET_MB and growth <= FLAT_MB
    ok_requests = all(r["requests"] < r["queues"] / 10 + 20 for r in rows)
    settled = all(not r["unsettled"] for r in rows)
    read = all(r["read"] for r in rows)
    ok = ok_ratio and ok_memory and ok_requests and settled and read
    print(
        f"at {largest['queues']:,} queues: pass {largest['ratio']}x one listing (target <= "
        f"{TARGET_RATIO}); peak RSS {largest['peak_mb']} MB (target < {TARGET_MB:g}), "
        f"{growth:+.1f} MB from {smallest['queues']:,} queues (target <= {FLAT_MB:g}); "
        f"requests grow with pages: {ok_requests}"
        + ("" if settled else "; some queues never settled (above)")
        + ("" if read else "; a pass could not read a source (above)")
        + f": {'PASS' if ok else 'FAIL'}"
    )
    report_result(
        "broker_scale", {"url": where, "sizes": rows, "growth_mb": round(growth, 1), "ok": ok}
    )
    return 0 if ok else 1


def main() -> int:
    args = arguments()
    if args.child:
        asyncio.run(child())
        return 0
    if max(int(n) for n in args.sizes.split(",")) > SHARED_BROKER_LIMIT and not args.own_broker:
        print(
            f"a size above {SHARED_BROKER_LIMIT:,} queues is refused on a shared test broker: "
            "at 40,000 RabbitMQ 4.0 slowed to a crawl for every user of it and could not delete "
            "the vhost (docs/benchmarks.md). Pass --own-broker for a broker of the bench's own."
        )
        return 2
    exit_on_signals()
    return asyncio.run(measure(args))


if __name__ == "__main__":
    raise SystemExit(main())

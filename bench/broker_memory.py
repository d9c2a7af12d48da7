"""A pass's peak memory over a broker of many queues, with no broker (SPEC §8): a replay of
RabbitMQ's management API serves synthetic queue pages, and one whole pass reads them in a
child process that reports its own peak RSS.

    python bench/broker_memory.py [--sizes 1000,10000,50000,100000] [--page-delay 0.05]

The replay (a child process of this script, on a port of its own) answers what a pass reads:
``/api/overview`` (RabbitMQ ``--version``), ``/api/nodes``, the vhost's channels and
consumers (none), its policies (the declared ones, as rendered for that version) and
``/api/queues/{vhost}`` a page at a time, gzipped as RabbitMQ sends it, with the reaper's
columns and in RabbitMQ's shape. The queues are ``bench/broker_scale.py``'s mix (a tenth owned
quorum queues, one in fifty of them owned dead-letter queues, 20 owned classic, the rest another
tenant's classic queues), each with its statistics and the declared policy in force, so the pass
keeps only the 20 owned classic queues (they carry a finding) and counts the rest. Each page
waits ``--page-delay`` seconds before it is sent, as a busy node takes its time: the pages in
flight then finish together.

Each size runs ``--repeat`` passes, each ``bench/broker_scale.py``'s (``run_pass`` over sources
opened as ``reaper reap`` opens them, on a scratch database) in a child that reports its own
peak RSS (``VmHWM``). Targets: under 100 MB, and the largest size within 10 MB of the smallest,
each pass keeping only the 20 queues with a finding and writing no policy. Only memory is
judged: times on a shared machine are not figures. ``--pages-ahead N`` asks the listing for N
pages ahead instead of the reaper's ``PAGE_CONCURRENCY``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar
from urllib.parse import parse_qs, unquote, urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import dsn_for, migrated, report_result, scratch_database
from broker_scale import OWNED_CLASSIC, child, definitions

from reaper.broker import client
from reaper.broker.capabilities import capabilities_for
from reaper.config import load_config
from reaper.policies.render import DesiredPolicy
from reaper.reap.policies import desired_for

FLAT_MB = 10.0
TARGET_MB = 100.0
VHOST = "qr-bench-memory"
#: The pages the child's listing asks ahead (``--pages-ahead``), when not the reaper's own.
PAGES_AHEAD = "QR_BENCH_PAGES_AHEAD"
NODE = "rabbit@replay"


def queue_item(queue: dict[str, object], desired: list[DesiredPolicy]) -> dict[str, object]:
    """One queue as RabbitMQ 4.x lists it with the reaper's columns: settled statistics, the
    declared policy in force where one selects it."""
    arguments = queue["arguments"]
    assert isinstance(arguments, dict)
    kind = str(arguments["x-queue-type"])
    name = str(queue["name"])
    chosen = [d for d in desired if d.queue_type == kind and re.search(d.pattern, name)]
    policy = max(chosen, key=lambda d: d.priority) if chosen else None
    effective = dict(policy.definition) if policy else {}
    item: dict[str, object] = {
        "arguments": arguments,
        "consumers": 0,
        "effective_policy_definition": effective,
        "head_message_timestamp": None,
        "message_bytes": 0,
        "message_bytes_ready": 0,
        "message_bytes_unacknowledged": 0,
        "message_stats": {"publish": 3, "ack": 3, "deliver_get": 3},
        "messages_ready": 0,
        "messages_unacknowledged": 0,
        "name": name,
        "node": NODE,
        "policy": policy.name if policy else None,
        "state": "running",
        "type": kind,
        "vhost": VHOST,
    }
    if kind == "quorum":
        limit = effective.get("delivery-limit", 20)
        item |= {"delivery_limit": limit, "leader": NODE, "members": [NODE], "online": [NODE]}
    return item


class Replay(BaseHTTPRequestHandler):
    """RabbitMQ's management API as a pass reads it, from :attr:`pages`."""

    protocol_version = "HTTP/1.1"
    items: ClassVar[list[dict[str, object]]] = []
    policies: ClassVar[list[dict[str, object]]] = []
    version = "4.3.0"
    page_delay = 0.0

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        path, query = unquote(url.path), parse_qs(url.query)
        if path == "/api/overview":
            self.answer({"rabbitmq_version": self.version, "product_name": "RabbitMQ"})
        elif path == "/api/nodes":
            self.answer([{"name": NODE, "running": True, "config_files": []}])
        elif path == f"/api/queues/{VHOST}":
            self.page(int(query["page"][0]), int(query["page_size"][0]))
        elif path == f"/api/policies/{VHOST}":
            self.answer(self.policies)
        elif path in (f"/api/vhosts/{VHOST}/channels", f"/api/consumers/{VHOST}"):
            self.answer([])
        else:
            self.answer({"error": "Object Not Found", "reason": "Not Found"}, 404)

    def page(self, number: int, size: int) -> None:
        time.sleep(self.page_delay)
        total = len(self.items)
        self.answer(
            {
                "filtered_count": total,
                "item_count": len(self.items[(number - 1) * size : number * size]),
                "items": self.items[(number - 1) * size : number * size],
                "page": number,
                "page_count": max(1, -(-total // size)),
                "page_size": size,
                "total_count": total,
            }
        )

    def answer(self, body: object, status: int = 200) -> None:
        data = json.dumps(body).encode()
        gzipped = "gzip" in self.headers.get("accept-encoding", "")
        if gzipped:
            data = gzip.compress(data, 6)
        self.send_response(status)
        self.send_header("content-type", "application/json")
        if gzipped:
            self.send_header("content-encoding", "gzip")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


def serve(port: int, queues: int, version: str, page_delay: float) -> None:
    """The replay, until killed."""
    settings = load_config().settings
    desired = desired_for(settings, capabilities_for("RabbitMQ", version))
    names = definitions(queues)
    Replay.items = sorted((queue_item(q, desired) for q in names), key=lambda i: str(i["name"]))
    Replay.policies = [
        {
            "name": d.name,
            "pattern": d.pattern,
            "apply-to": d.apply_to,
            "priority": d.priority,
            "definition": dict(d.definition),
            "vhost": VHOST,
        }
        for d in desired
    ]
    Replay.version, Replay.page_delay = version, page_delay
    server = ThreadingHTTPServer(("127.0.0.1", port), Replay)
    print("ready", flush=True)
    server.serve_forever()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def replay(env: dict[str, str], queues: int, args: argparse.Namespace) -> Iterator[str]:
    """The replay of ``queues`` queues in a child process; its URL."""
    port = free_port()
    command = [sys.executable, __file__, "--serve", str(port), "--sizes", str(queues)]
    command += ["--version", args.version, "--page-delay", str(args.page_delay)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, env=env, text=True)
    try:
        assert process.stdout is not None
        if process.stdout.readline().strip() != "ready":
            raise SystemExit(f"the replay of {queues:,} queues did not start")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.kill()
        process.wait()


def one_pass(env: dict[str, str]) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, __file__, "--child"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    if out.returncode != 0:
        raise SystemExit(f"the pass's process exited {out.returncode}: {out.stderr[-2000:]}")
    figures: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return figures


async def measure(args: argparse.Namespace) -> int:
    sizes = [int(s) for s in args.sizes.split(",")]
    load = os.getloadavg()
    print(
        f"broker memory (replayed RabbitMQ {args.version}, {args.page_delay:g} s a page), sizes "
        f"{', '.join(f'{n:,}' for n in sizes)}; load average {load[0]:.2f}"
    )
    rows = []
    async with scratch_database("qr_bench_broker_memory") as database:
        await migrated(dsn_for(database))
        base = {
            **os.environ,
            "REAPER_DATABASE__DSN": dsn_for(database),
            "REAPER_BUS__USERNAME": "guest",
            "REAPER_BUS__PASSWORD": "guest",
            "REAPER_BUS__VHOST": VHOST,
            "REAPER_BUS__TIMEOUT_SECONDS": "120",
            **({PAGES_AHEAD: str(args.pages_ahead)} if args.pages_ahead else {}),
        }
        for n in sizes:
            with replay(base, n, args) as url:
                env = {**base, "REAPER_BUS__MANAGEMENT_URL": url}
                peaks = [one_pass(env) for _ in range(args.repeat)]
            figures = peaks[-1]
            peak = max(float(p["peak_mb"]) for p in peaks)  # type: ignore[arg-type]
            listed = ", ".join(f"{float(p['peak_mb']):.1f}" for p in peaks)  # type: ignore[arg-type]
            print(
                f"  {n:>7,} queues: peak RSS {listed} MB; "
                f"{figures['requests']} requests, kept {figures['kept']} queues, "
                f"{figures['status']}; load average {os.getloadavg()[0]:.2f}"
            )
            # a pass that wrote a policy or could not read measured something else
            measured = all(
                not p["policy_writes"] and not p["unreadable"] and p["kept"] == OWNED_CLASSIC
                for p in peaks
            )
            if not measured:
                print(f"    not the pass measured: {figures}")
            rows.append(
                {
                    "queues": n,
                    "peak_mb": round(peak, 1),
                    "requests": figures["requests"],
                    "measured": measured,
                }
            )
    growth = rows[-1]["peak_mb"] - rows[0]["peak_mb"]  # type: ignore[operator]
    ok = (
        growth <= FLAT_MB
        and rows[-1]["peak_mb"] < TARGET_MB  # type: ignore[operator]
        and all(r["measured"] for r in rows)
    )
    print(
        f"peak RSS at {sizes[-1]:,} queues {rows[-1]['peak_mb']} MB (target < {TARGET_MB:g}), "
        f"{growth:+.1f} MB from {sizes[0]:,} (target <= {FLAT_MB:g}): {'PASS' if ok else 'FAIL'}"
    )
    load = os.getloadavg()
    report_result(
        "broker_memory",
        {"sizes": rows, "growth_mb": round(growth, 1), "load": round(load[0], 2), "ok": ok},
    )
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,50000")
    parser.add_argument("--version", default="4.3.0", help="the RabbitMQ version replayed")
    parser.add_argument("--page-delay", type=float, default=0.05, help="seconds before a page")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--pages-ahead", type=int, help="pages the listing asks ahead (the reaper's own: 4)"
    )
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, int(args.sizes), args.version, args.page_delay)
        return 0
    if args.child:  # broker_scale.py's pass, with the pages ahead asked
        if os.environ.get(PAGES_AHEAD):
            client.PAGE_CONCURRENCY = int(os.environ[PAGES_AHEAD])  # type: ignore[misc]
        asyncio.run(child())
        return 0
    return asyncio.run(measure(args))


if __name__ == "__main__":
    raise SystemExit(main())

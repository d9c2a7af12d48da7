"""The worker hook when not due: what an idle worker pays per call, and proof that it does
no I/O (SPEC §8: "run_if_due when not due: no I/O").

One pass runs first against the real local services (a scratch database of its own, migrated,
and the broker the ``REAPER_`` environment names), so the hook has taken the fleet's turn and
knows when to ask again; then 100,000 not-due calls are timed while every socket send and
receive is counted.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import dsn_for, migrated, report_result, scratch_database

from reaper.config import load_config
from reaper.edges.hook import QueueReaper

CALLS = 100_000


async def main() -> int:
    async with scratch_database("qr_bench_hook") as name:
        dsn = dsn_for(name)
        await migrated(dsn)
        return await measure(dsn)


async def measure(dsn: str) -> int:
    environ = {k: v for k, v in os.environ.items() if k.startswith("REAPER_")}
    settings = load_config(None, {**environ, "REAPER_DATABASE__DSN": dsn}).settings
    reaper = QueueReaper(settings)
    first = await reaper.run_if_due()
    print(f"first call: due={first.due}, ok={first.ok} (a whole pass against the real services)")

    sends = 0
    originals: dict[str, Any] = {}
    for name in ("send", "sendall", "sendto", "recv", "recv_into"):
        original = getattr(socket.socket, name)
        originals[name] = original

        def counting(self: socket.socket, *args: Any, _o: Any = original) -> Any:
            nonlocal sends
            sends += 1
            return _o(self, *args)

        setattr(socket.socket, name, counting)
    try:
        started = time.perf_counter()
        due = 0
        for _ in range(CALLS):
            due += (await reaper.run_if_due()).due
        elapsed = time.perf_counter() - started
    finally:
        for name, original in originals.items():
            setattr(socket.socket, name, original)
        await reaper.aclose()
    per_call_us = elapsed / CALLS * 1e6
    # a failed first pass would leave a hook with nothing open: the figure would prove less
    ok = first.ok and due == 0 and sends == 0
    print(f"{CALLS:,} not-due calls: {per_call_us:.2f} µs per call, {due} due, {sends} socket I/O")
    print(f"no I/O when not due: {'PASS' if ok else 'FAIL'}")
    report_result(
        "hook_idle",
        {"calls": CALLS, "per_call_us": round(per_call_us, 2), "socket_io": sends, "ok": ok},
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))

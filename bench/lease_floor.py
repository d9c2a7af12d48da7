"""How fast the lease reap's moves alone can go on this machine: the floor under the pass.

    python bench/lease_floor.py                          # 10,000 among 100,000, 3 rounds
    python bench/lease_floor.py --expired 200000 --finished 2000000 --rounds 1

On fresh copies of one seed (`bench/peers.py`'s, so the figures sit beside the peers'), each
round times three things back to back:

- **the pass**: the lease reap of one ``reaper reap`` pass (``reap_seeded`` of
  bench/lease_reap.py), with the CPU it cost PostgreSQL and this process;
- **the floor**: the same statement with no Python between batches: each lane's transactions
  run as the pass runs them (``BEGIN``, ``reap_lease_batch``, ``COMMIT``), the lanes at once,
  every batch of :data:`~reaper.jobqueue.lease_reap.BATCH_MAX`, nothing sized by its time,
  nothing kept for the report: what the moves cost were the pass's own Python free;
- **the floor without the event's indexes** (``--bare-ledger``): the floor again on a copy whose
  ``event`` table keeps only its primary key, to show what the ledger's indexes cost the moves.

The pass above the floor is the pass's own work in Python, on the same cores as the lanes'
PostgreSQL backends. The CPU is read off ``/proc`` (Linux): every PostgreSQL process's user and
system time, its exited children's included, and this process's own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import dsn_for, median, report_result, scratch_database
from lease_reap import reap_seeded
from peers import LIBRARIES, seed_template

from reaper.jobqueue.lease_reap import BATCH_MAX, FIRST_KEY, LANES, statement
from reaper.jobqueue.sql import QUERIES

_TICKS = os.sysconf("SC_CLK_TCK")


def postgres_cpu() -> float:
    """CPU seconds of every PostgreSQL process so far (the postmaster's exited children too)."""
    total = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue  # gone meanwhile
        if not stat[stat.index("(") + 1 : stat.rindex(")")].startswith("postgres"):
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return total / _TICKS


async def the_pass(dsn: str) -> dict[str, float]:
    cpu: dict[str, float] = {}

    async def ready() -> None:
        cpu["python"], cpu["postgres"] = time.process_time(), postgres_cpu()

    seconds, longest, moved = await reap_seeded(dsn, ready)
    return {
        "seconds": seconds,
        "longest_batch": longest,
        "moved": moved,
        "python_cpu": time.process_time() - cpu["python"],
        "postgres_cpu": postgres_cpu() - cpu["postgres"],
    }


async def the_floor(dsn: str) -> dict[str, float]:
    """Every expired lease moved by the pass's own statements in its lanes, batches of the
    largest size, with no Python between them: no sizing, nothing kept for the report."""
    conns = [await asyncpg.connect(dsn) for _ in range(LANES)]
    now = await conns[0].fetchval(QUERIES["database_now"])  # the database's clock
    reap = statement("reap_lease_batch")
    choices = json.dumps(["retry", "cancel"])

    async def run_lane(c: asyncpg.Connection, lane: int) -> None:
        after = FIRST_KEY
        while True:
            async with c.transaction():
                await c.execute(QUERIES["walk_leased_expiry_index"])
                row = await c.fetchrow(reap, now, 0, *after, None, lane, LANES, BATCH_MAX, choices)
                if not row["picked"]:
                    return
            after = (row["last_expiry"], row["last_id"])

    try:
        before, python = postgres_cpu(), time.process_time()
        started = time.perf_counter()
        await asyncio.gather(*(run_lane(c, n) for n, c in enumerate(conns)))
        seconds = time.perf_counter() - started
        spent, python = postgres_cpu() - before, time.process_time() - python
        moved = await conns[0].fetchval("SELECT count(*) FROM event WHERE kind = 'QueueReaped'")
    finally:
        for c in conns:
            await c.close()
    return {"seconds": seconds, "moved": moved, "postgres_cpu": spent, "python_cpu": python}


#: Every index of ``event`` but its primary key, for ``--bare-ledger``.
EVENT_INDEXES = """
SELECT indexrelid::regclass::text FROM pg_index
WHERE indrelid = 'event'::regclass AND NOT indisprimary
"""


async def bare_ledger(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        for (name,) in await conn.fetch(EVENT_INDEXES):
            await conn.execute(f"DROP INDEX {name}")
    finally:
        await conn.close()


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--expired", type=int, default=10_000, help="expired leases (default 10,000)"
    )
    parser.add_argument(
        "--finished", type=int, default=100_000, help="finished jobs beside them (default 100,000)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds; medians are printed")
    parser.add_argument(
        "--bare-ledger",
        action="store_true",
        help="also time the floor with every index of event but its primary key dropped",
    )
    args = parser.parse_args()
    expired = args.expired
    kinds = ["pass", "floor", *(["floor_bare_ledger"] if args.bare_ledger else [])]
    figures: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
    async with scratch_database("qr_bench_floor_seed") as template:
        started = time.monotonic()
        await seed_template(LIBRARIES["reaper"], template, expired, args.finished)
        took = time.monotonic() - started
        print(f"seeded {expired:,} expired among {args.finished:,} in {took:.1f} s")
        for r in range(args.rounds):
            for kind in kinds:
                async with scratch_database("qr_bench_floor", template=template) as copy:
                    dsn = dsn_for(copy)
                    if kind == "floor_bare_ledger":
                        await bare_ledger(dsn)
                    got = await (the_pass(dsn) if kind == "pass" else the_floor(dsn))
                if got["moved"] != expired:
                    raise RuntimeError(f"{kind}: {got['moved']} moved of {expired}")
                figures[kind].append(got)
            print(
                f"  round {r + 1}: "
                + "; ".join(f"{k} {figures[k][-1]['seconds']:.3f} s" for k in kinds),
                flush=True,
            )

    def med(kind: str, key: str) -> float:
        return median([f[key] for f in figures[kind]])

    pass_s, floor_s = med("pass", "seconds"), med("floor", "seconds")
    print(f"\n{expired:,} expired leases among {args.finished:,} jobs, medians of {args.rounds}:")
    print(
        f"  the pass's lease reap: {pass_s:.3f} s ({expired / pass_s:,.0f} leases/s); CPU "
        f"{med('pass', 'postgres_cpu'):.2f} s PostgreSQL, {med('pass', 'python_cpu'):.2f} s "
        f"Python: {(med('pass', 'postgres_cpu') + med('pass', 'python_cpu')) / expired * 1e6:.0f} "
        "us a lease"
    )
    print(
        f"  the floor, the same statements with no Python between them: {floor_s:.3f} s "
        f"({floor_s / pass_s:.2f} of the pass); CPU {med('floor', 'postgres_cpu'):.2f} s "
        f"PostgreSQL, {med('floor', 'python_cpu'):.2f} s Python"
    )
    result: dict[str, object] = {
        "expired": expired,
        "finished": args.finished,
        "rounds": args.rounds,
        "pass_s": round(pass_s, 3),
        "floor_s": round(floor_s, 3),
        "pass_postgres_cpu_s": round(med("pass", "postgres_cpu"), 2),
        "pass_python_cpu_s": round(med("pass", "python_cpu"), 2),
        "floor_postgres_cpu_s": round(med("floor", "postgres_cpu"), 2),
        "floor_python_cpu_s": round(med("floor", "python_cpu"), 2),
    }
    if args.bare_ledger:
        bare_s = med("floor_bare_ledger", "seconds")
        print(
            f"  the floor with event's primary key alone: {bare_s:.3f} s "
            f"({bare_s / floor_s:.2f} of the floor)"
        )
        result["floor_bare_ledger_s"] = round(bare_s, 3)
    load = os.getloadavg()
    print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    report_result("lease_floor", {**result, "load": [round(x, 2) for x in load], "ok": True})
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))

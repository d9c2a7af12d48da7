"""A pass over an old ledger (SPEC §8 "History"): the same real pass on an empty ledger and on
one holding 1,000,000 historical sighting records (closed episodes over 5,000 queues), within
1.2x.

    python bench/sighting_history.py [--records 1000000 --queues 5000 --rounds 9 --url URL]

The broker side is a vhost of its own with a few hundred queues, some with findings that stay
open (foreign dead-letter queues holding letters), so every pass records and clears real
sightings. The history is written straight into the ledger as the reaper writes it (surface,
then cleared, on the fleet stream). Prints each round's pass time on both ledgers and the ratio
of the medians. Seeds a database and a vhost of its own and removes both afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

import asyncpg
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import dsn_for, migrated, report_result, scratch_database

from reaper.config import Settings, load_config
from reaper.core.domain import FLEET_PROJECT_ID
from reaper.reap.run import reap_once

#: Queues on the broker, and of them foreign dead-letter queues holding a letter (a finding
#: that stays open pass after pass).
BROKER_QUEUES = 300
OPEN_FINDINGS = 20

# Closed episodes: record 2k surfaces queue (k mod q) and 2k+1 clears it, on the fleet stream
# after what is there, payloads as the reaper writes them (the digest is not checked by a pass).
HISTORY = """
WITH base AS (
    SELECT coalesce(max(seq), 0) AS last FROM event WHERE project_id = $1::uuid
)
INSERT INTO event (project_id, seq, kind, payload, digest, trusted, created_at)
SELECT $1::uuid, base.last + g, 'QueueReaped', p.payload,
       encode(sha256(convert_to(p.payload::text, 'UTF8')), 'hex'), false,
       now() - interval '400 days' + g * interval '1 second'
FROM base, generate_series(1, $2::int) AS g
CROSS JOIN LATERAL (
    SELECT jsonb_build_object(
        'object', 'vibey.history.q' || ((g - 1) / 2 % $3), 'queue',
        'vibey.history.q' || ((g - 1) / 2 % $3), 'source', 'broker',
        'condition', 'holder_gone', 'unit', 'messages', 'threshold', 0,
        'measured', CASE WHEN g % 2 = 1 THEN 1 END,
        'action', CASE WHEN g % 2 = 1 THEN 'surface' ELSE 'cleared' END,
        'detail', CASE WHEN g % 2 = 1 THEN '1 unacknowledged message(s) and no consumer'
                       ELSE 'no longer observed' END) AS payload
) AS p
"""


def broker_world(url: str, vhost: str) -> httpx.Client:
    client = httpx.Client(base_url=url, auth=("guest", "guest"), timeout=60)
    client.put(f"/api/vhosts/{vhost}").raise_for_status()
    client.put(
        f"/api/permissions/{vhost}/guest", json={"configure": ".*", "write": ".*", "read": ".*"}
    ).raise_for_status()
    for n in range(BROKER_QUEUES):
        name = f"tenant.q{n:03d}.dead" if n < OPEN_FINDINGS else f"vibey.bench.q{n:03d}"
        client.put(f"/api/queues/{vhost}/{name}", json={"durable": True}).raise_for_status()
        if n < OPEN_FINDINGS:
            client.post(
                f"/api/exchanges/{vhost}/amq.default/publish",
                json={
                    "properties": {},
                    "routing_key": name,
                    "payload": "a letter",
                    "payload_encoding": "string",
                },
            ).raise_for_status()
    return client


async def timed_pass(settings: Settings) -> float:
    started = time.perf_counter()
    result = await reap_once(settings)
    elapsed = time.perf_counter() - started
    assert not result.unreadable, result.unreadable
    return elapsed


async def migrated_dsn(name: str) -> str:
    dsn = dsn_for(name)
    await migrated(dsn)
    return dsn


async def write_history(dsn: str, records: int, queues: int) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        started = time.monotonic()
        await conn.execute(HISTORY, FLEET_PROJECT_ID, records, queues)
        # an old ledger has been vacuumed many times over: so is this one before it is timed
        await conn.execute("VACUUM (ANALYZE) event")
        events = await conn.fetchval("SELECT count(*) FROM event")
        print(
            f"wrote {records:,} historical records over {queues:,} queues and vacuumed them in "
            f"{time.monotonic() - started:.1f} s; that ledger holds {events:,} events"
        )
    finally:
        await conn.close()


async def measure(args: argparse.Namespace) -> int:
    vhost = f"qr-bench-history-{uuid.uuid4().hex[:8]}"
    async with (
        scratch_database("qr_bench_history_empty") as empty_name,
        scratch_database("qr_bench_history_old") as old_name,
    ):
        empty_dsn, old_dsn = await migrated_dsn(empty_name), await migrated_dsn(old_name)
        await write_history(old_dsn, args.records, args.queues)
        admin = broker_world(args.url, vhost)
        try:
            await asyncio.sleep(6)  # the broker's statistics show the letters
            base = {
                "REAPER_BUS__MANAGEMENT_URL": args.url,
                "REAPER_BUS__VHOST": vhost,
                "REAPER_QUEUE__REAP__POLICY_VERIFY_WAIT_SECONDS": "0",
            }
            on_empty = load_config(None, {**base, "REAPER_DATABASE__DSN": empty_dsn}).settings
            on_old = load_config(None, {**base, "REAPER_DATABASE__DSN": old_dsn}).settings
            for settings in (on_empty, on_old, on_empty, on_old):  # policies, findings: steady
                await timed_pass(settings)
            empty: list[float] = []
            old: list[float] = []
            for _ in range(args.rounds):  # alternated, so the machine's load falls on both
                empty.append(await timed_pass(on_empty))
                old.append(await timed_pass(on_old))
        finally:
            admin.delete(f"/api/vhosts/{vhost}")
            admin.close()

    ratio = statistics.median(old) / statistics.median(empty)
    print("empty ledger, each pass:", ", ".join(f"{t:.3f}" for t in empty), "s")
    print(f"{args.records:,} records, each pass:", ", ".join(f"{t:.3f}" for t in old), "s")
    print(
        f"median {statistics.median(old):.3f} s against {statistics.median(empty):.3f} s: "
        f"{ratio:.2f}x (target <= 1.2x)"
    )
    ok = ratio <= 1.2
    print(f"history: {'PASS' if ok else 'FAIL'}")
    report_result(
        "sighting_history",
        {
            "records": args.records,
            "queues": args.queues,
            "empty_s": round(statistics.median(empty), 3),
            "history_s": round(statistics.median(old), 3),
            "ratio": round(ratio, 2),
            "ok": ok,
        },
    )
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--queues", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument(
        "--url", default=os.environ.get("REAPER_BUS__MANAGEMENT_URL", "http://127.0.0.1:15672")
    )
    return asyncio.run(measure(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())

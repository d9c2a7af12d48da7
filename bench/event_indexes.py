"""Each index of the ledger (``event``) against the reads that need it, and what it costs the
appends (issue #39): the figures by which an index is kept or dropped.

    python bench/event_indexes.py                        # ledgers of 30,000 and 300,000 events
    python bench/event_indexes.py --events 1000000 --expired 10000 --rounds 7
    python bench/event_indexes.py --quick                # 3,000 and 30,000 events, 1 round

For each ledger size (a tenth of ``--events``, then ``--events``) one seed is made: the
reaper's schema, ``--expired`` expired leases on 100 projects (bench/peers.py's seed), and a
ledger of that many events written as the reaper and a host write them, over 60 days on the
same 100 projects' streams and the fleet's: 92% lease moves' QueueReaped requeues (a job id as
their object, a job reaped up to three times), 1% poison parks, 4% broker sightings (surface
and cleared, four conditions over 400 queues) and 0.5% dead-letter parks on the fleet stream,
1.5% job-queue sightings (stale_ready, lost_dispatch) on the projects' streams, 1% gate answers
(GateAnswered); beside them a project that went quiet 59 days ago (10 events) and one busy
until 30 days ago (a hundredth of the ledger). On that seed:

- **the append cost**: every expired lease moved by ``reap_lease_batch`` as a lane runs it
  (batches of :data:`~reaper.jobqueue.lease_reap.BATCH_MAX`, one lane, no Python between
  batches), then as many bare event INSERTs (a lease move's payload, a new job id as its
  object), with every index, without each non-key index in turn, and with the primary key
  alone. Each variant runs in one transaction (the indexes dropped in it) that is rolled back,
  the tables vacuumed after, so that every variant starts from the same seed; the variants'
  order turns each round, after one untimed run that warms the caches. The figure is the
  backend's own CPU time (``/proc/PID/schedstat``, nanoseconds: not the machine's other work)
  per lease and per append; an index's cost is every index less without it, printed by the
  minimum over rounds (the least disturbed by a shared machine) and by the median.
- **the reads**: every read of ``event`` (``reaper events`` and ``reaper gates show``:
  ``read_events`` and, when its page is full, ``count_events``, for each filter; the sightings'
  ``latest_sightings``; the pass's read-back and the streams' lookups), each with every index
  and again without each index in turn (dropped in a transaction that is rolled back): the
  indexes its plan reads, the pages it touched (shared buffers hit or read, EXPLAIN (ANALYZE,
  BUFFERS)) and its median time over ``--repeat`` runs, each planned for its own values as the
  CLI's statements are. Every connection has the reaper's session settings (``jit`` off, a
  custom plan for every statement).

Printed at the end: for each non-key index, its append cost at both sizes, and each read whose
plan uses it with its time and pages with and without the index at both sizes. A read whose
pages stay flat from the small ledger to the large one with the index and grow tenfold without
it is one the index is needed for. Nothing is judged here: docs/benchmarks.md holds the decision
taken from these figures. 80 to 105 s at the defaults on 2 cores, ``--quick`` about 10 s.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import ADMIN_DSN, dsn_for, migrated, report_result
from peers import NOW, REAPER_SEED

from reaper.core.domain import FLEET_PROJECT_ID
from reaper.jobqueue.database import _SESSION_SETTINGS
from reaper.jobqueue.lease_reap import BATCH_MAX, FIRST_KEY, statement
from reaper.jobqueue.sql import QUERIES

#: The reaper's own session settings (``jit`` off, every statement planned for its own values:
#: ``plan_cache_mode``), on the bench's connections as on the CLI's and the pass's.
SESSION_SETTINGS = dict(_SESSION_SETTINGS)

#: Every index of ``event`` but its primary key, as migrations 0008 and 0012 make them.
INDEXES = (
    "event_created_idx",
    "event_project_created_idx",
    "event_object_idx",
    "event_condition_idx",
    "event_not_verdict_idx",
    "event_sighting_latest_v2_idx",
)
PRIMARY_KEY = "event_pkey"
ALL, BARE = "(every index)", "(primary key alone)"

PROJECTS = 100
QUIET = uuid.UUID("11111111-0000-4000-8000-000000000000")
RETIRED = uuid.UUID("22222222-0000-4000-8000-000000000000")
BROKER_CONDITIONS = ("holder_gone", "dead_letter", "hung_handler", "unbounded")
DAYS = 60

# The ledger, by g % 200 of each event's number g: 0-183 requeues, 184-185 poison parks,
# 186-193 broker sightings and 197 dead-letter parks (the fleet stream), 194-196 job-queue
# sightings, 198-199 gate answers. A job's id is md5('job' || g / 3): a job reaped up to three
# times; a sighting key's records alternate surface and cleared. Each stream gapless from 1.
LEDGER = """
INSERT INTO event (project_id, seq, kind, payload, digest, trusted, created_at)
SELECT stream, row_number() OVER (PARTITION BY stream ORDER BY g), kind, payload,
       encode(sha256(convert_to(payload::text, 'UTF8')), 'hex'), true,
       $1::timestamptz - ($2::int - g) * (interval '60 days' / $2::int)
FROM (
    SELECT g,
           CASE WHEN r BETWEEN 186 AND 193 OR r = 197 THEN $3::uuid ELSE project END AS stream,
           CASE WHEN r >= 198 THEN 'GateAnswered' ELSE 'QueueReaped' END AS kind,
           CASE
           WHEN r < 184 THEN jsonb_build_object(
               'action', 'requeue', 'condition', 'lease_expired',
               'detail', 'lease of build job held by worker-' || g % 50 || ' expired '
                         || g % 600 || '.5s ago, past the grace of 30s: requeue (attempt 1 of '
                         || '7 spent)',
               'measured', g % 600 || '.5', 'object', job::text, 'queue', NULL,
               'source', 'job_queue', 'threshold', 30, 'unit', 'seconds')
           WHEN r < 186 THEN jsonb_build_object(
               'action', 'park', 'condition', 'poison',
               'detail', 'lease of build job held by worker-' || g % 50 || ' expired '
                         || g % 600 || '.5s ago with 7 of 7 attempts spent: park for a person '
                         || '(delivery_exhausted gate)',
               'measured', 7, 'object', job::text, 'queue', NULL, 'source', 'job_queue',
               'threshold', 7, 'unit', 'attempts')
           WHEN r < 194 THEN jsonb_build_object(
               'action', CASE WHEN k / 1600 % 2 = 0 THEN 'surface' ELSE 'cleared' END,
               'condition', (ARRAY['holder_gone', 'dead_letter', 'hung_handler',
                                   'unbounded'])[k / 400 % 4 + 1],
               'detail', CASE WHEN k / 1600 % 2 = 0 THEN '3 message(s) past the bound'
                              ELSE 'no longer observed' END,
               'measured', CASE WHEN k / 1600 % 2 = 0 THEN 3 END, 'object', queue,
               'queue', queue, 'source', 'broker', 'threshold', 0, 'unit', 'messages')
           WHEN r < 197 THEN jsonb_build_object(
               'action', CASE WHEN k / 200 % 2 = 0 THEN 'surface' ELSE 'cleared' END,
               'condition', CASE WHEN k % 2 = 0 THEN 'stale_ready' ELSE 'lost_dispatch' END,
               'detail', 'ready work not taken', 'measured', 600, 'object', project::text,
               'queue', NULL, 'source', 'job_queue', 'threshold', 300, 'unit', 'seconds')
           WHEN r = 197 THEN jsonb_build_object(
               'action', 'park', 'condition', 'dead_letter',
               'detail', 'a dead letter parked for a person', 'measured', 1,
               'object', 'dead_letter:' || md5(g::text), 'queue', queue, 'source', 'broker',
               'threshold', 0, 'unit', 'messages')
           ELSE jsonb_build_object(
               'object', job::text, 'gate', md5('gate' || g)::uuid::text,
               'gate_kind', 'delivery_exhausted', 'job', job::text, 'condition', 'poison',
               'choice', 'retry', 'by', 'ana@ops', 'reason', NULL, 'queue', NULL,
               'message_id', NULL)
           END AS payload
    FROM (
        SELECT g, r, k, project, job,
               'tenant.q' || lpad((k % 400)::text, 3, '0') || '.dead' AS queue
        FROM (
            SELECT g, g % 200 AS r,
                   CASE WHEN g % 200 < 194 THEN g / 200 * 8 + g % 200 - 186
                        ELSE g / 200 * 3 + g % 200 - 194 END AS k,
                   ('00000000-0000-4000-8000-' || lpad(to_hex(g / 7 % 100), 12, '0'))::uuid
                       AS project,
                   md5('job' || g / 3)::uuid AS job
            FROM generate_series(1, $2::int) AS g
        ) AS n
    ) AS s
) AS e
"""

QUIET_STREAM = """
INSERT INTO event (project_id, seq, kind, payload, digest, trusted, created_at)
SELECT $1::uuid, i, 'QueueReaped',
       jsonb_build_object('action', 'requeue', 'condition', 'lease_expired',
                          'object', md5('quiet' || i)::uuid::text, 'source', 'job_queue'),
       repeat('ab', 32), true, $2::timestamptz - interval '59 days' + i * interval '1 second'
FROM generate_series(1, 10) AS i
"""

#: A project busy until 30 days ago and quiet since: a hundredth of the ledger, 60 to 30 days old.
RETIRED_STREAM = """
INSERT INTO event (project_id, seq, kind, payload, digest, trusted, created_at)
SELECT $1::uuid, i, 'QueueReaped',
       jsonb_build_object('action', 'requeue', 'condition', 'lease_expired',
                          'object', md5('retired' || i)::uuid::text, 'source', 'job_queue'),
       repeat('ab', 32), true,
       $2::timestamptz - interval '60 days' + i * (interval '30 days' / $3::int)
FROM generate_series(1, $3::int) AS i
"""

STREAMS = """
INSERT INTO ledger_stream (project_id, last_seq)
SELECT project_id, max(seq) FROM event GROUP BY project_id
ON CONFLICT (project_id) DO UPDATE SET last_seq = EXCLUDED.last_seq
"""


def project(n: int) -> uuid.UUID:
    return uuid.UUID(f"00000000-0000-4000-8000-{n:012x}")


def job_of(g: int) -> str:
    """The job id the ledger's event number ``g`` names (``md5('job' || g / 3)``)."""
    return str(uuid.UUID(hashlib.md5(f"job{g // 3}".encode()).hexdigest()))


@dataclass(frozen=True)
class Read:
    """One read of the ledger: its name, its query and its parameters for a ledger of N."""

    name: str
    query: str
    params: Callable[[int], tuple[Any, ...]]


def events(name: str, limit: int = 100, count: bool = True, **chosen: Any) -> list[Read]:
    """``reaper events`` with ``chosen``'s filters: ``read_events`` for the newest ``limit``,
    and ``count_events`` (asked when that page is full) when ``count``."""

    def value(key: str, n: int) -> Any:
        v = chosen.get(key)
        return v(n) if callable(v) else v

    def counted(n: int) -> tuple[Any, ...]:  # the filter, $1..$7 (event_filter)
        keys = ("since", "project", "kind", "condition", "object", "action", "source")
        return tuple(value(k, n) for k in keys)

    def read(n: int) -> tuple[Any, ...]:  # the filter, then the limit ($8)
        return (*counted(n), limit)

    found = [Read(name, QUERIES["read_events"], read)]
    if count:
        found.append(Read(f"{name} (count)", QUERIES["count_events"], counted))
    return found


def latest_sighting(stream: uuid.UUID, source: str, condition: str, scope: str) -> Any:
    return lambda n: ([stream], [source], [condition], [scope])


HOUR = NOW - timedelta(hours=1)
#: Every read of ``event`` the reaper makes, with values that select something at any size.
READS: list[Read] = [
    *events("events (newest 100)"),
    *events("events --since 1h", since=HOUR),
    *events("events --project (a busy one)", project=project(0)),
    *events("events --project (quiet 59 days)", count=False, project=QUIET),
    *events("events --project (busy until 30 days ago)", project=RETIRED),
    *events("events --project --since 1h", project=project(0), since=HOUR),
    *events("events --kind GateAnswered", kind="GateAnswered"),
    *events("events --condition poison", condition="poison"),
    *events("events --condition stale_ready", condition="stale_ready"),
    *events("events --condition lease_expired", condition="lease_expired"),
    *events("events --source broker --action surface", source="broker", action="surface"),
    *events(
        "events --object (a job 54 days ago)",
        count=False,
        object=lambda n: job_of(n // 10 // 200 * 200 + 5),
    ),
    *events(
        "gates show (a job's 20 newest)",
        limit=20,
        count=False,
        object=lambda n: job_of((n // 200 - 1) * 200 + 5),
    ),
    *events("events --object (a queue)", count=False, object="tenant.q007.dead"),
    Read(
        "sightings: latest, a broker queue",
        QUERIES["latest_sightings"],
        latest_sighting(FLEET_PROJECT_ID, "broker", "holder_gone", "tenant.q007.dead"),
    ),
    Read(
        "sightings: latest, a project's stale_ready",
        QUERIES["latest_sightings"],
        latest_sighting(project(3), "job_queue", "stale_ready", str(project(3))),
    ),
    Read(
        "a pass's read-back (a run of 100)",
        QUERIES["reaped_events"],
        lambda n: (project(5), 1, 100),
    ),
    Read(
        "a stream's last number (append)",
        "SELECT coalesce((SELECT max(e.seq) FROM event AS e WHERE e.project_id = $1), 0)",
        lambda n: (project(5),),
    ),
    Read(
        "streams by an id's prefix",
        QUERIES["streams_between"],
        lambda n: (project(0), project(0xFFFF), 11),
    ),
]


def index_names(plan: object) -> set[str]:
    """The indexes a plan (EXPLAIN's JSON) reads; "seq scan" for a sequential scan."""
    found: set[str] = set()
    if isinstance(plan, dict):
        if "Index Name" in plan:
            found.add(str(plan["Index Name"]))
        if plan.get("Node Type") == "Seq Scan" and plan.get("Relation Name") == "event":
            found.add("seq scan")
        for v in plan.values():
            found |= index_names(v)
    elif isinstance(plan, list):
        for v in plan:
            found |= index_names(v)
    return found


@dataclass
class Measured:
    ms: float
    pages: int
    plan: set[str]


async def measure_read(conn: asyncpg.Connection, read: Read, n: int, repeat: int) -> Measured:
    params = read.params(n)
    query = read.query.rstrip().rstrip(";")
    explained = await conn.fetchval(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {query}", *params)
    top = json.loads(explained)[0]["Plan"]
    pages = int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks", 0))
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        await conn.fetch(query, *params)
        times.append(time.perf_counter() - started)
        if times[-1] > 0.5 and len(times) >= 2:
            break  # a long one: two runs tell its order
    return Measured(statistics.median(times) * 1000, pages, index_names(top))


async def measure_reads(dsn: str, n: int, repeat: int) -> dict[str, dict[str, Measured]]:
    """Each read with every index (under ALL) and without each index in turn."""
    conn = await asyncpg.connect(dsn, server_settings=SESSION_SETTINGS, statement_cache_size=0)
    found: dict[str, dict[str, Measured]] = {}
    try:
        for variant in (ALL, *INDEXES):
            found[variant] = {}
            # the index dropped in a transaction that is rolled back: the next variant has it
            transaction = conn.transaction()
            await transaction.start()
            try:
                if variant != ALL:
                    await conn.execute(f"DROP INDEX {variant}")
                for read in READS:
                    found[variant][read.name] = await measure_read(conn, read, n, repeat)
            finally:
                await transaction.rollback()
    finally:
        await conn.close()
    return found


def backend_ns(pid: int) -> int:
    """Nanoseconds the process ``pid`` has run on a CPU (``/proc/PID/schedstat``, Linux)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


#: The bare append: ``$2`` events as a lease move writes them (a requeue's payload, a new job id
#: as its object), spread over the 100 projects' streams after their last numbers.
BARE_APPEND = """
WITH streams AS (
    SELECT p, s.stream, (SELECT max(e.seq) FROM event AS e WHERE e.project_id = s.stream) AS last
    FROM generate_series(0, 99) AS p
    CROSS JOIN LATERAL (
        SELECT ('00000000-0000-4000-8000-' || lpad(to_hex(p), 12, '0'))::uuid AS stream
    ) AS s
),
moves AS (
    SELECT k, jsonb_build_object(
        'action', 'requeue', 'condition', 'lease_expired',
        'detail', 'lease of build job held by worker-' || k % 50 || ' expired 12.5s ago, past '
                  || 'the grace of 0s: requeue (attempt 1 of 7 spent)',
        'measured', '12.5', 'object', gen_random_uuid()::text, 'queue', NULL,
        'source', 'job_queue', 'threshold', 0, 'unit', 'seconds')::text AS payload
    FROM generate_series(0, $2::int - 1) AS k
)
INSERT INTO event (project_id, seq, kind, payload, digest, trusted, created_at)
SELECT s.stream, s.last + m.k / 100 + 1, 'QueueReaped', m.payload::jsonb,
       encode(sha256(convert_to(m.payload, 'UTF8')), 'hex'), true, $1::timestamptz
FROM moves AS m
JOIN streams AS s ON s.p = m.k % 100
"""


async def appends(
    conn: asyncpg.Connection, drop: tuple[str, ...], expired: int
) -> dict[str, float]:
    """Every expired lease moved by ``reap_lease_batch`` (one lane, batches of
    :data:`BATCH_MAX`, no Python between them), then as many bare appends (:data:`BARE_APPEND`,
    a batch at a time), without the indexes in ``drop``, all in one transaction that is rolled
    back and the tables vacuumed after: the backend's CPU microseconds per lease and per bare
    append, and the leases moved."""
    pid = await conn.fetchval("SELECT pg_backend_pid()")
    reap = statement("reap_lease_batch")
    choices = json.dumps(["retry", "cancel"])
    transaction = conn.transaction()
    await transaction.start()
    try:
        for name in drop:
            await conn.execute(f"DROP INDEX {name}")
        await conn.execute(QUERIES["walk_leased_expiry_index"])
        after, moved = FIRST_KEY, 0
        cpu = backend_ns(pid)
        while True:
            row = await conn.fetchrow(reap, NOW, 0, *after, None, 0, 1, BATCH_MAX, choices)
            if not row["picked"]:
                break
            moved += row["picked"]
            after = (row["last_expiry"], row["last_id"])
        reaped = backend_ns(pid) - cpu
        cpu = backend_ns(pid)
        for first in range(0, expired, BATCH_MAX):
            await conn.execute(BARE_APPEND, NOW, min(BATCH_MAX, expired - first))
        appended = backend_ns(pid) - cpu
    finally:
        await transaction.rollback()
    await conn.execute("VACUUM job, event")  # the rolled-back rows gone before the next variant
    if moved != expired:
        raise RuntimeError(f"{moved} leases moved of {expired}")
    return {"lease": reaped / moved / 1e3, "append": appended / expired / 1e3}


async def seed(dsn: str, events_n: int, expired: int) -> dict[str, int]:
    await migrated(dsn)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("SET session_replication_role = replica")
        for query, rows in REAPER_SEED:
            await conn.execute(query, NOW, expired if rows == "running" else 2 * expired)
        await conn.execute(LEDGER, NOW, events_n, FLEET_PROJECT_ID)
        await conn.execute(QUIET_STREAM, QUIET, NOW)
        await conn.execute(RETIRED_STREAM, RETIRED, NOW, max(events_n // 100, 100))
        await conn.execute(STREAMS)
        await conn.execute("VACUUM ANALYZE")
        await conn.execute("CHECKPOINT")
        sizes = await conn.fetch(
            "SELECT c.relname, pg_relation_size(c.oid) AS bytes FROM pg_class AS c "
            "WHERE c.relname = 'event' OR c.oid IN (SELECT indexrelid FROM pg_index "
            "WHERE indrelid = 'event'::regclass)"
        )
        return {r["relname"]: r["bytes"] for r in sizes}
    finally:
        await conn.close()


@dataclass
class Size:
    events: int
    bytes: dict[str, int]
    #: The backend's CPU (us) per lease moved and per bare append, each round's, by variant.
    lease_us: dict[str, list[float]]
    append_us: dict[str, list[float]]
    reads: dict[str, dict[str, Measured]]


async def measure_size(
    admin: asyncpg.Connection, events_n: int, expired: int, rounds: int, repeat: int
) -> Size:
    name = f"qr_bench_evidx_{uuid.uuid4().hex[:10]}"
    variants: list[tuple[str, tuple[str, ...]]] = [
        (ALL, ()),
        *((index, (index,)) for index in INDEXES),
        (BARE, INDEXES),
    ]
    lease: dict[str, list[float]] = {v: [] for v, _ in variants}
    append: dict[str, list[float]] = {v: [] for v, _ in variants}
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        started = time.monotonic()
        sizes = await seed(dsn_for(name), events_n, expired)
        print(
            f"\nledger of {events_n:,} events: seeded with {expired:,} expired leases in "
            f"{time.monotonic() - started:.1f} s; MiB: event {sizes['event'] / 2**20:.0f}, "
            + ", ".join(
                f"{short(k)} {v / 2**20:.1f}" for k, v in sorted(sizes.items()) if k != "event"
            ),
            flush=True,
        )
        started = time.monotonic()
        reads = await measure_reads(dsn_for(name), events_n, repeat)
        print(f"  reads measured in {time.monotonic() - started:.1f} s", flush=True)
        conn = await asyncpg.connect(dsn_for(name), server_settings=SESSION_SETTINGS)
        try:
            await appends(conn, (), expired)  # untimed: the caches as warm for every variant
            for r in range(rounds):
                turned = variants[r % len(variants) :] + variants[: r % len(variants)]
                for variant, drop in turned:
                    got = await appends(conn, drop, expired)
                    lease[variant].append(got["lease"])
                    append[variant].append(got["append"])
                print(
                    f"  round {r + 1}, us a lease moved (a bare append): "
                    + ", ".join(
                        f"{short(v)} {lease[v][-1]:.1f} ({append[v][-1]:.1f})" for v, _ in variants
                    ),
                    flush=True,
                )
        finally:
            await conn.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return Size(events_n, sizes, lease, append, reads)


def short(name: str) -> str:
    return name.removeprefix("event_").removesuffix("_idx")


def plan_text(plan: set[str]) -> str:
    return "+".join(sorted(short(p) for p in plan)) or "-"


def figure(small: Size, large: Size, what: str, variant: str) -> str:
    """A variant's CPU a lease or an append, min and median, at the small / the large ledger."""
    return " / ".join(
        f"{min(x):.1f}, {statistics.median(x):.1f}"
        for x in (getattr(s, f"{what}_us")[variant] for s in (small, large))
    )


def index_cost(size: Size, what: str, index: str) -> tuple[float, float]:
    """What ``index`` costs: every index less without it, by the min and the median."""
    figures = getattr(size, f"{what}_us")
    with_it, without = figures[ALL], figures[index]
    return min(with_it) - min(without), statistics.median(with_it) - statistics.median(without)


def cost(small: Size, large: Size, what: str, index: str) -> str:
    return " / ".join(
        "{:+.1f}, {:+.1f}".format(*index_cost(s, what, index)) for s in (small, large)
    )


def table(small: Size, large: Size) -> list[dict[str, object]]:
    """The table (printed), and its rows: one per index and read its plan uses it for."""
    rows: list[dict[str, object]] = []
    print(
        "\nEach non-key index of event: what it costs an append (the backend's CPU with every "
        "index less without it: a lease moved by reap_lease_batch, and a bare INSERT of one "
        f"event), at {small.events:,} / {large.events:,} events; then each read whose plan "
        "uses it, with / without it: its time (ms) and the pages it touched at the small / the "
        "large ledger, and how many times more pages at the large"
    )
    for label, v in (("every index", ALL), ("the primary key alone", BARE)):
        print(
            f"{label}: a lease moved {figure(small, large, 'lease', v)} us, a bare append "
            f"{figure(small, large, 'append', v)} us (min, median over rounds)"
        )
    for index in INDEXES:
        print(
            f"\n{index} ({large.bytes.get(index, 0) / 2**20:.1f} MiB at {large.events:,}): "
            f"a lease moved {cost(small, large, 'lease', index)} us, a bare append "
            f"{cost(small, large, 'append', index)} us (every index less without it, min and "
            "median over rounds)"
        )
        served = [name for name, m in large.reads[ALL].items() if index in m.plan]
        if not served:
            print("  no read's plan uses it")
        for name in served:
            w_s, w_l = small.reads[ALL][name], large.reads[ALL][name]
            o_s, o_l = small.reads[index][name], large.reads[index][name]
            print(
                f"  {name:44} with {w_s.ms:6.2f} / {w_l.ms:6.2f} ms, {w_s.pages:>4} / "
                f"{w_l.pages:>5} pages ({w_l.pages / max(w_s.pages, 1):4.1f}x); without "
                f"{o_s.ms:7.2f} / {o_l.ms:7.2f} ms, {o_s.pages:>5} / {o_l.pages:>6} pages "
                f"({o_l.pages / max(o_s.pages, 1):4.1f}x) by {plan_text(o_l.plan)}"
            )
            rows.append(
                {
                    "index": index,
                    "read": name,
                    "with_ms": [round(w_s.ms, 3), round(w_l.ms, 3)],
                    "without_ms": [round(o_s.ms, 3), round(o_l.ms, 3)],
                    "with_pages": [w_s.pages, w_l.pages],
                    "without_pages": [o_s.pages, o_l.pages],
                    "without_plan": sorted(o_l.plan),
                }
            )
    return rows


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--events", type=int, default=300_000, help="the large ledger (default 300,000)"
    )
    parser.add_argument(
        "--expired", type=int, default=5_000, help="expired leases moved (default 5,000)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="append rounds (default 5)")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each read; medians")
    parser.add_argument(
        "--quick", action="store_true", help="3,000 and 30,000 events, 2,000 leases, 1 round"
    )
    args = parser.parse_args()
    if args.quick:
        args.events, args.expired, args.rounds, args.repeat = 30_000, 2_000, 1, 3
    admin = await asyncpg.connect(ADMIN_DSN)
    started = time.monotonic()
    try:
        small = await measure_size(admin, args.events // 10, args.expired, args.rounds, args.repeat)
        large = await measure_size(admin, args.events, args.expired, args.rounds, args.repeat)
    finally:
        await admin.close()
    print("\nEvery read with every index: its plan, time and pages at the small / the large ledger")
    for read in READS:
        s, m = small.reads[ALL][read.name], large.reads[ALL][read.name]
        print(
            f"  {read.name:48} {plan_text(m.plan):28} {s.ms:6.2f} / {m.ms:6.2f} ms, "
            f"{s.pages:>4} / {m.pages:>5} pages"
        )
    rows = table(small, large)
    load = os.getloadavg()
    print(
        f"\n{time.monotonic() - started:.0f} s; load average at the end: "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    report_result(
        "event_indexes",
        {
            "events": [small.events, large.events],
            "expired": args.expired,
            "rounds": args.rounds,
            "lease_us": {
                v: [round(min(s.lease_us[v]), 2) for s in (small, large)] for v in small.lease_us
            },
            "append_us": {
                v: [round(min(s.append_us[v]), 2) for s in (small, large)] for v in small.append_us
            },
            "reads": rows,
            "load": [round(x, 2) for x in load],
            "ok": True,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))

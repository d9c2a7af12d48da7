"""Lease reap throughput (SPEC §8): this reaper against a bare set-based UPDATE that records
nothing and against a loop of one transaction per lease.

    python bench/lease_reap.py [--expired 10000 --others 100000 --rounds 3]

One database is seeded once (generate_series) and every measurement runs on a fresh copy
of it (CREATE DATABASE ... TEMPLATE), so all three start from the same rows. Each round
runs the three methods back to back and takes the ratios within the round, so a machine
busy with something else for a while weighs on all three of that round alike; the verdict
is on the median of the rounds' ratios. Targets (SPEC §8): this reaper at least 0.3 of the
bare UPDATE, and at least 30 times the per-lease loop.
The spread of reaper / bare across rounds (min, median, max) and the machine's load
average are printed beside it, and so is where the reaper's time goes: the share spent moving
the pages (both lanes' statements, each move with its event), and so the ratio the moves alone
would allow were reading, judging and logging free.

With ``--host-writer``, every measurement runs beside the host's own ledger writer
(tests/support/host_writer.py, a process appending to every project's stream in a tight
loop, ``seq = max(seq) + 1`` in its own transactions): the ledger shared as SPEC §3 allows,
and the reaper's sequence collisions retried. The writer's appends during the reaper's runs
are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import dsn_for, median, migrated, report_result, scratch_database

import reaper.jobqueue.lease_reap as lease_batches
from reaper.config import Settings
from reaper.core.canonical import canonical_json, digest_of
from reaper.core.domain import Dispatch, Thresholds
from reaper.jobqueue.dispatch import DispatchInForce
from reaper.jobqueue.postgres import PostgresStore
from reaper.reap.context import Mode, Pass
from reaper.reap.leases import reap_leases
from reaper.reap.measure import JobQueueReading, Reading
from reaper.reap.pass_config import PassConfig
from reaper.reap.run import run_pass
from reaper.reap.sources import Sources, open_sources

#: The seed's clock: this run's own time, so that a pass judging by the database's clock (as
#: ``reaper reap`` does: :func:`reap_seeded`) finds the same leases expired as the methods
#: judging at ``NOW`` do; the other rows' leases run a day past it.
NOW = datetime.now(UTC).replace(microsecond=0)
TARGET_OF_BARE = 0.3
TARGET_OF_LOOP = 30.0
#: Of each reaper run, the share of its time its lanes spent inside their batches' transactions
#: (each batch's two statements, its moves and their events, the database's work), per lane.
MOVING_SHARE: list[float] = []

EXPIRED_IDS = """
SELECT id FROM job
WHERE state = 'leased' AND lease_expires_at < $1
ORDER BY lease_expires_at, id
LIMIT $2
"""

SEED = """
INSERT INTO job (id, project_id, kind, phase, state, run_after, attempts, max_attempts,
                 lease_owner, lease_expires_at, finished_at, created_at, updated_at)
SELECT gen_random_uuid(),
       ('00000000-0000-4000-8000-' || lpad(to_hex(g % $3), 12, '0'))::uuid,
       'build', 'build', 'leased', $1::timestamptz - interval '2 hours', 1 + g % 6, 7,
       'worker-' || (g % 50), $1::timestamptz - (g % 3600 + 1) * interval '1 second',
       NULL, $1::timestamptz - interval '1 day', $1::timestamptz - interval '1 day'
FROM generate_series(1, $2::int) AS g;
"""

SEED_OTHERS = """
INSERT INTO job (id, project_id, kind, phase, state, run_after, attempts, max_attempts,
                 lease_owner, lease_expires_at, finished_at, created_at, updated_at)
SELECT gen_random_uuid(),
       ('00000000-0000-4000-8000-' || lpad(to_hex(g % $3), 12, '0'))::uuid,
       'build', 'build', s.state, $1::timestamptz - (g % 7200) * interval '1 second', 1, 7,
       CASE WHEN s.state = 'leased' THEN 'worker-' || (g % 50) END,
       CASE WHEN s.state = 'leased' THEN $1::timestamptz + interval '1 day' END,
       CASE WHEN s.state = 'succeeded' THEN $1::timestamptz - interval '1 hour' END,
       $1::timestamptz - interval '1 day', $1::timestamptz - interval '1 day'
FROM generate_series(1, $2::int) AS g
CROSS JOIN LATERAL (
    SELECT (ARRAY['succeeded', 'succeeded', 'succeeded', 'succeeded', 'succeeded',
                  'succeeded', 'ready', 'ready', 'ready', 'leased'])[g % 10 + 1] AS state
) AS s;
"""

BARE_UPDATE = """
UPDATE job
SET state = 'ready', lease_owner = NULL, lease_expires_at = NULL, run_after = $1,
    updated_at = $1
WHERE state = 'leased' AND lease_expires_at < $1
"""

LOOP_READ = """
SELECT id, project_id, lease_owner, lease_expires_at, attempts
FROM job
WHERE id = $1 AND state = 'leased' AND lease_expires_at < $2
FOR UPDATE SKIP LOCKED
"""

LOOP_UPDATE = """
UPDATE job
SET state = 'ready', lease_owner = NULL, lease_expires_at = NULL, run_after = $2,
    updated_at = $2
WHERE id = $1 AND state = 'leased' AND lease_owner IS NOT DISTINCT FROM $3
  AND lease_expires_at = $4
"""

# The loop appends as the reaper does, on a ledger shared with the host: its turn on the
# stream, then the stream's last number plus one.
LOOP_SEQ = """
SELECT pg_advisory_xact_lock(1818584167, hashtext($1::uuid::text)),
       coalesce((SELECT max(seq) FROM event WHERE project_id = $1::uuid), 0) + 1
"""

LOOP_EVENT = """
INSERT INTO event (project_id, seq, kind, payload, digest, trusted, created_at)
VALUES ($1, $2, 'QueueReaped', $3::jsonb, $4, true, $5)
"""


# Events whose number is not their place in their stream (a gap or a duplicate): 0.
GAPS = """
SELECT count(*)
FROM (SELECT seq, row_number() OVER (PARTITION BY project_id ORDER BY seq) AS place
      FROM event) AS e
WHERE seq <> place
"""


async def seed(dsn: str, expired: int, others: int, projects: int) -> None:
    await migrated(dsn)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(SEED, NOW, expired, projects)
        await conn.execute(SEED_OTHERS, NOW, others, projects)
        await conn.execute("VACUUM ANALYZE")
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()


async def warm(conn: asyncpg.Connection) -> None:
    await conn.fetchval("SELECT count(*) FROM job")
    await conn.fetchval("SELECT count(*) FROM event")


async def run_reaper(dsn: str, expired: int) -> tuple[float, int]:
    """The pass's own lease step, whole: pages read, judged by the pure lease judge, moved
    with one event each, and every verdict logged for the report."""
    store = await PostgresStore.connect(dsn)
    conn = await asyncpg.connect(dsn)
    try:
        await warm(conn)
        thresholds = Thresholds()
        await warm_reaper(store, thresholds)
        moving = timed_batches()
        started = time.perf_counter()
        reaped = await reap_leases(lease_step(store, thresholds, Mode.FULL))
        listing = reaped.listing
        elapsed = time.perf_counter() - started
        lease_batches._transaction = ORIGINAL_TRANSACTION
        MOVING_SHARE.append(sum(moving) / elapsed / lease_batches.LANES)
        moved = listing.reap.moved if listing.recorded else 0
        events = await conn.fetchval("SELECT count(*) FROM event WHERE kind = 'QueueReaped'")
        assert moved == expired == events == reaped.expired, (moved, expired, events)
        gaps = await conn.fetchval(GAPS)
        assert gaps == 0, f"{gaps} event(s) out of place: a stream is not gapless"
        found = reaped.found
        assert not found.unreadable and not found.not_moved and not found.notes
        return elapsed, moved
    finally:
        await conn.close()
        await store.close()


async def reap_seeded(
    dsn: str, ready: Callable[[], Awaitable[None]] | None = None
) -> tuple[float, float, int]:
    """The lease reap of one ``reaper reap`` pass over the database at ``dsn`` (seeded by
    :func:`seed`, or any seed of expired leases in the reaper's schema): the pass's own code,
    its sources opened as the CLI opens them (the default pool, its connections opened first,
    as a running reaper's are), then the pass to its result (the database's clock as ``now``,
    the default budget), with no broker. ``ready`` is awaited just before the clock starts.
    Returns its seconds, the longest transaction that held row locks (each lease batch's, from
    before its BEGIN to after its COMMIT) and the leases it moved (each with its event)."""
    settings = Settings.model_validate({"database": {"dsn": dsn}})
    conn = await asyncpg.connect(dsn)
    batches = timed_batches()
    try:
        before = await conn.fetchval("SELECT count(*) FROM event WHERE kind = 'QueueReaped'")
        sources = await open_sources(settings, broker=False)
        try:
            assert sources.store is not None, sources.store_error
            pool_size = settings.database.pool_size
            await asyncio.gather(*(sources.store.database_facts() for _ in range(pool_size)))
            if ready is not None:
                await ready()
            started = time.perf_counter()
            result = await run_pass(
                settings, Sources(store=sources.store, broker=None), mode=Mode.LEASES_ONLY
            )
            elapsed = time.perf_counter() - started
        finally:
            await sources.close()
        after = await conn.fetchval("SELECT count(*) FROM event WHERE kind = 'QueueReaped'")
        assert not result.unreadable and not result.not_moved, result.problems()
        return elapsed, max(batches, default=0.0), int(after - before)
    finally:
        lease_batches._transaction = ORIGINAL_TRANSACTION
        await conn.close()


def timed(store: PostgresStore, name: str) -> list[float]:
    """Time every call of ``store``'s coroutine method ``name`` from now on: the list it
    returns receives each call's seconds."""
    seconds: list[float] = []
    method = getattr(store, name)

    async def timed_call(*args: object, **kwargs: object) -> object:
        started = time.perf_counter()
        try:
            return await method(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - started)

    setattr(store, name, timed_call)
    return seconds


async def warm_reaper(store: PostgresStore, thresholds: Thresholds) -> None:
    """A long-lived reaper is warm: its pool's connections open, its statements prepared.
    Warm it with a dry run of the whole reap (every expired lease ruled on, read only)."""
    await asyncio.gather(*(store.count_expired_leases(NOW, 0) for _ in range(4)))
    await reap_leases(lease_step(store, thresholds, Mode.AUDIT))


def lease_step(store: PostgresStore, thresholds: Thresholds, mode: Mode) -> Pass:
    """The pass's lease step alone, over ``store`` read at NOW, with an hour's budget."""
    config = replace(PassConfig.of(Settings()), thresholds=thresholds)
    config = replace(config, lease_reap_budget_seconds=3600)
    read = Reading(JobQueueReading(NOW, DispatchInForce(Dispatch.POLLING, "declared"), None), None)
    return Pass(config, mode, NOW, read, store, None)


ORIGINAL_TRANSACTION = lease_batches._transaction


def timed_batches() -> list[float]:
    """Time every lease batch's transaction (from its BEGIN to its COMMIT) from now on, until
    ``lease_batches._transaction`` is given back ORIGINAL_TRANSACTION."""
    seconds: list[float] = []

    async def timed_batch(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await ORIGINAL_TRANSACTION(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - started)

    lease_batches._transaction = timed_batch  # type: ignore[assignment]
    return seconds


async def run_bare(dsn: str, expired: int) -> tuple[float, int]:
    conn = await asyncpg.connect(dsn)
    try:
        await warm(conn)
        started = time.perf_counter()
        status = await conn.execute(BARE_UPDATE, NOW)
        elapsed = time.perf_counter() - started
        moved = int(status.split()[-1])
        assert moved == expired, status
        return elapsed, moved
    finally:
        await conn.close()


async def run_loop(dsn: str, expired: int) -> tuple[float, int]:
    store = await PostgresStore.connect(dsn)
    conn = await asyncpg.connect(dsn)
    try:
        await warm(conn)
        await store.count_expired_leases(NOW, 0)
        started = time.perf_counter()
        leases = await conn.fetch(EXPIRED_IDS, NOW, expired)
        moved = 0
        for (job_id,) in leases:
            async with conn.transaction():
                row = await conn.fetchrow(LOOP_READ, job_id, NOW)
                if row is None:
                    continue
                await conn.execute(
                    LOOP_UPDATE, row["id"], NOW, row["lease_owner"], row["lease_expires_at"]
                )
                canonical = canonical_json(_payload(row["id"], row["lease_expires_at"]))
                while True:  # a number the host took first is taken again, as the reaper does
                    seq = (await conn.fetchrow(LOOP_SEQ, row["project_id"]))[1]
                    try:
                        async with conn.transaction():
                            await conn.execute(
                                LOOP_EVENT,
                                row["project_id"],
                                seq,
                                canonical,
                                digest_of(canonical),
                                NOW,
                            )
                        break
                    except asyncpg.UniqueViolationError:
                        continue
                moved += 1
        elapsed = time.perf_counter() - started
        assert moved == expired
        return elapsed, moved
    finally:
        await conn.close()
        await store.close()


def _payload(job_id: UUID, expired_at: datetime) -> dict[str, object]:
    return {
        "object": str(job_id),
        "queue": None,
        "source": "job_queue",
        "condition": "lease_expired",
        "measured": (NOW - expired_at).total_seconds(),
        "threshold": 0,
        "unit": "seconds",
        "action": "requeue",
        "detail": "",
    }


HOST_WRITER = Path(__file__).resolve().parents[1] / "tests" / "support" / "host_writer.py"


def project_ids(projects: int) -> list[str]:
    """The seeded projects' ids (as SEED writes them): the streams the host writes too."""
    return [f"00000000-0000-4000-8000-{g:012x}" for g in range(projects)]


@contextlib.asynccontextmanager
async def host_writer(dsn: str, projects: int | None) -> AsyncIterator[list[int]]:
    """The host's own writer on every project's stream while the block runs (none when
    ``projects`` is None); yields a list that receives its appends once it has stopped."""
    appended: list[int] = []
    if projects is None:
        yield appended
        return
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HOST_WRITER),
        dsn,
        *project_ids(projects),
        stdout=asyncio.subprocess.PIPE,
    )
    await asyncio.sleep(0.3)  # connected and appending before the measurement starts
    try:
        yield appended
    finally:
        process.send_signal(signal.SIGTERM)
        out, _ = await process.communicate()
        if process.returncode != 0:
            raise RuntimeError(f"the host writer exited with {process.returncode}")
        appended.append(json.loads(out.decode().strip().splitlines()[-1])["appended"])


async def on_a_copy(
    template: str,
    expired: int,
    method: Callable[[str, int], Awaitable[tuple[float, int]]],
    writer_projects: int | None = None,
) -> tuple[float, int | None]:
    """``method``'s rate on a fresh copy, and the host writer's appends meanwhile."""
    async with (
        scratch_database("qr_bench_copy", template=template) as copy,
        host_writer(dsn_for(copy), writer_projects) as appended,
    ):
        elapsed, moved = await method(dsn_for(copy), expired)
    return moved / elapsed, (appended[0] if appended else None)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--expired", type=int, default=10_000)
    parser.add_argument("--others", type=int, default=100_000)
    parser.add_argument("--projects", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--host-writer",
        action="store_true",
        help="run every measurement beside the host's own writer on the same streams",
    )
    args = parser.parse_args()
    writer_projects = args.projects if args.host_writer else None

    print(
        f"lease reap: {args.expired:,} expired leases among {args.others:,} other rows, "
        f"{args.projects} projects, {args.rounds} round(s), medians reported"
        + (", beside the host's own writer on every stream" if args.host_writer else "")
    )
    async with scratch_database("qr_bench_seed") as template:
        started = time.perf_counter()
        await seed(dsn_for(template), args.expired, args.others, args.projects)
        print(f"seeded in {time.perf_counter() - started:.1f}s")
        rates: dict[str, list[float]] = {"reaper": [], "bare": [], "loop": []}
        host_appends: list[int] = []
        methods = {"reaper": run_reaper, "bare": run_bare, "loop": run_loop}
        for round_no in range(1, args.rounds + 1):
            line = []
            for name, method in methods.items():
                rate, appended = await on_a_copy(template, args.expired, method, writer_projects)
                rates[name].append(rate)
                line.append(f"{name} {rate:,.0f}/s")
                if name == "reaper" and appended is not None:
                    host_appends.append(appended)
                    line.append(f"host appended {appended:,} meanwhile")
            of_bare_now = rates["reaper"][-1] / rates["bare"][-1]
            of_loop_now = rates["reaper"][-1] / rates["loop"][-1]
            print(
                f"  round {round_no}: "
                + ", ".join(line)
                + f"; reaper/bare {of_bare_now:.2f}, reaper/loop {of_loop_now:.1f}x"
            )

    reaper, bare, loop = (median(rates[n]) for n in ("reaper", "bare", "loop"))
    of_bare_rounds = [r / b for r, b in zip(rates["reaper"], rates["bare"], strict=True)]
    of_bare = median(of_bare_rounds)
    of_loop = median([r / n for r, n in zip(rates["reaper"], rates["loop"], strict=True)])
    ok_bare, ok_loop = of_bare >= TARGET_OF_BARE, of_loop >= TARGET_OF_LOOP
    print()
    print(f"this reaper (read + judge + move + event per lease):  {reaper:12,.0f} leases/s")
    print(f"bare set-based UPDATE (records nothing):              {bare:12,.0f} leases/s")
    print(f"one transaction per lease (read + update + event):    {loop:12,.0f} leases/s")
    moving_share = median(MOVING_SHARE)
    print(
        f"  (of which inside the batches' transactions, per lane: {moving_share:.0%};\n"
        f"   were the pass's own Python free, reaper / bare would be at most "
        f"{of_bare / moving_share:.2f})"
    )
    spread = (min(of_bare_rounds), of_bare, max(of_bare_rounds))
    load = os.getloadavg()
    print(
        "ratios: the median of the rounds' own ratios; reaper / bare across rounds "
        f"min {spread[0]:.2f}, median {spread[1]:.2f}, max {spread[2]:.2f}"
    )
    print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if host_appends:
        print(
            "beside the host's own writer: it appended "
            + ", ".join(f"{n:,}" for n in host_appends)
            + " event(s) on the same streams during the reaper's runs"
        )
    print(
        f"reaper / bare = {of_bare:.2f}  (target >= {TARGET_OF_BARE}): "
        f"{'PASS' if ok_bare else 'FAIL'}"
    )
    print(
        f"reaper / loop = {of_loop:.1f}x (target >= {TARGET_OF_LOOP:g}x): "
        f"{'PASS' if ok_loop else 'FAIL'}"
    )
    report_result(
        "lease_reap",
        {
            "expired": args.expired,
            "others": args.others,
            "reaper_per_s": round(reaper),
            "bare_per_s": round(bare),
            "loop_per_s": round(loop),
            "of_bare": round(of_bare, 2),
            "of_bare_min": round(spread[0], 2),
            "of_bare_max": round(spread[2], 2),
            "moving_share": round(moving_share, 2),
            "of_bare_if_only_moving": round(of_bare / moving_share, 2),
            "load": [round(x, 2) for x in load],
            "rounds": args.rounds,
            "host_writer": args.host_writer,
            "host_appends": host_appends,
            "of_loop": round(of_loop, 1),
            "ok": ok_bare and ok_loop,
        },
    )
    return 0 if ok_bare and ok_loop else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))

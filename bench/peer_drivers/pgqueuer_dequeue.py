"""pgqueuer has no rescue step: a job whose heartbeat went stale is re-picked by the dequeue
itself. Driven for bench/peers.py: ``install DSN`` installs its schema; ``dequeue DSN`` says
ready, waits for "go" on stdin, then times dequeues of 10 with the stale set waiting (the
first, and the median of 20), then empties the queue table (the copy is dropped after) and
times the same dequeue idle: two JSON lines, the measured window ending with the first."""

import asyncio
import json
import statistics
import sys
import time
import uuid
from datetime import timedelta

import asyncpg
from pgqueuer.adapters.persistence.queries import Queries
from pgqueuer.ports.repository import EntrypointExecutionParameter

BATCH = 10
HEARTBEAT_TIMEOUT = timedelta(seconds=30)
DEQUEUES = 20


async def timed_dequeue(queries: Queries, manager: uuid.UUID) -> tuple[float, int]:
    started = time.perf_counter()
    jobs = await queries.dequeue(
        batch_size=BATCH,
        entrypoints={"bench": EntrypointExecutionParameter(concurrency_limit=0)},
        queue_manager_id=manager,
        global_concurrency_limit=None,
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
    )
    return time.perf_counter() - started, len(jobs)


async def main(mode: str, dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        queries = Queries.from_asyncpg_connection(conn)
        if mode == "install":
            await queries.install()
            print(json.dumps({"installed": True}), flush=True)
            return
        await conn.fetchval("SELECT 1")
        print(json.dumps({"ready": True}), flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        manager = uuid.uuid4()
        stale = [await timed_dequeue(queries, manager) for _ in range(DEQUEUES)]
        assert all(picked == BATCH for _, picked in stale), stale
        figures = {
            "first_dequeue_seconds": stale[0][0],
            "dequeue_seconds": statistics.median(s for s, _ in stale),
            "batch": BATCH,
        }
        print(json.dumps(figures), flush=True)  # the measured window ends here
        await conn.execute("DELETE FROM pgqueuer")
        await conn.execute("VACUUM ANALYZE pgqueuer")
        idle = [await timed_dequeue(queries, manager) for _ in range(DEQUEUES)]
        assert all(picked == 0 for _, picked in idle), idle
        print(json.dumps({"idle_dequeue_seconds": statistics.median(s for s, _ in idle)}))
    finally:
        await conn.close()


asyncio.run(main(*sys.argv[1:3]))

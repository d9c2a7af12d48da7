"""Oban for Python's own rescue, driven for bench/peers.py: ``install DSN`` creates its schema;
``rescue DSN`` opens a pool, says ready, waits for "go" on stdin, then times one Lifeline
rescue (the plugin's own ``_rescue`` with its default ``rescue_after`` of 300 s) and prints
the figures as JSON. The rescue is one UPDATE in one transaction."""

import asyncio
import json
import sys
import time

from oban import schema
from oban._lifeline import _rescue
from oban._query import Query
from psycopg_pool import AsyncConnectionPool

RESCUE_AFTER = 300.0  # Lifeline's default


async def main(mode: str, dsn: str) -> None:
    pool = AsyncConnectionPool(conninfo=dsn, open=False, min_size=1, max_size=2)
    await pool.open()
    try:
        if mode == "install":
            await schema.install(pool)
            print(json.dumps({"installed": True}), flush=True)
            return
        async with pool.connection() as conn:
            await conn.execute("SELECT 1")
        print(json.dumps({"ready": True}), flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        started = time.perf_counter()
        await _rescue(Query(pool), RESCUE_AFTER)
        seconds = time.perf_counter() - started
        print(json.dumps({"seconds": seconds, "call_seconds": seconds, "transactions": 1}))
    finally:
        await pool.close()


asyncio.run(main(*sys.argv[1:3]))

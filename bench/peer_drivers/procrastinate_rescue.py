"""procrastinate's own stalled-jobs recipe, driven for bench/peers.py: ``install DSN`` applies
its schema; ``rescue DSN [BUDGET]`` opens the app, says ready, waits for "go" on stdin, then
times ``job_manager.get_stalled_jobs()`` followed by ``retry_job(job)`` for each (one
transaction per job) and prints the figures as JSON. With a budget (seconds), the loop stops
once it is spent and says how many it retried: a capped run, never extrapolated."""

import asyncio
import json
import sys
import time

import procrastinate


async def main(mode: str, dsn: str, budget: float | None) -> None:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))
    async with app.open_async():
        if mode == "install":
            await app.schema_manager.apply_schema_async()
            print(json.dumps({"installed": True}), flush=True)
            return
        await app.connector.execute_query_one_async("SELECT 1 AS one")
        print(json.dumps({"ready": True}), flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        started = time.perf_counter()
        stalled = list(await app.job_manager.get_stalled_jobs())
        retried = 0
        for job in stalled:
            if budget is not None and time.perf_counter() - started > budget:
                break
            await app.job_manager.retry_job(job)
            retried += 1
        seconds = time.perf_counter() - started
        print(
            json.dumps(
                {
                    "seconds": seconds,
                    "call_seconds": seconds,
                    "transactions": retried,
                    "stalled": len(stalled),
                    "retried": retried,
                    "capped": retried < len(stalled),
                }
            )
        )


args = sys.argv[1:]
asyncio.run(main(args[0], args[1], float(args[2]) if len(args) > 2 else None))

"""A host appending to the ledger its own way, for ``test_shared_ledger.py`` (no tests here).

    python host_writer.py DSN STREAM [STREAM ...]

Appends events to the given streams, round robin, as fast as it can, each with
``seq = max(seq) + 1`` inside its own transaction, and tries again when another writer (a reaper)
took that number first: the ordinary way a host writes its ledger. Runs until SIGTERM; then
prints one JSON line: ``{"appended": n, "collisions": m}``."""

from __future__ import annotations

import asyncio
import hashlib
import json
import signal
import sys
import uuid

import asyncpg

APPEND = """
INSERT INTO event (project_id, seq, kind, payload, digest, trusted, created_at)
SELECT $1::uuid, coalesce(max(seq), 0) + 1, 'HostEvent', $2::jsonb, $3, true, now()
FROM event WHERE project_id = $1::uuid
"""


async def main(dsn: str, streams: list[uuid.UUID]) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    conn = await asyncpg.connect(dsn)
    appended = collisions = 0
    n = 0
    while not stop.is_set():
        stream = streams[n % len(streams)]
        n += 1
        payload = json.dumps({"host": "billing", "n": n}, sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(payload.encode()).hexdigest()
        while True:
            try:
                async with conn.transaction():
                    await conn.execute(APPEND, stream, payload, digest)
                appended += 1
                break
            except asyncpg.UniqueViolationError:
                collisions += 1
        await asyncio.sleep(0)
    await conn.close()
    print(json.dumps({"appended": appended, "collisions": collisions}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], [uuid.UUID(s) for s in sys.argv[2:]]))

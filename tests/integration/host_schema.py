"""A host's own schema variants, for the tests that put the reaper inside a real host (no tests
here): the dispatch schema of a host that dispatches through RabbitMQ (SPEC §3, ADR-0044 §4).
The reaper never creates these on its own: a host has them, or asks for them."""

from __future__ import annotations

import asyncpg

#: job.dispatch_seq, job.dispatched_at and job_outbox, as SPEC §3 states the contract.
OUTBOX_SCHEMA = """
ALTER TABLE job ADD COLUMN dispatch_seq bigint NOT NULL DEFAULT 0;
ALTER TABLE job ADD COLUMN dispatched_at timestamptz;
CREATE TABLE job_outbox (
    id bigserial PRIMARY KEY,
    key text UNIQUE,
    job_id uuid,
    project_id uuid,
    payload jsonb,
    not_before timestamptz,
    created_at timestamptz DEFAULT now(),
    sent_at timestamptz,
    claimed_at timestamptz
);
"""


async def add_outbox_schema(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(OUTBOX_SCHEMA)
    finally:
        await conn.close()

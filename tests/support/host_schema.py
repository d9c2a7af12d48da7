"""A host's own schema variants, for the tests that put the reaper inside a real host (no tests
here): a host whose ``state``/``phase`` are enum types and whose ``project_id`` references a
``project`` table (SPEC §10), and the dispatch schema of a host that dispatches through RabbitMQ
(SPEC §3, ADR-0044 §4). The reaper never creates these on its own: a host has them, or asks
for them."""

from __future__ import annotations

import asyncpg

#: A host's job queue with enum states and phases and a project table its rows reference, as a
#: host creates it before the reaper ever runs (``PROJECT_COLUMNS``: the project table's other
#: columns).
HOST_WITH_PROJECTS = """
CREATE TYPE job_state AS ENUM
    ('ready', 'leased', 'succeeded', 'failed', 'cancelled', 'awaiting_human');
CREATE TYPE job_phase AS ENUM ('build', 'test', 'deploy');
CREATE TABLE project (
    id uuid PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now(),
    PROJECT_COLUMNS
);
CREATE TABLE job (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id uuid NOT NULL REFERENCES project (id),
    kind text NOT NULL, phase job_phase, state job_state NOT NULL DEFAULT 'ready',
    priority int NOT NULL DEFAULT 0, run_after timestamptz NOT NULL DEFAULT now(),
    attempts int NOT NULL DEFAULT 0, lease_owner text, lease_expires_at timestamptz,
    idempotency_key text,
    created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE human_gate (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id uuid NOT NULL REFERENCES project (id), job_id uuid REFERENCES job (id),
    kind text NOT NULL, prompt text NOT NULL, choices jsonb NOT NULL DEFAULT '[]',
    answer text, answered_at timestamptz, created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE event (
    project_id uuid NOT NULL REFERENCES project (id), seq bigint NOT NULL, kind text NOT NULL,
    payload jsonb NOT NULL, digest text NOT NULL, trusted boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (project_id, seq));
"""


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

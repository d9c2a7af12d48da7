-- The outbox dispatch schema of a host that dispatches through RabbitMQ (SPEC §3, ADR-0044
-- §3-§5), for a fresh install that wants it: `reaper db migrate --outbox` (never without).
-- A host that has these already keeps its own; only what is missing is added. With them in
-- place, `[queue.reap] dispatch = "auto"` finds outbox dispatch in force.

-- name: add_job_dispatch_seq --
-- The dispatch generation: every new dispatch episode increments it (a constant default: no
-- table rewrite, a brief lock).
ALTER TABLE job ADD COLUMN IF NOT EXISTS dispatch_seq bigint NOT NULL DEFAULT 0;

-- name: add_job_dispatched_at --
-- When the relay last published the job's dispatch message.
ALTER TABLE job ADD COLUMN IF NOT EXISTS dispatched_at timestamptz;

-- name: create_job_outbox --
-- One row per dispatch episode, key dispatch:<job_id>:<dispatch_seq>, for the host's relay.
CREATE TABLE IF NOT EXISTS job_outbox (
    id         bigserial PRIMARY KEY,
    key        text UNIQUE,
    job_id     uuid,
    project_id uuid,
    payload    jsonb,
    not_before timestamptz,
    created_at timestamptz DEFAULT now(),
    sent_at    timestamptz,
    claimed_at timestamptz
);

-- name: index_job_outbox_unsent --
-- The rows the relay has not sent, oldest first (the relay's work; the reaper's lost dispatch).
CREATE INDEX CONCURRENTLY IF NOT EXISTS job_outbox_unsent_idx
    ON job_outbox (created_at, job_id) WHERE sent_at IS NULL;

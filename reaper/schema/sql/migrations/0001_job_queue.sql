-- 0001: the host system's job queue tables (SPEC §3).
--
-- An existing installation already has them: `reaper/schema/steps.py` declares, for each
-- statement below, the catalog check that says whether it is needed, and `reaper db migrate`
-- runs only what is missing. Statements on host tables that take a lock the host's traffic
-- would feel run in one transaction under a short lock_timeout; indexes are built
-- CONCURRENTLY, one statement each, outside any transaction.

-- name: create_job --
-- The job table, for an installation that has none (a host's own table is left as it is).
CREATE TABLE IF NOT EXISTS job (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id       uuid NOT NULL,
    kind             text NOT NULL,
    phase            text,
    state            text NOT NULL DEFAULT 'ready'
                     CONSTRAINT job_state_known CHECK (state IN (
                         'ready', 'leased', 'succeeded', 'failed', 'cancelled', 'awaiting_human')),
    priority         int NOT NULL DEFAULT 0,
    run_after        timestamptz NOT NULL DEFAULT now(),
    attempts         int NOT NULL DEFAULT 0,
    max_attempts     int NOT NULL DEFAULT 7,
    lease_owner      text,
    lease_expires_at timestamptz,
    idempotency_key  text,
    finished_at      timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);

-- name: add_job_max_attempts --
-- A column the reaper reads that an older host table may lack (a constant default: no rewrite).
ALTER TABLE job ADD COLUMN IF NOT EXISTS max_attempts int NOT NULL DEFAULT 7;

-- name: add_job_finished_at --
-- A column the reaper reads that an older host table may lack.
ALTER TABLE job ADD COLUMN IF NOT EXISTS finished_at timestamptz;

-- name: add_job_phase --
-- A column the reaper reads that an older host table may lack.
ALTER TABLE job ADD COLUMN IF NOT EXISTS phase text;

-- name: create_job_dependency --
-- What a job waits for before it is claimable.
CREATE TABLE IF NOT EXISTS job_dependency (
    job_id     uuid NOT NULL REFERENCES job (id) ON DELETE CASCADE,
    depends_on uuid NOT NULL REFERENCES job (id),
    PRIMARY KEY (job_id, depends_on)
);

-- name: create_human_gate --
-- What waits for a person: poison jobs and dead letters.
CREATE TABLE IF NOT EXISTS human_gate (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id  uuid NOT NULL,
    job_id      uuid REFERENCES job (id),
    kind        text NOT NULL,
    prompt      text NOT NULL,
    choices     jsonb NOT NULL DEFAULT '[]'::jsonb,
    answer      text,
    answered_at timestamptz,
    answered_by text,
    identity    text,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- name: add_human_gate_answered_by --
-- A column the reaper writes that an older host table may lack.
ALTER TABLE human_gate ADD COLUMN IF NOT EXISTS answered_by text;

-- name: add_human_gate_identity --
-- A column the reaper writes that an older host table may lack.
ALTER TABLE human_gate ADD COLUMN IF NOT EXISTS identity text;

-- name: index_job_idempotency_key --
-- One job per idempotency key and project.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS job_project_idempotency_key_uq
    ON job (project_id, idempotency_key);

-- name: index_job_dependency_depends_on --
-- The jobs that wait for a given job.
CREATE INDEX CONCURRENTLY IF NOT EXISTS job_dependency_depends_on_idx
    ON job_dependency (depends_on);

-- name: index_human_gate_identity --
-- One gate per episode: a second pass over the same episode finds the gate already raised.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS human_gate_identity_uq
    ON human_gate (identity) WHERE identity IS NOT NULL;

-- name: index_human_gate_open --
-- The open gates, oldest first.
CREATE INDEX CONCURRENTLY IF NOT EXISTS human_gate_open_idx
    ON human_gate (created_at) WHERE answered_at IS NULL;

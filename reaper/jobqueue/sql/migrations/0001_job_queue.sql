-- The host system's job queue tables (SPEC §3). An existing installation already has them,
-- so every statement is defensive: it creates what is missing and leaves what is there.

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

-- Columns the reaper reads that an older host table may lack.
ALTER TABLE job ADD COLUMN IF NOT EXISTS max_attempts int NOT NULL DEFAULT 7;
ALTER TABLE job ADD COLUMN IF NOT EXISTS finished_at timestamptz;
ALTER TABLE job ADD COLUMN IF NOT EXISTS phase text;

CREATE UNIQUE INDEX IF NOT EXISTS job_project_idempotency_key_uq
    ON job (project_id, idempotency_key);

CREATE TABLE IF NOT EXISTS job_dependency (
    job_id     uuid NOT NULL REFERENCES job (id) ON DELETE CASCADE,
    depends_on uuid NOT NULL REFERENCES job (id),
    PRIMARY KEY (job_id, depends_on)
);

CREATE INDEX IF NOT EXISTS job_dependency_depends_on_idx ON job_dependency (depends_on);

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

ALTER TABLE human_gate ADD COLUMN IF NOT EXISTS answered_by text;
ALTER TABLE human_gate ADD COLUMN IF NOT EXISTS identity text;

-- One gate per episode: a second pass over the same episode finds the gate already raised.
CREATE UNIQUE INDEX IF NOT EXISTS human_gate_identity_uq
    ON human_gate (identity) WHERE identity IS NOT NULL;

CREATE INDEX IF NOT EXISTS human_gate_open_idx
    ON human_gate (created_at) WHERE answered_at IS NULL;

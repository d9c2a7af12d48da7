-- 0005: dead letters that were dispatch pointers (SPEC §3, outbox dispatch): a dead-lettered
-- pointer parks the job it points to, or is recorded as stale; its dead_letter row says which.
-- Such a row keeps the job it pointed to (a job may be dead-lettered again at a later
-- generation), or none when that job does not exist. Only the reaper's own table changes.

-- name: add_dead_letter_disposition --
-- What became of each dead letter: parked, its job parked (a pointer), or a stale pointer.
ALTER TABLE dead_letter ADD COLUMN IF NOT EXISTS disposition text NOT NULL DEFAULT 'parked'
    CONSTRAINT dead_letter_disposition_known
    CHECK (disposition IN ('parked', 'pointer_parked', 'stale_pointer'));

-- name: let_dead_letter_job_id_be_null --
-- A stale pointer to a job that does not exist keeps no job.
ALTER TABLE dead_letter ALTER COLUMN job_id DROP NOT NULL;

-- name: drop_dead_letter_job_id_unique --
-- A job may be dead-lettered again at a later generation: one job, several letters.
ALTER TABLE dead_letter DROP CONSTRAINT IF EXISTS dead_letter_job_id_key;

-- name: index_dead_letter_job --
-- The letters of one job (a pointer's park finds its job's earlier letters).
CREATE INDEX CONCURRENTLY IF NOT EXISTS dead_letter_job_idx ON dead_letter (job_id);

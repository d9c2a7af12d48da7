-- 0012: what a person reads (SPEC §1, §10): the gates a job has been parked behind, and the
-- ledger newest first, by time, project, object or answer, each read from an index so that
-- its cost does not grow with the ledger's age.

-- name: index_human_gate_job --
-- A job's gates, latest first: which gate it waits behind (an answer acts only on that one).
CREATE INDEX CONCURRENTLY IF NOT EXISTS human_gate_job_idx
    ON human_gate (job_id, created_at, id);

-- name: index_event_created --
-- The ledger newest first across streams (`reaper events`, `--since`).
CREATE INDEX CONCURRENTLY IF NOT EXISTS event_created_idx
    ON event (created_at, project_id, seq);

-- name: index_event_project_created --
-- One project's stream newest first (`reaper events --project`).
CREATE INDEX CONCURRENTLY IF NOT EXISTS event_project_created_idx
    ON event (project_id, created_at, seq);

-- name: index_event_object --
-- What happened to one job or queue, newest first (`reaper events --object`).
CREATE INDEX CONCURRENTLY IF NOT EXISTS event_object_idx
    ON event ((payload ->> 'object'), created_at, project_id, seq);

-- name: index_event_condition --
-- One condition's records newest first (`reaper events --condition`), however rare it is.
CREATE INDEX CONCURRENTLY IF NOT EXISTS event_condition_idx
    ON event ((payload ->> 'condition'), created_at, project_id, seq);

-- name: index_event_answers --
-- The events that are not verdicts (gate answers, and the host's own kinds), newest first:
-- few beside the verdicts, so `reaper events --kind GateAnswered` never walks past those.
CREATE INDEX CONCURRENTLY IF NOT EXISTS event_not_verdict_idx
    ON event (created_at, project_id, seq) WHERE kind <> 'QueueReaped';

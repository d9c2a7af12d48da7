-- What only a person's answer to a gate runs (SPEC §1), each under a `-- name: NAME --` header
-- and a one-line description. Loaded with queries.sql by reaper/jobqueue/sql/__init__.py. Each runs inside the
-- answer's transaction, the gate row locked by gate_for_answer; `now` is the caller's.

-- ------------------------------------------------------------------------------ gates --

-- name: gate_for_answer --
-- One gate, locked for the answer's transaction.
SELECT id, project_id, job_id, kind, prompt, choices::text AS choices, answer, answered_at,
       answered_by, identity, created_at
FROM human_gate
WHERE id = $1::uuid
FOR UPDATE;

-- name: answer_gate --
-- Record a gate's answer (only if still unanswered); returns the answered gate.
UPDATE human_gate
SET answer = $3::text, answered_at = $1::timestamptz, answered_by = $4::text
WHERE id = $2::uuid AND answered_at IS NULL
RETURNING id, project_id, job_id, kind, prompt, choices::text AS choices, answer,
          answered_at, answered_by, identity, created_at,
          (SELECT j.kind FROM job AS j WHERE j.id = human_gate.job_id) AS job_kind;

-- name: latest_gate_of_job --
-- The job's latest gate, of any kind (the one it is parked behind, if it is parked).
SELECT id, kind, created_at
FROM human_gate
WHERE job_id = $1::uuid
ORDER BY created_at DESC, id DESC
LIMIT 1;

-- name: cancel_parked_job --
-- Give up a parked job: cancelled, finished, never delivered again; only if it is still
-- awaiting a human. No dispatch episode starts, so no outbox row.
UPDATE job
SET state = 'cancelled', finished_at = $1::timestamptz, updated_at = $1::timestamptz
WHERE id = $2::uuid AND state = 'awaiting_human'
RETURNING id;

-- name: ready_parked_job --
-- Re-ready a parked job for one more delivery, only if it is still awaiting a human.
UPDATE job
SET state = 'ready', run_after = $1::timestamptz, updated_at = $1::timestamptz
WHERE id = $2::uuid AND state = 'awaiting_human'
RETURNING id;

-- ----------------------------------------------------------------------- dead letters --
-- A parked `bus.dead_letter` job (reaper/jobqueue/sql/queries.sql parks it) settles with
-- its gate's answer: `succeeded` once replayed, `cancelled` once dismissed.

-- name: dead_letter_of_job --
-- What a parked dead-letter job keeps of its letter, and the job's state.
SELECT d.identity, d.job_id, d.queue, d.message_id, d.origin_queue, d.reason, d.body,
       d.body_encoding, d.body_bytes, d.body_truncated, d.is_json_object, d.parked_at,
       j.state AS job_state
FROM dead_letter AS d
JOIN job AS j ON j.id = d.job_id
WHERE d.job_id = $1::uuid AND d.disposition = 'parked';

-- name: settle_parked_job --
-- Settle a parked job ($3: cancelled or succeeded), only if it is still awaiting a human. $3
-- takes the state column's own type (text, or the host's enum).
UPDATE job
SET state = $3, finished_at = $1::timestamptz, updated_at = $1::timestamptz
WHERE id = $2::uuid AND state = 'awaiting_human'
RETURNING id;

-- name: count_events --
-- How many events read_events' filter selects in all ($1..$5, $6 action, $7 source), so a listing
-- cut at its limit says how many it did not show.
SELECT count(*)
FROM event
WHERE ($1::timestamptz IS NULL OR created_at >= $1::timestamptz)
  AND ($2::uuid IS NULL OR project_id = $2::uuid)
  AND ($3::text IS NULL OR kind = $3::text)
  AND ($4::text IS NULL OR (payload ->> 'condition') = $4::text)
  AND ($5::text IS NULL OR (payload ->> 'object') = $5::text)
  AND ($6::text IS NULL OR (payload ->> 'action') = $6::text)
  AND ($7::text IS NULL OR (payload ->> 'source') = $7::text);

-- name: streams_between --
-- The ledger's streams (projects) whose ids lie between $1 and $2 (a prefix of an id, as its
-- lowest and highest id), at most $3, by id: one probe of the event table's primary key per
-- stream found, however many events each holds.
WITH RECURSIVE streams AS (
    (SELECT project_id FROM event
     WHERE project_id BETWEEN $1::uuid AND $2::uuid
     ORDER BY project_id LIMIT 1)
    UNION ALL
    SELECT (SELECT e.project_id FROM event AS e
            WHERE e.project_id > s.project_id AND e.project_id <= $2::uuid
            ORDER BY e.project_id LIMIT 1)
    FROM streams AS s
    WHERE s.project_id IS NOT NULL
)
SELECT project_id FROM streams WHERE project_id IS NOT NULL LIMIT $3::int;

-- name: jobs_between --
-- The jobs whose ids lie between $1 and $2 (a prefix of an id), at most $3, by id.
SELECT id FROM job
WHERE id BETWEEN $1::uuid AND $2::uuid
ORDER BY id
LIMIT $3::int;

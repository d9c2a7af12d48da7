-- The seeded scenario's queries (reaper/demo/scenario.py: `reaper demo`, the dry-run proof and
-- the integration tests), and the outbox demo's host, relay and worker (reaper/demo/outbox.py),
-- each under a `-- name: NAME --` header and a one-line description, as in
-- queries.sql. Run through reaper.demo.admin.run_scenario_query; a pass never runs any of them.
-- Like every query of the reaper, none reads the database's clock: times come as parameters.

-- name: scenario_insert_jobs --
-- Insert jobs, one per array element, every column given (the scenario pins its own times).
INSERT INTO job (id, project_id, kind, phase, state, priority, run_after, attempts,
                 max_attempts, lease_owner, lease_expires_at, idempotency_key, finished_at,
                 created_at, updated_at)
SELECT *
FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::int[],
            $7::timestamptz[], $8::int[], $9::int[], $10::text[], $11::timestamptz[],
            $12::text[], $13::timestamptz[], $14::timestamptz[], $15::timestamptz[]);

-- name: scenario_insert_dependencies --
-- Insert job dependencies: job $1[i] waits for job $2[i].
INSERT INTO job_dependency (job_id, depends_on)
SELECT * FROM unnest($1::uuid[], $2::uuid[]);

-- name: scenario_count_events --
-- How many ledger events there are, on every stream.
SELECT count(*) AS events FROM event;

-- name: scenario_ledger_summary --
-- The ledger's QueueReaped events counted by source, condition and action.
SELECT payload ->> 'source' AS source, payload ->> 'condition' AS condition,
       payload ->> 'action' AS action, count(*) AS events
FROM event
WHERE kind = 'QueueReaped'
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3;

-- name: scenario_job_states --
-- Every job's state, attempts and lease, by id (for the tests' and the demo's after-look).
SELECT id, project_id, kind, state, attempts, max_attempts, lease_owner, lease_expires_at,
       run_after
FROM job
ORDER BY id;

-- name: outbox_enqueue --
-- The host enqueues one job and its first dispatch episode in one transaction: generation 1
-- and its outbox row (key dispatch:<job_id>:1, the vibey.job.dispatch/1 body), as the host's
-- own enqueue does under outbox dispatch. $1 job, $2 project, $3 kind, $4 now.
WITH job_row AS (
    INSERT INTO job (id, project_id, kind, state, run_after, attempts, max_attempts,
                     dispatch_seq, created_at, updated_at)
    VALUES ($1::uuid, $2::uuid, $3::text, 'ready', $4::timestamptz, 0, 7, 1, $4, $4)
    RETURNING id, project_id, kind, dispatch_seq, run_after
)
INSERT INTO job_outbox (key, job_id, project_id, payload, not_before, created_at)
SELECT 'dispatch:' || id || ':' || dispatch_seq, id, project_id,
       jsonb_build_object('schema', 'vibey.job.dispatch/1', 'job_id', id, 'project_id',
                          project_id, 'dispatch_seq', dispatch_seq, 'kind', kind,
                          'not_before', run_after),
       run_after, $4::timestamptz
FROM job_row;

-- name: outbox_unsent --
-- The relay's work: the outbox rows not sent yet, in the order they were written.
SELECT id, key, payload::text AS payload FROM job_outbox WHERE sent_at IS NULL ORDER BY id;

-- name: outbox_mark_sent --
-- The relay, once the broker confirmed row $1: sent, and its job's dispatched_at ($2 now).
WITH sent AS (
    UPDATE job_outbox SET sent_at = $2::timestamptz WHERE id = $1::bigint RETURNING job_id
)
UPDATE job SET dispatched_at = $2::timestamptz FROM sent WHERE job.id = sent.job_id;

-- name: outbox_claim --
-- A worker's claim, fenced on the generation its message carries (ADR-0044 §5): job $1 at
-- generation $2, still ready, leased to $3 until $4. No row: the message is of an older
-- generation (or the job is not ready), and the worker drops it.
UPDATE job
SET state = 'leased', lease_owner = $3::text, lease_expires_at = $4::timestamptz,
    attempts = attempts + 1, updated_at = $5::timestamptz
WHERE id = $1::uuid AND dispatch_seq = $2::bigint AND state = 'ready'
RETURNING id;

-- name: outbox_finish --
-- The worker that holds job $1's lease ($2) at generation $3 finishes it, at $4.
UPDATE job
SET state = 'succeeded', finished_at = $4::timestamptz, lease_owner = NULL,
    lease_expires_at = NULL, updated_at = $4::timestamptz
WHERE id = $1::uuid AND lease_owner = $2::text AND dispatch_seq = $3::bigint AND state = 'leased'
RETURNING id;

-- name: outbox_job --
-- Job $1 as the demo's summary shows it: its state, attempts, generation, outbox rows and
-- ledger events.
SELECT j.state, j.attempts, j.dispatch_seq,
       (SELECT count(*) FROM job_outbox AS o WHERE o.job_id = j.id) AS outbox_rows,
       (SELECT count(*) FROM event AS e
        WHERE e.project_id = j.project_id AND e.payload ->> 'object' = j.id::text) AS events
FROM job AS j
WHERE j.id = $1::uuid;

-- The seeded scenario's queries (reaper/scenario.py: `reaper demo`, the dry-run proof and the
-- integration tests), each under a `-- name: NAME --` header and a one-line description, as in
-- queries.sql. Run through reaper.store.run_scenario_query; a pass never runs any of them.
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

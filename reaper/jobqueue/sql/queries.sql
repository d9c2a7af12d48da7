-- Every query the reaper runs, each under a `-- name: NAME --` header and a one-line
-- description. Loaded by reaper/sql/__init__.py. No query reads the database's clock:
-- a query that depends on time takes `now` as its first parameter ($1), so tests pin it
-- (now() appears only as a column default). The one write that is not a query here is the
-- ledger's: events go in with COPY into event (project_id, seq, kind, payload, digest,
-- trusted, created_at), after allocate_seqs has reserved their numbers.

-- name: create_migration_table --
-- The table recording which migration files have been applied.
CREATE TABLE IF NOT EXISTS reaper_migration (
    name       text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: lock_migrations --
-- A session advisory lock held while migrating, so concurrent migrators take turns.
SELECT pg_advisory_lock($1::int, $2::int);

-- name: unlock_migrations --
-- Release the migration lock.
SELECT pg_advisory_unlock($1::int, $2::int);

-- name: applied_migrations --
-- The names of the migrations already applied.
SELECT name FROM reaper_migration ORDER BY name;

-- name: record_migration --
-- Remember that a migration has been applied (in the migration's own transaction).
INSERT INTO reaper_migration (name) VALUES ($1);

-- name: expired_leases --
-- Leased jobs past lease_expires_at + grace, oldest first, bounded; optionally one project.
SELECT id, project_id, kind, lease_owner, lease_expires_at, attempts, max_attempts
FROM job
WHERE state = 'leased'
  AND lease_expires_at < $1::timestamptz - $2::int * interval '1 second'
  AND ($4::uuid IS NULL OR project_id = $4::uuid)
ORDER BY lease_expires_at, id
LIMIT $3::int;

-- name: count_expired_leases --
-- How many leases are expired beyond the grace (to report the remainder past the bound).
SELECT count(*)
FROM job
WHERE state = 'leased'
  AND lease_expires_at < $1::timestamptz - $2::int * interval '1 second'
  AND ($3::uuid IS NULL OR project_id = $3::uuid);

-- name: claimable_heads --
-- Per project with ready work (a skip scan), the claimable job that has waited longest.
-- Claimable: ready, due, every dependency succeeded, a known phase ($2 empty: any phase).
-- It became claimable at the later of its run_after and its last dependency's success. The
-- first claimable row in run_after order bounds the answer: a job claimable earlier must have
-- a run_after between that row's run_after and its claimable_since, a short index range.
WITH RECURSIVE projects AS (
    (SELECT project_id FROM job
     WHERE state = 'ready' AND ($3::uuid IS NULL OR project_id = $3::uuid)
     ORDER BY project_id LIMIT 1)
    UNION ALL
    SELECT (SELECT j.project_id FROM job AS j
            WHERE j.state = 'ready' AND j.project_id > p.project_id
            ORDER BY j.project_id LIMIT 1)
    FROM projects AS p
    WHERE p.project_id IS NOT NULL AND $3::uuid IS NULL
)
SELECT p.project_id, best.id, best.kind, best.claimable_since
FROM projects AS p
CROSS JOIN LATERAL (
    SELECT j.run_after, greatest(j.run_after, d.last_success) AS claimable_since
    FROM job AS j
    CROSS JOIN LATERAL (
        SELECT max(dj.finished_at) AS last_success,
               bool_and(coalesce(dj.state = 'succeeded', false)) AS all_succeeded
        FROM job_dependency AS jd LEFT JOIN job AS dj ON dj.id = jd.depends_on
        WHERE jd.job_id = j.id
    ) AS d
    WHERE j.project_id = p.project_id AND j.state = 'ready' AND j.run_after <= $1::timestamptz
      AND (cardinality($2::text[]) = 0 OR j.phase = ANY ($2::text[]))
      AND d.all_succeeded IS NOT FALSE
    ORDER BY j.run_after, j.id
    LIMIT 1
) AS head
CROSS JOIN LATERAL (
    SELECT j.id, j.kind, greatest(j.run_after, d.last_success) AS claimable_since
    FROM job AS j
    CROSS JOIN LATERAL (
        SELECT max(dj.finished_at) AS last_success,
               bool_and(coalesce(dj.state = 'succeeded', false)) AS all_succeeded
        FROM job_dependency AS jd LEFT JOIN job AS dj ON dj.id = jd.depends_on
        WHERE jd.job_id = j.id
    ) AS d
    WHERE j.project_id = p.project_id AND j.state = 'ready'
      AND j.run_after >= head.run_after AND j.run_after <= head.claimable_since
      AND j.run_after <= $1::timestamptz
      AND (cardinality($2::text[]) = 0 OR j.phase = ANY ($2::text[]))
      AND d.all_succeeded IS NOT FALSE
    ORDER BY greatest(j.run_after, d.last_success), j.run_after, j.id
    LIMIT 1
) AS best
WHERE p.project_id IS NOT NULL
ORDER BY p.project_id;

-- name: move_leases --
-- Move a batch of expired leases that are still exactly as read. A row is moved only if it
-- is still leased, in the same project, by the same owner, with the same expiry and
-- attempts as read (a job finished, re-leased or extended since is left alone); rows
-- another reaper holds are skipped, never waited for. Requeue (every job not in $6): ready,
-- lease cleared, run_after = now. Park (the jobs in $6): awaiting_human, lease cleared, one
-- attempt refunded, and a delivery_exhausted gate raised once per episode (by identity,
-- $7). The caller appends each move's event in the same transaction. Returns one row: the
-- ids moved (NULL when every row of the batch moved, the usual case) and the ids parked.
WITH input AS (
    SELECT *
    FROM unnest($2::uuid[], $3::text[], $4::timestamptz[], $5::int[], $10::uuid[])
         AS i (job_id, lease_owner, lease_expires_at, attempts, project_id)
),
locked AS (
    SELECT j.ctid AS row_ctid
    FROM input AS i
    JOIN job AS j ON j.id = i.job_id
    WHERE j.state = 'leased'
      AND j.project_id = i.project_id
      AND j.lease_owner IS NOT DISTINCT FROM i.lease_owner
      AND j.lease_expires_at = i.lease_expires_at
      AND j.attempts = i.attempts
      AND j.lease_expires_at < $1::timestamptz
    FOR NO KEY UPDATE OF j SKIP LOCKED
),
moved AS (
    UPDATE job AS j
    SET state = CASE WHEN j.id = ANY ($6::uuid[]) THEN 'awaiting_human' ELSE 'ready' END,
        attempts = CASE WHEN j.id = ANY ($6::uuid[]) THEN greatest(j.attempts - 1, 0)
                        ELSE j.attempts END,
        run_after = CASE WHEN j.id = ANY ($6::uuid[]) THEN j.run_after
                         ELSE $1::timestamptz END,
        lease_owner = NULL,
        lease_expires_at = NULL,
        updated_at = $1::timestamptz
    FROM locked AS l
    WHERE j.ctid = l.row_ctid  -- the version just locked (a newer one is left: skipped)
    RETURNING j.id, j.project_id, j.state = 'awaiting_human' AS parked
),
gates AS (
    INSERT INTO human_gate (project_id, job_id, kind, prompt, choices, identity, created_at)
    SELECT m.project_id, m.id, 'delivery_exhausted', p.prompt, $9::jsonb, p.identity,
           $1::timestamptz
    FROM moved AS m
    JOIN unnest($6::uuid[], $7::text[], $8::text[]) AS p (job_id, identity, prompt)
      ON p.job_id = m.id
    WHERE m.parked
    ON CONFLICT (identity) WHERE identity IS NOT NULL DO NOTHING
)
SELECT CASE WHEN count(*) < cardinality($2::uuid[])
            THEN coalesce(array_agg(id), '{}') END AS moved,
       array_agg(id) FILTER (WHERE parked) AS parked
FROM moved;

-- name: allocate_seqs --
-- Reserve the next $3[i] sequence numbers of each stream $2[i], locking the streams in
-- project_id order (no deadlock between writers) until commit; returns each stream's new
-- last_seq. A rolled-back transaction gives its numbers back, so streams stay gapless.
INSERT INTO ledger_stream AS s (project_id, last_seq)
SELECT stream, n
FROM unnest($1::uuid[], $2::bigint[]) AS a (stream, n)
ORDER BY stream
ON CONFLICT (project_id) DO UPDATE SET last_seq = s.last_seq + EXCLUDED.last_seq
RETURNING s.project_id, s.last_seq;

-- name: lock_sightings --
-- Take the transaction's advisory locks on sighting keys, in ascending order (no deadlock).
SELECT count(pg_advisory_xact_lock(k))
FROM (SELECT DISTINCT k FROM unnest($1::bigint[]) AS u (k) ORDER BY k) AS sorted;

-- name: latest_sightings --
-- The latest sighting record (surface or cleared) of each given key, where there is one.
SELECT k.ord, e.project_id, e.payload::text AS payload, e.trusted
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[])
     WITH ORDINALITY AS k (stream, source, condition, scope, ord)
CROSS JOIN LATERAL (
    SELECT e.project_id, e.payload, e.trusted
    FROM event AS e
    WHERE e.kind = 'QueueReaped'
      AND (e.payload ->> 'action') IN ('surface', 'cleared')
      AND e.project_id = k.stream
      AND (e.payload ->> 'source') = k.source
      AND (e.payload ->> 'condition') = k.condition
      AND reaper_sighting_scope(e.project_id, e.payload) = k.scope
    ORDER BY e.seq DESC
    LIMIT 1
) AS e
ORDER BY k.ord;

-- name: open_sightings --
-- Every open sighting (its latest record a surface) of the given sources; for job_queue,
-- only on one project's stream when $2 is given.
SELECT project_id, payload::text AS payload, trusted
FROM (
    SELECT DISTINCT ON (project_id, (payload ->> 'source'), (payload ->> 'condition'),
                        reaper_sighting_scope(project_id, payload))
           project_id, payload, trusted
    FROM event
    WHERE kind = 'QueueReaped'
      AND (payload ->> 'action') IN ('surface', 'cleared')
      AND (payload ->> 'source') = ANY ($1::text[])
      AND ($2::uuid IS NULL OR (payload ->> 'source') <> 'job_queue' OR project_id = $2::uuid)
    ORDER BY project_id, (payload ->> 'source'), (payload ->> 'condition'),
             reaper_sighting_scope(project_id, payload), seq DESC
) AS latest
WHERE (payload ->> 'action') = 'surface';

-- name: ledger_events --
-- One stream's events in sequence order.
SELECT project_id, seq, kind, payload::text AS payload, digest, trusted, created_at
FROM event
WHERE project_id = $1::uuid
ORDER BY seq;

-- name: list_gates --
-- Gates, oldest first; only open ones when $1, only one kind when $2 is given.
SELECT id, project_id, job_id, kind, prompt, choices::text AS choices, answer, answered_at,
       answered_by, identity, created_at
FROM human_gate
WHERE (NOT $1::bool OR answered_at IS NULL)
  AND ($2::text IS NULL OR kind = $2::text)
ORDER BY created_at, id;

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
          answered_at, answered_by, identity, created_at;

-- name: ready_parked_job --
-- Re-ready a parked job for one more delivery, only if it is still awaiting a human.
UPDATE job
SET state = 'ready', run_after = $1::timestamptz, updated_at = $1::timestamptz
WHERE id = $2::uuid AND state = 'awaiting_human'
RETURNING id;

-- ------------------------------------------------------------------------- dead letters --
-- SPEC §1 (e): a dead letter read from an owned dead-letter queue becomes a parked
-- `bus.dead_letter` job (fleet project, idempotency_key `dead_letter:<identity>`), its
-- `dead_letter` row (migration 0004: what the letter was) and a `bus_dead_lettered` gate
-- (identity `dead_letter:<identity>`); the caller appends its event in the same transaction.

-- name: park_dead_letter --
-- Park one dead letter, once: the job's idempotency key decides (a concurrent park of the same
-- identity waits for the first and then inserts nothing). Returns one row: the job inserted
-- (NULL: already parked) and what the letter's row and gate inserts returned (both must be
-- there when the job is; the caller rolls back otherwise). $2 is `dead_letter:<identity>`.
WITH parked_job AS (
    INSERT INTO job (project_id, kind, state, run_after, attempts, idempotency_key,
                     created_at, updated_at)
    VALUES ($14::uuid, $15::text, 'awaiting_human', $1::timestamptz, 0, $2::text,
            $1::timestamptz, $1::timestamptz)
    ON CONFLICT (project_id, idempotency_key) DO NOTHING
    RETURNING id
),
letter AS (
    INSERT INTO dead_letter (identity, job_id, queue, message_id, origin_queue, reason, body,
                             body_encoding, body_bytes, body_truncated, is_json_object,
                             parked_at)
    SELECT $3::text, j.id, $4::text, $5::text, $6::text, $7::text, $8::text, $9::text,
           $10::bigint, $11::bool, $12::bool, $1::timestamptz
    FROM parked_job AS j
    ON CONFLICT (identity) DO NOTHING
    RETURNING job_id
),
gate AS (
    INSERT INTO human_gate (project_id, job_id, kind, prompt, choices, identity, created_at)
    SELECT $14::uuid, j.id, $16::text, $13::text, $17::jsonb, $2::text, $1::timestamptz
    FROM parked_job AS j
    ON CONFLICT (identity) WHERE identity IS NOT NULL DO NOTHING
    RETURNING id
)
SELECT (SELECT id FROM parked_job) AS job_id,
       (SELECT job_id FROM letter) AS letter_job_id,
       (SELECT id FROM gate) AS gate_id;

-- name: parked_dead_letters --
-- Which of these gate identities (`dead_letter:<identity>`) are raised, answered or not:
-- across every project, since a dead letter's identity is global.
SELECT identity
FROM human_gate
WHERE identity = ANY ($1::text[]) AND identity IS NOT NULL;

-- name: count_parked_dead_letters --
-- How many dead letters read from this dead-letter queue are parked (a gate raised, answered
-- or not: the broker keeps its copy either way, so a read has to reach past them).
SELECT count(*)
FROM dead_letter AS d
WHERE d.queue = $1::text
  AND EXISTS (SELECT 1 FROM human_gate AS g
              WHERE g.identity = 'dead_letter:' || d.identity AND g.kind = $2::text);

-- name: dead_letter_of_job --
-- What a parked dead-letter job keeps of its letter, and the job's state.
SELECT d.identity, d.job_id, d.queue, d.message_id, d.origin_queue, d.reason, d.body,
       d.body_encoding, d.body_bytes, d.body_truncated, d.is_json_object, d.parked_at,
       j.state AS job_state
FROM dead_letter AS d
JOIN job AS j ON j.id = d.job_id
WHERE d.job_id = $1::uuid;

-- name: settle_parked_job --
-- Settle a parked job ($3: cancelled or succeeded), only if it is still awaiting a human.
UPDATE job
SET state = $3::text, finished_at = $1::timestamptz, updated_at = $1::timestamptz
WHERE id = $2::uuid AND state = 'awaiting_human'
RETURNING id;

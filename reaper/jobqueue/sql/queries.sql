-- Every query a pass (and the gate and ledger commands' reads) runs, each under a
-- `-- name: NAME --` header and a one-line description. Loaded by reaper/jobqueue/sql/__init__.py;
-- what only a gate's answer runs is at its end. Only database_now and
-- take_turn read the database's clock: a pass reads it once, and every query that depends on
-- time takes that `now` as a parameter, so tests pin it (now() appears otherwise only as a
-- column default).

-- name: database_now --
-- The database's clock: what every time the host wrote is compared with.
SELECT clock_timestamp();

-- name: apply_session_settings --
-- The reaper's session settings on a connection it borrows from a worker's pool (its own
-- connections get them at connect): application_name ($1), work_mem ($2), jit ($3), the
-- statement timeout ($4) and plan_cache_mode ($5).
SELECT set_config('application_name', $1, false), set_config('work_mem', $2, false),
       set_config('jit', $3, false), set_config('statement_timeout', $4, false),
       set_config('plan_cache_mode', $5, false);

-- name: reset_session_settings --
-- A borrowed connection goes back to the worker's pool with its own defaults.
RESET application_name; RESET work_mem; RESET jit; RESET statement_timeout;
RESET plan_cache_mode;

-- name: take_turn --
-- The fleet's turn ($1) for whoever asks first once $2 seconds have passed since it was last
-- taken, by the database's clock: one statement, no session state, no lock held past it. A
-- concurrent taker waits on the row for the winner's commit, then finds the turn taken. The
-- taker, and when it is not this caller the turn in force (read from the statement's snapshot:
-- at worst an older turn, so a caller told to come back sooner than needed asks once more).
WITH clock AS (
    SELECT clock_timestamp() AS now
), took AS (
    INSERT INTO reaper_turn AS t (name, taken_at, taken_by)
    SELECT $1::text, clock.now, $3::text FROM clock
    ON CONFLICT (name) DO UPDATE
        SET taken_at = excluded.taken_at, taken_by = excluded.taken_by
        WHERE t.taken_at <= excluded.taken_at - make_interval(secs => $2::float8)
    RETURNING taken_at, taken_by
)
SELECT EXISTS (SELECT 1 FROM took) AS mine,
       coalesce((SELECT taken_at FROM took),
                (SELECT taken_at FROM reaper_turn WHERE name = $1::text)) AS taken_at,
       coalesce((SELECT taken_by FROM took),
                (SELECT taken_by FROM reaper_turn WHERE name = $1::text)) AS taken_by,
       clock.now
FROM clock;

-- name: hand_back_turn --
-- Free the turn ($1) its taker took at $2 as $3, its pass over, for whoever asks next: its
-- taken_at moved back by the interval ($4 seconds), so the next ask finds it free. Only while
-- nobody took it since (a pass that overran its interval may have lost it already).
UPDATE reaper_turn
SET taken_at = taken_at - make_interval(secs => $4::float8)
WHERE name = $1::text AND taken_at = $2::timestamptz AND taken_by = $3::text;


-- name: walk_leased_expiry_index --
-- In a lease batch's transaction: walk the leased-expiry index in its order and stop
-- at the page's end. The planner multiplies the share of leased rows by the share of rows with
-- an expiry, which are the same rows, so it expects a few hundred rows past the key however
-- many expired leases are left, and fetches all of them (a bitmap scan) to sort them for one
-- page. Measured at 200,000 expired leases among 2,000,000 jobs, a page halfway: 53 to 75 ms
-- that way, 3.6 ms walking the index; every page read the rest of the set.
SET LOCAL enable_bitmapscan = off;

-- name: count_expired_leases --
-- How many leases are expired beyond the grace (what a pass whose budget was spent left).
SELECT count(*)
FROM job
WHERE state = 'leased'
  AND lease_expires_at < $1::timestamptz - $2::int * interval '1 second'
  AND ($3::uuid IS NULL OR project_id = $3::uuid);

-- name: dependencies_of_job --
-- Not a query: the dependencies of the job `j`, as `d`: when the last of them succeeded, and
-- whether every one did (NULL: it has none); spliced twice into claimable_heads.
CROSS JOIN LATERAL (
    SELECT max(dj.finished_at) AS last_success,
           bool_and(coalesce(dj.state = 'succeeded', false)) AS all_succeeded
    FROM job_dependency AS jd LEFT JOIN job AS dj ON dj.id = jd.depends_on
    WHERE jd.job_id = j.id
) AS d

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
    {dependencies_of_job}
    WHERE j.project_id = p.project_id AND j.state = 'ready' AND j.run_after <= $1::timestamptz
      AND (cardinality($2::text[]) = 0 OR j.phase::text = ANY ($2::text[]))
      AND d.all_succeeded IS NOT FALSE
    ORDER BY j.run_after, j.id
    LIMIT 1
) AS head
CROSS JOIN LATERAL (
    SELECT j.id, j.kind, greatest(j.run_after, d.last_success) AS claimable_since
    FROM job AS j
    {dependencies_of_job}
    WHERE j.project_id = p.project_id AND j.state = 'ready'
      AND j.run_after >= head.run_after AND j.run_after <= head.claimable_since
      AND j.run_after <= $1::timestamptz
      AND (cardinality($2::text[]) = 0 OR j.phase::text = ANY ($2::text[]))
      AND d.all_succeeded IS NOT FALSE
    ORDER BY greatest(j.run_after, d.last_success), j.run_after, j.id
    LIMIT 1
) AS best
WHERE p.project_id IS NOT NULL
ORDER BY p.project_id;

-- name: lock_streams --
-- Take the transaction's advisory locks on ledger streams, in project_id order (no deadlock
-- between reapers). Other reapers wait here; the host's writers do not take these locks, and
-- a number one of them takes first is left to it: the event goes after it (append_events).
SELECT count(pg_advisory_xact_lock(1818584167, hashtext(s::text)))
FROM (SELECT DISTINCT s FROM unnest($1::uuid[]) AS u (s) ORDER BY s) AS sorted;

-- name: append_events --
-- Append events ($1 stream, $2 canonical payload, $3 digest, $4 trusted, $6 kind:
-- QueueReaped or GateAnswered), in order, each stream continuing after its last event,
-- whoever wrote it. The caller holds the streams' locks; an event whose number a host writer
-- took first is not written: the positions (1-based) of those come back, for the caller to
-- append again, with the streams and numbers of those written.
WITH input AS (
    SELECT *
    FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bool[], $6::text[]) WITH ORDINALITY
         AS i (project_id, payload, digest, trusted, kind, ord)
),
numbered AS (
    SELECT i.*, row_number() OVER (PARTITION BY i.project_id ORDER BY i.ord) AS n
    FROM input AS i
),
last_seqs AS (
    SELECT s.project_id,
           coalesce((SELECT max(e.seq) FROM event AS e WHERE e.project_id = s.project_id), 0)
               AS last_seq
    FROM (SELECT DISTINCT project_id FROM numbered) AS s
),
written AS (
    INSERT INTO event (project_id, seq, kind, payload, digest, trusted, created_at)
    SELECT nb.project_id, ls.last_seq + nb.n, nb.kind, nb.payload::jsonb, nb.digest,
           nb.trusted, $5::timestamptz
    FROM numbered AS nb
    JOIN last_seqs AS ls USING (project_id)
    ON CONFLICT DO NOTHING
    RETURNING project_id, seq
)
SELECT (SELECT array_agg(nb.ord ORDER BY nb.ord)
        FROM numbered AS nb
        JOIN last_seqs AS ls USING (project_id)
        WHERE NOT EXISTS (SELECT 1 FROM written AS w
                          WHERE w.project_id = nb.project_id AND w.seq = ls.last_seq + nb.n))
           AS unwritten,
       (SELECT array_agg(project_id ORDER BY project_id, seq) FROM written) AS streams,
       (SELECT array_agg(seq ORDER BY project_id, seq) FROM written) AS seqs;

-- name: lock_sightings --
-- Take the transaction's advisory locks on sighting keys, in ascending order (no deadlock).
SELECT count(pg_advisory_xact_lock(k))
FROM (SELECT DISTINCT k FROM unnest($1::bigint[]) AS u (k) ORDER BY k) AS sorted;

-- name: latest_sightings --
-- The latest sighting record (surface or cleared) of each given key, where there is one, and
-- when it was written (for a surface record: since when the sighting has been open).
SELECT k.ord, e.project_id, e.payload::text AS payload, e.trusted, e.created_at
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[])
     WITH ORDINALITY AS k (stream, source, condition, scope, ord)
CROSS JOIN LATERAL (
    SELECT e.project_id, e.payload, e.trusted, e.created_at
    FROM event AS e
    WHERE e.kind = 'QueueReaped'
      AND (e.payload ->> 'action') IN ('surface', 'cleared')
      AND e.project_id = k.stream
      AND (e.payload ->> 'source') = k.source
      AND (e.payload ->> 'condition') = k.condition
      AND reaper_sighting_scope_v2(e.project_id, e.payload) = k.scope
    ORDER BY e.seq DESC
    LIMIT 1
) AS e
ORDER BY k.ord;

-- name: open_sightings --
-- Every open sighting of the given sources, from the index of open sightings (its cost is what
-- is open, not the ledger's age); for job_queue, only on one project's stream when $2 is given.
SELECT stream AS project_id, payload::text AS payload, trusted
FROM reaper_open_sighting
WHERE source = ANY ($1::text[])
  AND ($2::uuid IS NULL OR source <> 'job_queue' OR stream = $2::uuid);

-- name: open_sightings_opened --
-- Sightings opened by records just appended (in the same transaction, under their locks):
-- each one's key, and the record that opened it.
INSERT INTO reaper_open_sighting AS o (stream, source, condition, scope, payload, trusted)
SELECT *
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::jsonb[], $6::bool[])
ON CONFLICT (stream, source, condition, scope)
DO UPDATE SET payload = excluded.payload, trusted = excluded.trusted;

-- name: open_sightings_closed --
-- Sightings closed by `cleared` records just appended: out of the index (the ledger keeps both
-- records; the index holds only what is open).
DELETE FROM reaper_open_sighting AS o
USING unnest($1::uuid[], $2::text[], $3::text[], $4::text[]) AS c (stream, source, condition, scope)
WHERE (o.stream, o.source, o.condition, o.scope) = (c.stream, c.source, c.condition, c.scope);

-- name: ledger_events --
-- One stream's events in sequence order.
SELECT project_id, seq, kind, payload::text AS payload, digest, trusted, created_at
FROM event
WHERE project_id = $1::uuid
ORDER BY seq;

-- name: event_filter --
-- Not a query: the events an event filter selects, since $1, of project $2, kind $3,
-- condition $4, object $5, action $6, source $7 (each NULL: any); spliced into read_events
-- and count_events.
WHERE ($1::timestamptz IS NULL OR created_at >= $1::timestamptz)
  AND ($2::uuid IS NULL OR project_id = $2::uuid)
  AND ($3::text IS NULL OR kind = $3::text)
  AND ($4::text IS NULL OR (payload ->> 'condition') = $4::text)
  AND ($5::text IS NULL OR (payload ->> 'object') = $5::text)
  AND ($6::text IS NULL OR (payload ->> 'action') = $6::text)
  AND ($7::text IS NULL OR (payload ->> 'source') = $7::text)

-- name: read_events --
-- The newest $8 events the filter $1..$7 selects (event_filter), oldest first; each narrowing
-- read from its index (0012).
SELECT project_id, seq, kind, payload, digest, trusted, created_at
FROM (
    SELECT project_id, seq, kind, payload::text AS payload, digest, trusted, created_at
    FROM event
    {event_filter}
    ORDER BY created_at DESC, project_id DESC, seq DESC
    LIMIT $8::int
) AS newest
ORDER BY created_at, project_id, seq;

-- name: gate_rows --
-- Not a query: every gate `g` as a listing reads it, with its job's kind and its later gate
-- (nullif: none, when it is the job's latest); spliced into list_gates and gates_between,
-- each of which narrows and orders it for its own index.
SELECT g.id, g.project_id, g.job_id, g.kind, g.prompt, g.choices::text AS choices, g.answer,
       g.answered_at, g.answered_by, g.identity, g.created_at,
       nullif(l.id, g.id) AS superseded_by, j.kind AS job_kind
FROM human_gate AS g
LEFT JOIN job AS j ON j.id = g.job_id
LEFT JOIN LATERAL (
    SELECT h.id FROM human_gate AS h
    WHERE h.job_id = g.job_id
    ORDER BY h.created_at DESC, h.id DESC
    LIMIT 1
) AS l ON true

-- name: list_gates --
-- Gates, oldest first; only open ones when $1, only one kind when $2, one project when $3,
-- raised before $4 and at or after $5 when given, at most $6 (NULL: all); each a gate row
-- (gate_rows): with its job's kind and its later gate, if the job was parked again.
{gate_rows}
WHERE (NOT $1::bool OR g.answered_at IS NULL)
  AND ($2::text IS NULL OR g.kind = $2::text)
  AND ($3::uuid IS NULL OR g.project_id = $3::uuid)
  AND ($4::timestamptz IS NULL OR g.created_at < $4::timestamptz)
  AND ($5::timestamptz IS NULL OR g.created_at >= $5::timestamptz)
ORDER BY g.created_at, g.id
LIMIT $6::int;

-- name: gates_between --
-- The gates whose ids lie between $1 and $2 (a prefix of an id, as its lowest and highest
-- id: a probe of the primary key), at most $3, each a gate row (gate_rows).
{gate_rows}
WHERE g.id BETWEEN $1::uuid AND $2::uuid
ORDER BY g.id
LIMIT $3::int;

-- name: open_gate_counts --
-- Per kind, how many gates are open and when the oldest was raised (the open-gate index).
SELECT kind, count(*) AS open, min(created_at) AS oldest
FROM human_gate
WHERE answered_at IS NULL
GROUP BY kind
ORDER BY kind;

-- name: dead_letters_of_jobs --
-- What the parked dead-letter jobs $1 keep of their letters, and each job's state.
SELECT d.identity, d.job_id, d.queue, d.message_id, d.origin_queue, d.reason, d.body,
       d.body_encoding, d.body_bytes, d.body_truncated, d.is_json_object, d.parked_at,
       j.state AS job_state
FROM dead_letter AS d
JOIN job AS j ON j.id = d.job_id
WHERE d.job_id = ANY ($1::uuid[]) AND d.disposition = 'parked';

-- name: open_dead_letter_gates --
-- Per dead-letter queue, how many open gates wait on a letter read from it (a parked dead
-- letter, or a dispatch pointer's job): from the open gates, so the cost is what is open.
SELECT d.queue, count(*) AS waiting
FROM human_gate AS g
JOIN dead_letter AS d ON d.job_id = g.job_id
WHERE g.answered_at IS NULL
GROUP BY d.queue
ORDER BY d.queue;

-- ------------------------------------------------------------------------- dead letters --
-- SPEC §1 (e): a dead letter read from an owned dead-letter queue becomes a parked
-- `bus.dead_letter` job (fleet project, idempotency_key `dead_letter:<identity>`), its
-- `dead_letter` row (migration 0004: what the letter was) and a `bus_dead_lettered` gate
-- (identity `dead_letter:<identity>`); the caller appends its event in the same transaction.

-- name: park_dead_letter --
-- Park one dead letter, once: the job's idempotency key decides (a concurrent park of the same
-- identity waits for the first and then inserts nothing). Returns one row: the job inserted
-- (NULL: already parked) and what the letter's row and gate inserts returned (both must be
-- there when the job is; the caller rolls back otherwise). $2 is `dead_letter:<identity>`,
-- $18 the letter's envelope (NULL: none).
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
                             parked_at, envelope)
    SELECT $3::text, j.id, $4::text, $5::text, $6::text, $7::text, $8::text, $9::text,
           $10::bigint, $11::bool, $12::bool, $1::timestamptz, $18::text
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
-- Which of these dead letters ($1: their gate identities, `dead_letter:<identity>`; $2: the
-- identities) are already handled: a gate raised, answered or not, or a dead_letter row
-- (a stale dispatch pointer has no gate). Across every project: an identity is global.
SELECT identity
FROM human_gate
WHERE identity = ANY ($1::text[]) AND identity IS NOT NULL
UNION
SELECT 'dead_letter:' || identity
FROM dead_letter
WHERE identity = ANY ($2::text[]);

-- name: parked_envelopes --
-- How many handled dead letters carry each of these envelopes ($1), across every queue (like an
-- identity, an envelope is global); an envelope none carries is absent.
SELECT envelope, count(*) AS parked
FROM dead_letter
WHERE envelope = ANY ($1::text[]) AND envelope IS NOT NULL
GROUP BY envelope;

-- name: keep_envelopes --
-- Note the envelope each handled letter ($1: identities) was last read whole with ($2), where
-- its row holds another or none (a row parked before 0007). Only the reaper's own table.
UPDATE dead_letter AS d
SET envelope = u.envelope
FROM unnest($1::text[], $2::text[]) AS u (identity, envelope)
WHERE d.identity = u.identity AND d.envelope IS DISTINCT FROM u.envelope;

-- name: count_parked_dead_letters --
-- How many dead letters read from this dead-letter queue are handled (parked, or recorded as a
-- stale pointer): the broker keeps its copy either way, so a read has to reach past them.
SELECT count(*)
FROM dead_letter
WHERE queue = $1::text;

-- ----------------------------------------------------------------- outbox dispatch --
-- SPEC §3, ADR-0044 §4: where the host dispatches through RabbitMQ, every transition that
-- starts a new dispatch episode bumps job.dispatch_seq and writes one job_outbox row (key
-- `dispatch:<job_id>:<dispatch_seq>`) in the same transaction; the host's relay publishes it.

-- name: dispatch_schema --
-- Whether the host's schema dispatches through an outbox: job.dispatch_seq and job_outbox.
SELECT EXISTS (SELECT 1 FROM pg_attribute
               WHERE attrelid = to_regclass('job') AND attname = 'dispatch_seq'
                 AND NOT attisdropped)
       AND to_regclass('job_outbox') IS NOT NULL;

-- name: dispatch_jobs --
-- Start a new dispatch episode for jobs just made ready ($2), in the caller's transaction:
-- dispatch_seq + 1 and one outbox row each (dispatch_outbox). Returns the jobs dispatched.
WITH dispatched AS (
    UPDATE job
    SET dispatch_seq = dispatch_seq + 1
    WHERE id = ANY ($2::uuid[])
    RETURNING id, project_id, kind, dispatch_seq, run_after
)
{dispatch_outbox}
RETURNING job_id;

-- name: dispatch_outbox --
-- Not a query: one outbox row per job of `dispatched` (id, project_id, kind, dispatch_seq,
-- run_after), carrying the dispatch body (vibey.job.dispatch/1, due at the job's run_after),
-- idempotent by its key ($1 now); spliced into dispatch_jobs and reap_lease_batch.
INSERT INTO job_outbox (key, job_id, project_id, payload, not_before, created_at)
SELECT 'dispatch:' || b.id || ':' || b.dispatch_seq, b.id, b.project_id,
       jsonb_build_object('schema', 'vibey.job.dispatch/1', 'job_id', b.id,
                          'project_id', b.project_id, 'dispatch_seq', b.dispatch_seq,
                          'kind', b.kind, 'not_before', b.run_after),
       b.run_after, $1::timestamptz
FROM dispatched AS b
ON CONFLICT (key) DO NOTHING

-- name: unsent_dispatches --
-- Per project, the oldest outbox row of a ready job's current episode that was never sent
-- (the relay is down, or behind); optionally one project.
SELECT DISTINCT ON (j.project_id) j.project_id, j.id, j.kind, j.dispatch_seq, o.created_at
FROM job_outbox AS o
JOIN job AS j ON j.id = o.job_id
WHERE o.sent_at IS NULL
  AND o.key = 'dispatch:' || j.id || ':' || j.dispatch_seq
  AND j.state = 'ready'
  AND ($1::uuid IS NULL OR j.project_id = $1::uuid)
ORDER BY j.project_id, o.created_at, j.id;

-- name: park_dispatch_pointer --
-- A dead-lettered dispatch pointer (ADR-0044 §8), once: when the job it points to ($12, in
-- project $13) is still at the pointer's generation ($14) and still ready or holding a lease
-- expired past the grace ($18 seconds, as the lease reap judges it), park it (awaiting_human,
-- lease cleared) behind a delivery_exhausted gate ($15 identity `dead_letter:<identity>`, $16
-- prompt, $17 choices); otherwise the pointer is stale and nothing moves. Either way the letter's dead_letter row records it, once, by its
-- identity ($2), with its envelope ($19: NULL, none). Returns one row: whether the letter was recorded now, the job parked (NULL:
-- none), and the job's state and generation as found (NULL: no such job).
WITH job_row AS (
    SELECT j.id, j.state::text AS state, j.dispatch_seq, j.lease_expires_at
    FROM job AS j
    WHERE j.id = $12::uuid AND j.project_id = $13::uuid
    FOR NO KEY UPDATE
),
fresh AS (
    SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM dead_letter WHERE identity = $2::text)
),
current AS (
    SELECT r.id
    FROM job_row AS r, fresh
    WHERE r.dispatch_seq = $14::bigint
      AND (r.state = 'ready'
           OR (r.state = 'leased'
               AND r.lease_expires_at < $1::timestamptz - make_interval(secs => $18::int)))
),
parked AS (
    UPDATE job AS j
    SET state = 'awaiting_human', lease_owner = NULL, lease_expires_at = NULL,
        updated_at = $1::timestamptz
    FROM current AS c
    WHERE j.id = c.id
    RETURNING j.id
),
letter AS (
    INSERT INTO dead_letter (identity, job_id, queue, message_id, origin_queue, reason, body,
                             body_encoding, body_bytes, body_truncated, is_json_object,
                             parked_at, disposition, envelope)
    SELECT $2::text, (SELECT id FROM job_row), $3::text, $4::text, $5::text, $6::text,
           $7::text, $8::text, $9::bigint, $10::bool, $11::bool, $1::timestamptz,
           CASE WHEN EXISTS (SELECT 1 FROM parked) THEN 'pointer_parked' ELSE 'stale_pointer'
           END,
           $19::text
    FROM fresh
    ON CONFLICT (identity) DO NOTHING
    RETURNING identity
),
gate AS (
    INSERT INTO human_gate (project_id, job_id, kind, prompt, choices, identity, created_at)
    SELECT $13::uuid, p.id, 'delivery_exhausted', $16::text, $17::jsonb, $15::text,
           $1::timestamptz
    FROM parked AS p
    ON CONFLICT (identity) WHERE identity IS NOT NULL DO NOTHING
    RETURNING id
)
SELECT (SELECT identity FROM letter) IS NOT NULL AS recorded,
       (SELECT id FROM parked) AS parked,
       (SELECT id FROM gate) AS gate_id,
       (SELECT state FROM job_row) AS state,
       (SELECT dispatch_seq FROM job_row) AS dispatch_seq;

-- name: observations --
-- What was watched across passes on one vhost ($1).
SELECT watch, key, since, counter, level FROM reaper_observation WHERE scope = $1::text;

-- name: keep_observations --
-- This pass's observations of one vhost ($1) replace the last: those no longer watched go, the
-- rest are written. Where another reaper wrote the same one meanwhile, the later `since` is
-- kept: a measurement may start again, never start earlier than what either saw.
WITH kept AS (
    SELECT *
    FROM unnest($2::text[], $3::text[], $4::timestamptz[], $5::bigint[], $6::bigint[])
         AS k (watch, key, since, counter, level)
), gone AS (
    DELETE FROM reaper_observation AS o
    WHERE o.scope = $1::text
      AND NOT EXISTS (SELECT 1 FROM kept AS k WHERE k.watch = o.watch AND k.key = o.key)
)
INSERT INTO reaper_observation AS o (scope, watch, key, since, counter, level)
SELECT $1::text, watch, key, since, counter, level FROM kept
ON CONFLICT (scope, watch, key) DO UPDATE
SET since = greatest(o.since, excluded.since), counter = excluded.counter,
    level = excluded.level;

-- name: doctor_session --
-- What `reaper doctor` asks of its own session: who it is, the server's version, the
-- database's clock, TLS as negotiated, and whether migrations are recorded here.
SELECT current_user AS role,
       current_setting('server_version') AS version,
       clock_timestamp() AS now,
       coalesce(s.ssl, false) AS ssl,
       s.version AS tls_version,
       to_regclass('reaper_migration') IS NOT NULL AS recorded
FROM (SELECT 1) AS one
LEFT JOIN pg_stat_ssl AS s ON s.pid = pg_backend_pid();

-- name: quiet_mark --
-- The quiet mark of one owned dead-letter queue ($2) of one vhost ($1), if a pass left one.
SELECT queue, proven_at, proven, letters, message_bytes, published, fetched, acknowledged
FROM reaper_quiet_mark
WHERE scope = $1::text AND queue = $2::text;

-- name: keep_quiet_mark --
-- The quiet mark a pass that read the queue leaves for the next: it replaces the last.
INSERT INTO reaper_quiet_mark AS m
    (scope, queue, proven_at, proven, letters, message_bytes, published, fetched, acknowledged)
VALUES ($1::text, $2::text, $3::timestamptz, $4::boolean, $5::bigint, $6::bigint, $7::bigint,
        $8::bigint, $9::bigint)
ON CONFLICT (scope, queue) DO UPDATE
SET proven_at = excluded.proven_at, proven = excluded.proven, letters = excluded.letters,
    message_bytes = excluded.message_bytes, published = excluded.published,
    fetched = excluded.fetched, acknowledged = excluded.acknowledged;

-- What only a person's answer to a gate, or a person's read, runs (SPEC §1). An answer's
-- queries run inside its transaction, the gate row locked by gate_for_answer.

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

-- name: ready_parked_job --
-- Re-ready a parked job for one more delivery, only if it is still awaiting a human.
UPDATE job
SET state = 'ready', run_after = $1::timestamptz, updated_at = $1::timestamptz
WHERE id = $2::uuid AND state = 'awaiting_human'
RETURNING id;

-- name: settle_parked_job --
-- Settle a parked job ($3), only if it is still awaiting a human: a poison job given up
-- (`cancelled`: never delivered again, no dispatch episode, no outbox row), a parked
-- `bus.dead_letter` job `succeeded` once replayed or `cancelled` once dismissed. $3 takes the
-- state column's own type (text, or the host's enum).
UPDATE job
SET state = $3, finished_at = $1::timestamptz, updated_at = $1::timestamptz
WHERE id = $2::uuid AND state = 'awaiting_human'
RETURNING id;

-- name: count_events --
-- How many events the filter $1..$7 selects in all (event_filter), so a listing cut at its
-- limit says how many it did not show.
SELECT count(*)
FROM event
{event_filter};

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

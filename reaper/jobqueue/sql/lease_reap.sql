-- The lease reap, done by PostgreSQL a batch at a time (SPEC §1 (a), (c), (d); §3; §8). Loaded
-- with queries.sql. A batch is one transaction of one statement, reap_lease_batch: it locks the
-- lane's next expired leases by the leased-expiry index's key and their streams, rules on each
-- of them as it stands under the lock, moves it, raises a park's gate, writes a requeue's outbox
-- row (outbox dispatch only) and appends each move's QueueReaped event. Python sends bounds and
-- thresholds, never a lease. Common parameters: $1 now, $2 grace seconds, and the key the batch
-- starts after ($3 expiry, $4 job id).
--
-- lease_ruling and the lease_outbox_ parts are not queries but pieces spliced into the
-- statements (a `{piece}` by the loader, reaper/jobqueue/sql/__init__.py; the outbox parts by
-- reaper/jobqueue/lease_reap.py for outbox dispatch alone). lease_ruling is the ruling every statement here
-- shares, over a `candidates` relation of job columns and `past_ms` (how far past its expiry,
-- in milliseconds, rounded up): reaper/core/judge_leases.py's judge_lease_page and
-- core/canonical.py's canonical JSON in SQL, held to the same bytes by
-- tests/integration/test_lease_reap_sql.py.

-- name: lease_ruling --
-- Each candidate past the grace: poison (attempts spent: park) or not (requeue), its event's
-- canonical payload and digest, and a park's gate identity and prompt (NULL for a requeue).
SELECT c.*, p.poison, p.payload, encode(sha256(convert_to(p.payload, 'UTF8')), 'hex') AS digest,
       'delivery_exhausted:' || c.id || ':' || h.expired AS identity,
       CASE WHEN p.poison THEN format('Job %s (%s) has been delivered %s times, its limit of %s, and its last lease, '
              'held by %s, expired at %s without the job finishing. It is parked and will not '
              'be delivered again on its own. Answer ''retry'' to deliver it exactly once '
              'more (one attempt was refunded when it was parked), or ''cancel'' to give it '
              'up (it ends cancelled and is never delivered again); leave this gate open to '
              'keep it parked.', c.id, left(c.kind, 200), c.attempts, c.max_attempts,
              coalesce(to_json(left(c.lease_owner, 200))::text, 'an unknown holder'),
              to_char(c.lease_expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
       END AS prompt
FROM candidates AS c
CROSS JOIN LATERAL (
    SELECT trim_scale(c.past_ms / 1000.0)::text AS past,
           coalesce(to_json(left(c.lease_owner, 200))::text
                    || CASE WHEN length(c.lease_owner) > 200 THEN '…' ELSE '' END,
                    'no recorded owner') AS held,
           CASE WHEN c.attempts >= c.max_attempts THEN  -- a park's alone: its gate's words
           to_char(c.lease_expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
           || CASE WHEN to_char(c.lease_expires_at AT TIME ZONE 'UTC', 'US') = '000000' THEN ''
                   ELSE to_char(c.lease_expires_at AT TIME ZONE 'UTC', '.US') END
           || '+00:00' END AS expired
) AS h
CROSS JOIN LATERAL (
    SELECT c.attempts >= c.max_attempts AS poison
) AS r
CROSS JOIN LATERAL (
    SELECT r.poison, CASE WHEN r.poison THEN format(
        '{"action":"park","condition":"poison","detail":%s,"measured":%s,"object":"%s",'
        '"queue":null,"source":"job_queue","threshold":%s,"unit":"attempts"}',
        to_json(format('lease of %s job held by %s expired %ss ago with %s of %s attempts '
                       'spent: park for a person (delivery_exhausted gate)',
                       c.kind, h.held, h.past, c.attempts, c.max_attempts)),
        c.attempts, c.id, c.max_attempts)
    ELSE format(
        '{"action":"requeue","condition":"lease_expired","detail":%s,"measured":%s,'
        '"object":"%s","queue":null,"source":"job_queue","threshold":%s,"unit":"seconds"}',
        to_json(format('lease of %s job held by %s expired %ss ago, past the grace of %ss: '
                       'requeue (attempt %s of %s spent)',
                       c.kind, h.held, h.past, $2::int, c.attempts, c.max_attempts)),
        h.past || CASE WHEN c.past_ms % 1000 = 0 THEN '.0' ELSE '' END, c.id, $2::int)
    END AS payload
    OFFSET 0  -- built once: pulled up, the payload would be built again inside its digest
) AS p
WHERE c.past_ms > $2::int * 1000

-- name: lease_lane --
-- Not a query: the lane's next expired leases after the key, oldest first ($1 now, $2 grace,
-- $3 and $4 the key, $5 a project or NULL, $6 the lane of $7 (projects split by a hash of their
-- id), $8 how many), spliced into reap_lease_batch (which locks them) and lease_rulings (which
-- only reads them), so that the dry run asks exactly what the reap takes.
FROM job AS j
WHERE j.state = 'leased'
  AND j.lease_expires_at < $1::timestamptz - $2::int * interval '1 second'
  AND (j.lease_expires_at, j.id) > ($3::timestamptz, $4::uuid)
  AND ($5::uuid IS NULL OR j.project_id = $5::uuid)
  AND ($7::int = 1 OR (hashtext(j.project_id::text) & 2147483647) % $7::int = $6::int)
ORDER BY j.lease_expires_at, j.id
LIMIT $8::int;

-- name: reap_lease_batch --
-- A batch, one statement: the lane's next expired leases after the key ($5 to $8 as
-- lease_lane's), locked (a row another transaction holds is skipped), then their streams'
-- locks (lock_streams' lock, taken in stream order); each lease ruled by lease_ruling as it
-- stands under its lock and moved. Requeue: ready, lease cleared, run_after = now. Park:
-- awaiting_human, lease cleared, one attempt refunded, and one delivery_exhausted gate per
-- episode (by its identity; $9 its choices). Each move's event goes on its project's stream
-- after the last there as the statement began; an event whose number another writer took first
-- (a host writer, or a reaper that held the stream's lock when this statement began) is
-- returned (its stream, payload and digest, NULL when none: the usual case) for the caller to
-- append in the same transaction, under the stream's lock, after every other writer's. The
-- outbox variant (see lease_reap.py) also starts each requeue's dispatch episode. Returns how
-- many leases were locked and the key of the last (where the next batch starts), the moves per
-- project and condition with their oldest and newest expiry, and the runs of consecutive
-- numbers its events took on each stream (the first and last of each run: a few numbers a
-- batch, by which the pass's report reads its moves back from the ledger). No value per lease.
WITH candidates AS (
    SELECT j.ctid AS row_ctid, j.id, j.project_id, j.kind, j.lease_owner, j.lease_expires_at,
           j.attempts, j.max_attempts,
           ceil((extract(epoch FROM $1::timestamptz) - extract(epoch FROM j.lease_expires_at))
                * 1000) AS past_ms
    {lease_lane}
    FOR NO KEY UPDATE OF j SKIP LOCKED
),
streams AS (  -- in stream order, as every writer that takes them does
    SELECT s.project_id, pg_advisory_xact_lock(1818584167, hashtext(s.project_id::text))
    FROM (SELECT DISTINCT project_id FROM candidates ORDER BY project_id) AS s
),
ruled AS ({lease_ruling}),
requeued AS (
    UPDATE job AS j
    SET state = 'ready', run_after = $1::timestamptz, lease_owner = NULL,
        lease_expires_at = NULL, updated_at = $1::timestamptz/*outbox:bump*/
    FROM ruled AS r
    WHERE j.ctid = r.row_ctid AND NOT r.poison
    RETURNING j.id, r.project_id, r.payload, r.digest, r.lease_expires_at, r.poison
              /*outbox:returning*/
),
parked AS (
    UPDATE job AS j
    SET state = 'awaiting_human', attempts = greatest(j.attempts - 1, 0), lease_owner = NULL,
        lease_expires_at = NULL, updated_at = $1::timestamptz
    FROM ruled AS r
    WHERE j.ctid = r.row_ctid AND r.poison
    RETURNING j.id, r.project_id, r.payload, r.digest, r.lease_expires_at, r.poison,
              r.identity, r.prompt
),
gates AS (
    INSERT INTO human_gate (project_id, job_id, kind, prompt, choices, identity, created_at)
    SELECT m.project_id, m.id, 'delivery_exhausted', m.prompt, $9::jsonb, m.identity,
           $1::timestamptz
    FROM parked AS m
    ON CONFLICT (identity) WHERE identity IS NOT NULL DO NOTHING
),/*outbox:rows*/
moved AS (  -- what each move returned: no join back to the rulings
    SELECT u.*, row_number() OVER (PARTITION BY u.project_id
                                   ORDER BY u.lease_expires_at, u.id) AS n
    FROM (SELECT id, project_id, payload, digest, lease_expires_at, poison FROM requeued
          UNION ALL
          SELECT id, project_id, payload, digest, lease_expires_at, poison FROM parked) AS u
),
last_seqs AS (
    SELECT s.project_id,
           coalesce((SELECT max(e.seq) FROM event AS e WHERE e.project_id = s.project_id), 0)
               AS last_seq
    FROM streams AS s
    WHERE s.project_id IN (SELECT project_id FROM moved)
),
events AS (
    INSERT INTO event (project_id, seq, kind, payload, digest, trusted, created_at)
    SELECT m.project_id, ls.last_seq + m.n, 'QueueReaped', m.payload::jsonb, m.digest, true,
           $1::timestamptz
    FROM moved AS m
    JOIN last_seqs AS ls USING (project_id)
    WHERE (SELECT count(*) FROM streams) > 0  -- every stream locked before the first event
    ON CONFLICT DO NOTHING
    RETURNING project_id, seq
),
tally AS (
    SELECT project_id, poison, count(*) AS n, min(lease_expires_at) AS oldest,
           max(lease_expires_at) AS newest
    FROM moved
    GROUP BY project_id, poison
),
runs AS (  -- the events written, as runs of consecutive numbers on each stream
    SELECT project_id, min(seq) AS first_seq, max(seq) AS last_seq
    FROM (SELECT project_id, seq,
                 seq - row_number() OVER (PARTITION BY project_id ORDER BY seq) AS run
          FROM events) AS e
    GROUP BY project_id, run
),
unwritten AS (
    SELECT m.project_id, m.payload, m.digest, m.lease_expires_at, m.id
    FROM moved AS m
    JOIN last_seqs AS ls USING (project_id)
    WHERE (SELECT count(*) FROM events) < (SELECT count(*) FROM moved)
      AND NOT EXISTS (SELECT 1 FROM events AS e
                      WHERE e.project_id = m.project_id AND e.seq = ls.last_seq + m.n)
)
SELECT (SELECT count(*) FROM candidates) AS picked,
       last.lease_expires_at AS last_expiry, last.id AS last_id,
       (SELECT array_agg(project_id ORDER BY project_id, poison) FROM tally) AS projects,
       (SELECT array_agg(poison ORDER BY project_id, poison) FROM tally) AS parks,
       (SELECT array_agg(n ORDER BY project_id, poison) FROM tally) AS moves,
       (SELECT array_agg(oldest ORDER BY project_id, poison) FROM tally) AS oldest,
       (SELECT array_agg(newest ORDER BY project_id, poison) FROM tally) AS newest,
       (SELECT array_agg(project_id ORDER BY project_id, first_seq) FROM runs) AS run_streams,
       (SELECT array_agg(first_seq ORDER BY project_id, first_seq) FROM runs) AS run_firsts,
       (SELECT array_agg(last_seq ORDER BY project_id, first_seq) FROM runs) AS run_lasts,
       (SELECT array_agg(project_id ORDER BY lease_expires_at, id) FROM unwritten) AS streams,
       (SELECT array_agg(payload ORDER BY lease_expires_at, id) FROM unwritten) AS payloads,
       (SELECT array_agg(digest ORDER BY lease_expires_at, id) FROM unwritten) AS digests
FROM (SELECT 1) AS one
LEFT JOIN (SELECT lease_expires_at, id FROM candidates ORDER BY lease_expires_at DESC, id DESC
           LIMIT 1) AS last ON true;

-- name: any_expired_lease --
-- Whether reap_lease_batch would find any lease to take at all ($1 to $8 as lease_lane's, for
-- every lane from the first key): a quiet pass asks this on one connection and opens no lane.
SELECT EXISTS (SELECT 1 {lease_lane}) AS any_expired;

-- name: lease_rulings --
-- The dry run's question, read-only: the rulings reap_lease_batch would give the expired leases
-- after the key ($5 to $8 as lease_lane's), one row each, none of them locked or moved.
WITH candidates AS (
    SELECT j.id, j.project_id, j.kind, j.lease_owner, j.lease_expires_at, j.attempts,
           j.max_attempts,
           ceil((extract(epoch FROM $1::timestamptz) - extract(epoch FROM j.lease_expires_at))
                * 1000) AS past_ms
    {lease_lane}
)
SELECT id, project_id, lease_expires_at, poison, payload, digest, identity, prompt
FROM ({lease_ruling}) AS ruled
ORDER BY lease_expires_at, id;

-- name: lease_rulings_page --
-- A dry run's batch: lease_rulings' rows summed up as reap_lease_batch sums up its moves, with
-- the key of the last (NULL: none was left).
WITH ruled AS ({lease_rulings}),
tally AS (
    SELECT project_id, poison, count(*) AS n, min(lease_expires_at) AS oldest,
           max(lease_expires_at) AS newest
    FROM ruled
    GROUP BY project_id, poison
)
SELECT (SELECT array_agg(project_id ORDER BY project_id, poison) FROM tally) AS projects,
       (SELECT array_agg(poison ORDER BY project_id, poison) FROM tally) AS parks,
       (SELECT array_agg(n ORDER BY project_id, poison) FROM tally) AS moves,
       (SELECT array_agg(oldest ORDER BY project_id, poison) FROM tally) AS oldest,
       (SELECT array_agg(newest ORDER BY project_id, poison) FROM tally) AS newest,
       last.lease_expires_at AS last_expiry, last.id AS last_id
FROM (SELECT 1) AS one
LEFT JOIN (SELECT lease_expires_at, id FROM ruled ORDER BY lease_expires_at DESC, id DESC
           LIMIT 1) AS last ON true;

-- name: lease_outbox_bump --
-- Outbox dispatch: a requeue starts a new dispatch episode (SPEC §3, ADR-0044 §4).
, dispatch_seq = j.dispatch_seq + 1

-- name: lease_outbox_returning --
-- What a requeue's outbox row is made of (its project is returned already).
, j.kind, j.dispatch_seq, j.run_after

-- name: lease_outbox_rows --
-- One outbox row per requeue, as dispatch_jobs writes it (dispatch_outbox, queries.sql).
dispatched AS (SELECT id, project_id, kind, dispatch_seq, run_after FROM requeued),
outbox AS ({dispatch_outbox}),

-- name: reaped_events --
-- One run of a lease reap's moves read back from the ledger, for the pass's report: the
-- QueueReaped events of stream $1 numbered $2 to $3, in sequence order. Asked run by run, each
-- is one scan of the primary key in its order: rows stream as they are read, none sorted.
SELECT e.payload::text AS payload, e.trusted
FROM event AS e
WHERE e.project_id = $1::uuid AND e.seq BETWEEN $2::bigint AND $3::bigint
  AND e.kind = 'QueueReaped'
ORDER BY e.seq;

-- The queries of `reaper db migrate` (reaper/schema/migrations.py): taking turns, the
-- session's bounds, the catalog checks that say which declared step is needed, the records,
-- and who holds a lock the migration waits for. The migrations' own statements are in
-- migrations/NNNN_*.sql. Catalog reads take no lock on any table of the host's.

-- name: try_lock_migrations --
-- Take the migrators' advisory lock if it is free (a migrator that waits polls this, so that
-- it holds no snapshot a concurrent index build of the one migrating would wait for).
SELECT pg_try_advisory_lock($1::int, $2::int) AS locked;

-- name: unlock_migrations --
-- Release the migrators' advisory lock.
SELECT pg_advisory_unlock($1::int, $2::int);

-- name: begin_migrating --
-- Bound every lock wait of this session by $1 (e.g. '2000ms'), lift the statement timeout (a
-- concurrent index build on a big table takes as long as it takes, blocking no one), name the
-- session for whoever reads pg_stat_activity, and return its pid.
SELECT set_config('lock_timeout', $1, false),
       set_config('statement_timeout', '0', false),
       set_config('application_name', 'queue-reaper db migrate', false),
       pg_backend_pid() AS pid;

-- name: end_migrating --
-- Give the pooled session back as it was.
RESET lock_timeout;
RESET statement_timeout;
RESET application_name;

-- name: set_local_lock_timeout --
-- Bound every lock wait of one migration's transaction (the milliseconds are filled in).
SET LOCAL lock_timeout = '{milliseconds}ms';

-- name: script_session --
-- A dry run's script first bounds its session as begin_migrating does (the milliseconds are
-- filled in).
SET lock_timeout = '{milliseconds}ms';
SET statement_timeout = 0;

-- name: script_begin --
-- A dry run's script opens one migration's transaction (set_local_lock_timeout follows).
BEGIN;

-- name: script_commit --
-- A dry run's script commits one migration's transaction.
COMMIT;

-- name: create_migration_table --
-- The table recording which migrations have been applied.
CREATE TABLE IF NOT EXISTS reaper_migration (
    name       text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: recorded_migrations --
-- The names of the migrations recorded as applied.
SELECT name FROM reaper_migration ORDER BY name;

-- name: record_migration --
-- Record a migration once every step of it is in place.
INSERT INTO reaper_migration (name) VALUES ($1) ON CONFLICT (name) DO NOTHING;

-- name: catalog_tables --
-- Which of the tables named in $1 exist (as the unqualified names resolve on this session).
SELECT t.name
FROM unnest($1::text[]) AS t (name)
JOIN pg_class c ON c.oid = to_regclass(t.name)
WHERE c.relkind IN ('r', 'p');

-- name: catalog_columns --
-- The columns of the tables named in $1, and whether each is NOT NULL.
SELECT t.name AS table_name, a.attname AS column_name, a.attnotnull AS not_null
FROM unnest($1::text[]) AS t (name)
JOIN pg_attribute a ON a.attrelid = to_regclass(t.name)
WHERE a.attnum > 0 AND NOT a.attisdropped;

-- name: catalog_constraints --
-- The named constraints of the tables named in $1.
SELECT t.name AS table_name, c.conname AS constraint_name
FROM unnest($1::text[]) AS t (name)
JOIN pg_constraint c ON c.conrelid = to_regclass(t.name);

-- name: catalog_indexes --
-- The indexes on the tables named in $1: valid or left invalid by an interrupted concurrent
-- build, unique or not, and, for an index on plain columns with no predicate, its key columns.
SELECT t.name AS table_name,
       ic.relname AS index_name,
       i.indisvalid AS valid,
       i.indisunique AS is_unique,
       (i.indpred IS NULL AND i.indexprs IS NULL) AS plain,
       ARRAY(
           SELECT a.attname
           FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k (attnum, n)
           JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
           WHERE k.n <= i.indnkeyatts
           ORDER BY k.n
       )::text[] AS key_columns
FROM unnest($1::text[]) AS t (name)
JOIN pg_index i ON i.indrelid = to_regclass(t.name)
JOIN pg_class ic ON ic.oid = i.indexrelid;

-- name: catalog_functions --
-- The body of each function named by its signature in $1 ('f(uuid, jsonb)'), where it exists.
SELECT s.signature, p.prosrc AS body
FROM unnest($1::text[]) AS s (signature)
JOIN pg_proc p ON p.oid = to_regprocedure(s.signature);

-- name: catalog_triggers --
-- The triggers on the tables named in $1: the function each calls and when it fires.
SELECT t.name AS table_name,
       g.tgname AS trigger_name,
       g.tgfoid::regprocedure::text AS function,
       g.tgtype::int AS fires
FROM unnest($1::text[]) AS t (name)
JOIN pg_trigger g ON g.tgrelid = to_regclass(t.name)
WHERE NOT g.tgisinternal;

-- name: index_validity --
-- Whether the index named $1 exists, and whether it is valid (NULL: it does not exist).
SELECT i.indisvalid AS valid FROM pg_index i WHERE i.indexrelid = to_regclass($1);

-- name: drop_invalid_index --
-- Drop an index an interrupted concurrent build left invalid, without blocking writes (the
-- name filled in is a declared index name).
DROP INDEX CONCURRENTLY IF EXISTS {index};

-- name: fleet_stream_exists --
-- Whether the fleet stream ($1) has its ledger_stream row.
SELECT EXISTS (SELECT 1 FROM ledger_stream WHERE project_id = $1) AS present;

-- name: project_tables --
-- The tables the fleet's project id must exist in: each table that a project_id column of the
-- tables named in $1 references by a one-column foreign key, and a table named project with an
-- id column. Each with its key column and the columns an insert of the key alone cannot fill
-- (NOT NULL, no default, not an identity, not generated), all quoted for SQL by PostgreSQL.
WITH referenced AS (
    SELECT c.confrelid AS relid, c.confkey[1] AS attnum
    FROM unnest($1::text[]) AS t (name)
    JOIN pg_constraint c
      ON c.conrelid = to_regclass(t.name) AND c.contype = 'f' AND cardinality(c.conkey) = 1
    JOIN pg_attribute fk
      ON fk.attrelid = c.conrelid AND fk.attnum = c.conkey[1] AND fk.attname = 'project_id'
    UNION
    SELECT a.attrelid, a.attnum
    FROM pg_attribute a
    WHERE a.attrelid = to_regclass('project') AND a.attname = 'id' AND NOT a.attisdropped
)
SELECT r.relid::regclass::text AS table_sql,
       quote_ident(k.attname) AS column_sql,
       ARRAY(
           SELECT quote_ident(a.attname)
           FROM pg_attribute a
           WHERE a.attrelid = r.relid AND a.attnum > 0 AND NOT a.attisdropped
             AND a.attnotnull AND NOT a.atthasdef AND a.attidentity = ''
             AND a.attgenerated = '' AND a.attnum <> r.attnum
           ORDER BY a.attnum
       )::text[] AS required_columns
FROM referenced AS r
JOIN pg_attribute k ON k.attrelid = r.relid AND k.attnum = r.attnum
ORDER BY table_sql;

-- name: fleet_project_exists --
-- Whether a project table holds the fleet's project row (the table, its key column and the id
-- are filled in, quoted by PostgreSQL).
SELECT EXISTS (SELECT 1 FROM {table} WHERE {column} = {fleet}) AS present;

-- name: sessions --
-- The sessions that keep the session $1 (a pid) waiting for a lock or, when $1 is null, those
-- whose pids are in $2 (to tell whether a blocker's transaction is still the one that blocked),
-- as pg_stat_activity shows them, with the locks each holds on tables of this database.
SELECT a.pid, a.application_name, a.usename AS user_name, a.state,
       a.wait_event_type, a.wait_event, a.xact_start,
       extract(epoch FROM clock_timestamp() - a.xact_start)::float8 AS transaction_seconds,
       left(regexp_replace(a.query, '\s+', ' ', 'g'), 160) AS query,
       (SELECT string_agg(DISTINCT l.mode || ' on ' || l.relation::regclass::text, ', ')
        FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
        WHERE l.pid = a.pid AND l.granted AND l.locktype = 'relation'
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND c.relkind IN ('r', 'p')) AS holds
FROM pg_stat_activity AS a
WHERE a.pid = ANY (CASE WHEN $1::int IS NULL THEN $2::int[] ELSE pg_blocking_pids($1) END)
ORDER BY a.xact_start NULLS LAST, a.pid;

-- 0002: the ledger (SPEC §3): append-only events, gapless per project.

-- name: create_event --
-- The ledger's events, for an installation that has none.
CREATE TABLE IF NOT EXISTS event (
    project_id uuid NOT NULL,
    seq        bigint NOT NULL CONSTRAINT event_seq_positive CHECK (seq > 0),
    kind       text NOT NULL,
    payload    jsonb NOT NULL,
    -- a sha256, hex (decode() refuses what is not hex; a regex here costs more than the insert)
    digest     text NOT NULL CONSTRAINT event_digest_sha256
               CHECK (octet_length(digest) = 64 AND length(decode(digest, 'hex')) = 32),
    trusted    boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, seq)
);

-- name: create_refuse_ledger_change --
-- Append-only in the database itself, not only by the reaper's good manners.
CREATE OR REPLACE FUNCTION reaper_refuse_ledger_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the ledger is append-only: % on event is refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;

-- name: create_event_append_only --
-- The database refuses UPDATE and DELETE of an event.
CREATE OR REPLACE TRIGGER event_append_only
    BEFORE UPDATE OR DELETE ON event
    FOR EACH ROW EXECUTE FUNCTION reaper_refuse_ledger_change();

-- name: create_event_append_only_truncate --
-- The database refuses TRUNCATE of the ledger.
CREATE OR REPLACE TRIGGER event_append_only_truncate
    BEFORE TRUNCATE ON event
    FOR EACH STATEMENT EXECUTE FUNCTION reaper_refuse_ledger_change();

-- name: create_ledger_stream --
-- One row per stream holds its last sequence number. A writer locks the row with
-- INSERT ... ON CONFLICT DO UPDATE ... RETURNING, which both allocates a range and
-- serialises writers of that stream until commit, so sequences stay gapless (a rolled-back
-- allocation rolls back with its events). Writers lock streams in project_id order.
CREATE TABLE IF NOT EXISTS ledger_stream (
    project_id uuid PRIMARY KEY,
    last_seq   bigint NOT NULL DEFAULT 0
);

-- name: continue_existing_streams --
-- An installation that already has events continues their streams where they are (run where
-- this migration creates ledger_stream).
INSERT INTO ledger_stream (project_id, last_seq)
SELECT project_id, max(seq) FROM event GROUP BY project_id
ON CONFLICT (project_id) DO UPDATE
    SET last_seq = greatest(ledger_stream.last_seq, EXCLUDED.last_seq);

-- name: create_fleet_stream --
-- The fleet stream: what belongs to no project (broker sightings, dead-letter parks).
INSERT INTO ledger_stream (project_id, last_seq)
VALUES ('00000000-0000-0000-0000-000000000000', 0)
ON CONFLICT (project_id) DO NOTHING;

-- name: create_fleet_project --
-- The fleet's reserved project id in a host's project table (the table, its key column and the
-- id are filled in, quoted by PostgreSQL), so that fleet events and dead-letter parks satisfy
-- the host's foreign keys on project_id.
INSERT INTO {table} ({column}) VALUES ({fleet}) ON CONFLICT DO NOTHING;

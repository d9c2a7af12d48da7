-- 0011: what the last pass that read an owned dead-letter queue saw of it
-- (reaper.core.dead_letters.quiet): its listing just before that read, the read's own gets
-- added, and whether the read proved every letter on it parked. While the queue still lists
-- the same as a proven mark, nothing arrived and a pass does not read it. The reaper's own
-- table: a row is replaced by each pass that reads the queue (nothing in it is a record; the
-- ledger keeps what was parked).

-- name: create_quiet_mark --
-- One row per owned dead-letter queue, per vhost (scope); a null counter was not listed.
CREATE TABLE IF NOT EXISTS reaper_quiet_mark (
    scope         text NOT NULL,
    queue         text NOT NULL,
    proven_at     timestamptz NOT NULL,
    proven        boolean NOT NULL,
    letters       bigint NOT NULL,
    message_bytes bigint,
    published     bigint,
    fetched       bigint NOT NULL,
    acknowledged  bigint,
    PRIMARY KEY (scope, queue)
);

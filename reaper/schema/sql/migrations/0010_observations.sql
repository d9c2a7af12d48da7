-- 0010: what is watched across passes (reaper.core.observation): a channel holding
-- deliveries, a queue from which nothing is delivered, each with since when and the counter
-- that has not moved. Kept here so that whichever reaper of the fleet runs the next pass
-- continues the measurement. The reaper's own table: a row is replaced each pass, and one
-- no longer watched is removed (nothing in it is a record; the ledger keeps what was found).

-- name: create_observation --
-- One row per thing watched, per vhost (scope).
CREATE TABLE IF NOT EXISTS reaper_observation (
    scope   text NOT NULL,
    watch   text NOT NULL,
    key     text NOT NULL,
    since   timestamptz NOT NULL,
    counter bigint NOT NULL,
    level   bigint NOT NULL,
    PRIMARY KEY (scope, watch, key)
);

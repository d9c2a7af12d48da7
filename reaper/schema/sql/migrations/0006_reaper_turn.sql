-- 0006: the fleet's turn (SPEC §10 "A fleet shares one pass"): whoever takes it runs the whole
-- pass; every other worker's hook, and `reaper serve`, do nothing more until it is free again.
-- One row per turn, updated in place by one short statement (queries.sql `take_turn`).

-- name: create_reaper_turn --
-- Who took the turn last, and when (by the database's clock).
CREATE TABLE IF NOT EXISTS reaper_turn (
    name     text PRIMARY KEY,
    taken_at timestamptz NOT NULL,
    taken_by text NOT NULL
);

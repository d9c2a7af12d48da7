-- 0013: an index of the ledger that no read uses any more, dropped without blocking writes
-- (SPEC §10). event_sighting_latest_idx (0003) keyed the latest sighting record by
-- reaper_sighting_scope; since 0008 every read of sightings (latest_sightings, 0009's fill of
-- the open sightings) keys it by reaper_sighting_scope_v2, from event_sighting_latest_v2_idx,
-- whose keys are the same but for a bucketed record's `#<bucket>`. Measured (docs/benchmarks.md):
-- each sighting record's insert cost 3.6 µs of CPU more with it; no read's plan changes without
-- it. reaper_sighting_scope stays (0003's step checks its body).

-- name: drop_event_sighting_latest --
-- The v1 sighting index, served as well by event_sighting_latest_v2_idx.
DROP INDEX CONCURRENTLY IF EXISTS event_sighting_latest_idx;

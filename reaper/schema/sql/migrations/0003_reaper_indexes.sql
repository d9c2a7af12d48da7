-- 0003: indexes the reaper's queries are driven by (SPEC §8: index-driven at 1,000,000 jobs).

-- name: index_job_leased_expiry --
-- Expired leases, oldest first: only leased rows, a small partial index.
CREATE INDEX CONCURRENTLY IF NOT EXISTS job_leased_expiry_idx
    ON job (lease_expires_at, id) WHERE state = 'leased';

-- name: index_job_ready_project_run_after --
-- Claimable heads: a skip scan over the projects that have ready work, then, per project,
-- the ready rows in run_after order.
CREATE INDEX CONCURRENTLY IF NOT EXISTS job_ready_project_run_after_idx
    ON job (project_id, run_after, id) WHERE state = 'ready';

-- name: create_sighting_scope --
-- The scope of a sighting as the ledger sees it (mirrors reaper.sightings.ref_of): a broker
-- queue's name, or the project a job-queue condition belongs to.
CREATE OR REPLACE FUNCTION reaper_sighting_scope(stream uuid, payload jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN payload ->> 'source' = 'broker'
                THEN coalesce(nullif(payload ->> 'queue', ''), payload ->> 'object')
                ELSE stream::text END
$$;

-- name: index_event_sighting_latest --
-- The latest sighting record (surface or cleared) for one key: one index probe.
CREATE INDEX CONCURRENTLY IF NOT EXISTS event_sighting_latest_idx
    ON event (project_id, (payload ->> 'source'), (payload ->> 'condition'),
              reaper_sighting_scope(project_id, payload), seq DESC)
    WHERE kind = 'QueueReaped' AND (payload ->> 'action') IN ('surface', 'cleared');

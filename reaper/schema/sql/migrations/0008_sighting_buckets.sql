-- 0008: sightings of a bucketed measure (a dead-letter queue's unread remainder, recorded again
-- each time it reaches a higher power of ten): the scope of such a record is its queue and its
-- bucket, `<queue>#<bucket>`. A new function, not a new body for reaper_sighting_scope (0003
-- checks that one's body, and it stays as it was), and an index on it; the queries use this
-- one. A record with no bucket has the same scope under both.

-- name: create_sighting_scope_v2 --
-- The scope of a sighting as the ledger sees it (mirrors reaper.core.domain.sighting_scope): a
-- broker queue's name, followed by `#<bucket>` when the record has one, or the project a
-- job-queue condition belongs to.
CREATE OR REPLACE FUNCTION reaper_sighting_scope_v2(stream uuid, payload jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN payload ->> 'source' = 'broker'
                THEN coalesce(nullif(payload ->> 'queue', ''), payload ->> 'object')
                     || coalesce('#' || (payload ->> 'bucket'), '')
                ELSE stream::text END
$$;

-- name: index_event_sighting_latest_v2 --
-- The latest sighting record (surface or cleared) for one key: one index probe.
CREATE INDEX CONCURRENTLY IF NOT EXISTS event_sighting_latest_v2_idx
    ON event (project_id, (payload ->> 'source'), (payload ->> 'condition'),
              reaper_sighting_scope_v2(project_id, payload), seq DESC)
    WHERE kind = 'QueueReaped' AND (payload ->> 'action') IN ('surface', 'cleared');

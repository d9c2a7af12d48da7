-- 0009: the index of open sightings (SPEC §10 "Quiet is cheap"): one row per sighting open in
-- the ledger, its key and the record that opened it, so that a pass finds what is open at the
-- cost of what is open, not of the ledger's age. The reaper's own table; the ledger stays the
-- record (reaper.jobqueue.sightings keeps both in one transaction, and reads the latest record
-- from the ledger before it writes anything).

-- name: create_open_sighting --
-- What is open: the sighting's key (its stream, source, condition and scope) and its record.
CREATE TABLE IF NOT EXISTS reaper_open_sighting (
    stream    uuid NOT NULL,
    source    text NOT NULL,
    condition text NOT NULL,
    scope     text NOT NULL,
    payload   jsonb NOT NULL,
    trusted   boolean NOT NULL,
    PRIMARY KEY (stream, source, condition, scope)
);

-- name: fill_open_sightings --
-- Built from the ledger once, in the run that creates it: every sighting whose latest record
-- is a surface record (an index scan of event_sighting_latest_v2_idx).
INSERT INTO reaper_open_sighting (stream, source, condition, scope, payload, trusted)
SELECT project_id, payload ->> 'source', payload ->> 'condition',
       reaper_sighting_scope_v2(project_id, payload), payload, trusted
FROM (
    SELECT DISTINCT ON (project_id, (payload ->> 'source'), (payload ->> 'condition'),
                        reaper_sighting_scope_v2(project_id, payload))
           project_id, payload, trusted
    FROM event
    WHERE kind = 'QueueReaped' AND (payload ->> 'action') IN ('surface', 'cleared')
    ORDER BY project_id, (payload ->> 'source'), (payload ->> 'condition'),
             reaper_sighting_scope_v2(project_id, payload), seq DESC
) AS latest
WHERE (payload ->> 'action') = 'surface'
ON CONFLICT DO NOTHING;

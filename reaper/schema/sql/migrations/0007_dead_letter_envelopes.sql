-- 0007: what each parked dead letter looks like without its body (SPEC §10 "Quiet is cheap"):
-- a pass first reads its dead-letter queue without bodies (the management API's get with
-- truncate 0) and reads the bodies only when a letter it saw is not parked yet. A letter with
-- a message id is known by it; one without is counted by its envelope
-- (reaper.core.dead_letters.envelope: a digest of its size, properties and headers, kept here).
-- Only the reaper's own table changes. A row parked before this migration has no envelope
-- until a pass reads its letter whole again and notes it.

-- name: add_dead_letter_envelope --
-- The letter's envelope when it was parked or last read whole; NULL: not known.
ALTER TABLE dead_letter ADD COLUMN IF NOT EXISTS envelope text;

-- name: index_dead_letter_envelope --
-- How many parked letters carry each envelope: one probe per envelope a read saw.
CREATE INDEX CONCURRENTLY IF NOT EXISTS dead_letter_envelope_idx
    ON dead_letter (envelope) WHERE envelope IS NOT NULL;

-- 0004: dead letters parked as jobs (SPEC §1 (e)): the reaper's own side table.
--
-- A parked dead letter is a `bus.dead_letter` job (state awaiting_human, on the fleet project,
-- idempotency_key `dead_letter:<identity>`) and a `bus_dead_lettered` gate (identity
-- `dead_letter:<identity>`). The job table has no payload column in the host's contract, so
-- what the letter was is kept here, one row per identity, written in the park's transaction:
-- enough for a person to judge it and for `replay` to publish its body back. Everything but
-- `queue` (the dead-letter queue the pass read) and `identity` came from the message's
-- publisher and is untrusted. Values PostgreSQL text cannot hold (NUL, lone surrogates) never
-- reach it: reaper.deadletters.park_fields re-encodes such a body as base64 and drops such a
-- header value. Nothing here is ever deleted by the reaper.

-- name: create_dead_letter --
-- What each parked dead letter was (its foreign key takes a brief lock on job). Created in
-- the shape 0005 and 0007 give an older table: a disposition, a job_id that may repeat or be
-- null, and an envelope.
CREATE TABLE IF NOT EXISTS dead_letter (
    identity       text PRIMARY KEY,
    job_id         uuid REFERENCES job (id),
    queue          text NOT NULL,
    message_id     text,
    origin_queue   text,
    reason         text,
    body           text NOT NULL,
    body_encoding  text NOT NULL
                   CONSTRAINT dead_letter_body_encoding_known
                   CHECK (body_encoding IN ('string', 'base64')),
    body_bytes     bigint NOT NULL CONSTRAINT dead_letter_body_bytes_positive
                   CHECK (body_bytes >= 0),
    body_truncated boolean NOT NULL,
    is_json_object boolean NOT NULL,
    parked_at      timestamptz NOT NULL,
    disposition    text NOT NULL DEFAULT 'parked'
                   CONSTRAINT dead_letter_disposition_known
                   CHECK (disposition IN ('parked', 'pointer_parked', 'stale_pointer')),
    envelope       text
);

-- name: index_dead_letter_queue --
-- How many dead letters of one dead-letter queue are parked (a pass reads past them).
CREATE INDEX CONCURRENTLY IF NOT EXISTS dead_letter_queue_idx ON dead_letter (queue);

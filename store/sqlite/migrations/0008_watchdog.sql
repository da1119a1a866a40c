-- The watchdog (package watchdog) looks, every round, for rows that wait past
-- their deadline with no owner. Each of its finds walks a partial index that
-- holds only the rows its kind looks at, from its deadline on, and stops
-- after a page, so a round costs the same on a table of a thousand ended
-- deliveries as on one of a million:
--
--   deliveries_retry_wait  deliveries waiting for their next attempt, by
--                          that time (only waiting rows are in it);
--   outbox_published       outbox rows the relay published, by the time it
--                          did (the watchdog keeps a checkpoint in this
--                          order, so each row is examined once).
--
-- Stale claims and leases that ran out use deliveries_sending and
-- outbox_leased, which exist already.
CREATE INDEX deliveries_retry_wait ON deliveries (next_attempt_at, message_id) WHERE state = 'RETRY_WAIT';
CREATE INDEX outbox_published ON outbox (updated_at, message_id) WHERE state = 'PUBLISHED';

-- Where the watchdog's find of a kind goes on from (store.UnownedPosition),
-- so a restart or a new leader does not examine every published row again.
CREATE TABLE watchdog_checkpoints (
    kind       TEXT PRIMARY KEY,
    at         INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    updated_at INTEGER NOT NULL
);

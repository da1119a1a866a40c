-- Fallback chains (channel policy first, package fallback). A first kind's
-- outbox rows carry their step (1, 2… in the kind's channel order; NULL
-- for every other row). Step 1 is PENDING, the later steps WAITING until
-- the write that ends the step before releases them (PENDING) or skips
-- them (SKIPPED). fallback_fails counts the definite failures of the step
-- before, one per send (a push step has one per device), and the release
-- comes when it reaches that step's number of rows; fallback_after is how
-- the step before ended when it released or skipped this one.
ALTER TABLE outbox ADD COLUMN fallback_step INTEGER;
ALTER TABLE outbox ADD COLUMN fallback_fails INTEGER NOT NULL DEFAULT 0;
ALTER TABLE outbox ADD COLUMN fallback_after TEXT;
-- The watchdog's walk of the WAITING rows (store.UnownedWaiting), by the
-- time the chain could first start. Few rows: a later step waits only
-- while the one before is under way.
CREATE INDEX outbox_waiting ON outbox (available_at, message_id) WHERE state = 'WAITING';

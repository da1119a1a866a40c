-- A cancelled notification is marked (cancelled_at, the first cancel's
-- time in ms), so that a send in flight at the cancel, which the cancel
-- leaves alone, is not tried again if its call then fails for now: its
-- retry's claim (qDeliveryRetryCancelled) finds the mark and ends it
-- SUPPRESSED(CANCELLED), as it does a cancelled campaign's. A PARKED send
-- requeued after the cancel is a retry too. See PostgreSQL's migration 37.
ALTER TABLE notifications ADD COLUMN cancelled_at INTEGER;

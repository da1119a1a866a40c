-- A cancelled notification is marked (cancelled_at, the first cancel's
-- time), so that a send in flight at the cancel, which the cancel leaves
-- alone, is not tried again if its call then fails for now: its retry's
-- claim (qDeliveryClaimRetry) finds the mark and ends it
-- SUPPRESSED(CANCELLED), as it does a cancelled campaign's. A PARKED send
-- requeued after the cancel is a retry too. The column is NULL for every
-- notification never cancelled, so adding it rewrites nothing.
ALTER TABLE notifications ADD COLUMN cancelled_at timestamptz;

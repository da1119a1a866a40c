-- The claim's index without the deferred rows, beside outbox_fair until
-- migration 35 puts it in its place, and the index the promotion walks
-- (migration 33). Both are built under one SHARE lock on the outbox, asked
-- for first: reads go on and writes wait for the builds, as for migration
-- 31 (2.5 s a million PENDING rows on the 2-core development machine for
-- the first; the second reads the same rows and keeps none).
LOCK TABLE outbox IN SHARE MODE;
CREATE INDEX outbox_fair_ready ON outbox (lane, tenant, scope, available_at, id) WHERE state = 'PENDING' AND NOT deferred;
CREATE INDEX outbox_deferred ON outbox (lane, available_at) WHERE state = 'PENDING' AND deferred;

-- The claim's index without the deferred rows, beside outbox_fair until
-- migration 35 puts it in its place, and the index of deferred rows the
-- promotion walks (the flag is migration 33's). Both are built under one
-- SHARE lock on the outbox, asked for first: reads go on and writes wait
-- for the builds. Each build reads the whole table, so together they take
-- about twice as long as migration 31 (whose one build took 2.5 s with a
-- million PENDING rows on the 2-core development machine); the second
-- keeps no row, none being deferred yet.
LOCK TABLE outbox IN SHARE MODE;
CREATE INDEX outbox_fair_ready ON outbox (lane, tenant, scope, available_at, id) WHERE state = 'PENDING' AND NOT deferred;
CREATE INDEX outbox_deferred ON outbox (lane, available_at) WHERE state = 'PENDING' AND deferred;

-- outbox_fair becomes (lane, tenant, scope, available_at, id): the claim
-- walks each (tenant, scope) of the lane's PENDING rows in a loose scan,
-- each one's due rows oldest first (migration 30, qOutboxClaim). The old
-- index is dropped in the same transaction, as migration 22 dropped
-- outbox_due.
--
-- A migration of its own, after the columns': building the index reads
-- the PENDING rows under a SHARE lock, so reads of the outbox (GET, the
-- list, the feed) go on and writes wait; only the DROP takes the table
-- whole, for a moment. Were the columns added here too, their lock would
-- hold the reads for the whole build. The DROP's wait for that lock is
-- bounded as every wait of a migration is (migrate.go): behind a
-- transaction holding the outbox for longer, or in a deadlock with one
-- that read the outbox and then waits to write it, this migration rolls
-- back and is tried again, building the index again (2.5 s a million
-- PENDING rows on the 2-core development machine).
CREATE INDEX outbox_fair_scoped ON outbox (lane, tenant, scope, available_at, id) WHERE state = 'PENDING';
DROP INDEX outbox_fair;
ALTER INDEX outbox_fair_scoped RENAME TO outbox_fair;

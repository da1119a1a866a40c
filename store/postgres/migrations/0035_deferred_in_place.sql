-- outbox_fair becomes the index without the deferred rows (migration 34),
-- as migration 32 swapped in the one with the scope: a moment's ACCESS
-- EXCLUSIVE lock on the outbox, asked for first.
DROP INDEX outbox_fair;
ALTER INDEX outbox_fair_ready RENAME TO outbox_fair;

-- outbox_fair becomes the index with the scope (migration 31), as
-- migration 22 dropped outbox_due: a moment's ACCESS EXCLUSIVE lock on the
-- outbox, asked for first, so a wait past the bound (a long transaction
-- on the outbox) rolls back nothing but the wait.
DROP INDEX outbox_fair;
ALTER INDEX outbox_fair_scoped RENAME TO outbox_fair;

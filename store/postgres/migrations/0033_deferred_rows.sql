-- An outbox row written PENDING and due more than store.DeferHorizon ahead
-- (a send_at tomorrow, a quiet-hours deferral to 08:00) is written
-- deferred: still PENDING, but out of the claim's index outbox_fair and in
-- outbox_deferred (lane, available_at) instead (built by migration 34;
-- 35 puts the new outbox_fair in place),
-- until a claim of its lane promotes it within the horizon of its time
-- (store/promote.go, qOutboxPromote). The claim probes every (tenant,
-- scope) of the lane that has rows in outbox_fair; with tomorrow's rows
-- there, a lane whose 5,000 clinics had each scheduled reminders paid
-- 5,000 probes on every claim.
--
-- Adding a column with a constant default rewrites nothing: a moment's
-- lock, asked for first (migrate.go). A row an older herald writes beside
-- the migrated schema is not deferred (the default), and no row written
-- before is: they stay in the claim's index.
LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE;
ALTER TABLE outbox ADD COLUMN deferred boolean NOT NULL DEFAULT false;

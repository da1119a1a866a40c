-- An outbox row written PENDING and due more than store.DeferHorizon after
-- its write (a send_at tomorrow, a quiet-hours deferral to 08:00) is
-- written deferred: still PENDING, but out of the claim's index outbox_fair
-- and in outbox_deferred (lane, available_at) instead, until a claim of its
-- lane promotes it within the horizon of its time (store/promote.go,
-- qOutboxPromote). The claim probes every (tenant, scope) of the lane that
-- has rows in outbox_fair; with tomorrow's rows there, a lane whose 5,000
-- clinics had each scheduled reminders paid 5,000 probes on every claim.
-- The rows already there stay in outbox_fair (the column's default), as
-- does a row an older herald writes beside the migrated schema. See
-- PostgreSQL's migrations 33 to 35.
ALTER TABLE outbox ADD COLUMN deferred INTEGER NOT NULL DEFAULT 0;
DROP INDEX outbox_fair;
CREATE INDEX outbox_fair ON outbox (lane, tenant, scope, available_at, id) WHERE state = 'PENDING' AND deferred = 0;
CREATE INDEX outbox_deferred ON outbox (lane, available_at) WHERE state = 'PENDING' AND deferred = 1;

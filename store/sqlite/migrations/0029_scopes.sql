-- A notification may name a scope inside its tenant (a clinic, a brand, a
-- shop; '' for none). Claims share a lane between the tenants first and,
-- inside a tenant, between its scopes (qOutboxClaim). The notification
-- keeps its scope; each outbox row copies it for the claim's index; a
-- campaign's notifications take the campaign's. A row an older herald
-- writes gets '' (the column's default). See PostgreSQL's migration 30.
ALTER TABLE notifications ADD COLUMN scope TEXT NOT NULL DEFAULT '';
ALTER TABLE outbox ADD COLUMN scope TEXT NOT NULL DEFAULT '';
ALTER TABLE campaigns ADD COLUMN scope TEXT NOT NULL DEFAULT '';
DROP INDEX outbox_fair;
CREATE INDEX outbox_fair ON outbox (lane, tenant, scope, available_at, id) WHERE state = 'PENDING';

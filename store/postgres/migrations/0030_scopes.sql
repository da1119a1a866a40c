-- A notification may name a scope inside its tenant (a clinic, a brand, a
-- shop: "scope", at most 64 characters; '' for none). Claims share a lane
-- between the tenants first and, inside a tenant, between its scopes
-- (qOutboxClaim): a clinic's backlog does not hold up another clinic's
-- rows, and a tenant that spreads its sends over many scopes takes no
-- more of the lane than one that does not.
--
-- The notification keeps its scope (GET shows it); each outbox row copies
-- it, as it copies the tenant, for the claim's index; a campaign's
-- notifications take the campaign's. A row an older herald writes beside
-- the migrated schema gets '' (the column's default), so it is claimed
-- in its tenant's unscoped turn.
--
-- outbox_fair becomes (lane, tenant, scope, available_at, id): the claim
-- walks each (tenant, scope) of the lane's PENDING rows in a loose scan,
-- each one's due rows oldest first. The old index is dropped in the same
-- transaction, as migration 22 dropped outbox_due. Building the new one
-- reads the PENDING rows only, and holds writes to the outbox meanwhile.
LOCK TABLE outbox, notifications, campaigns IN ACCESS EXCLUSIVE MODE;
ALTER TABLE notifications ADD COLUMN scope text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE outbox ADD COLUMN scope text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE campaigns ADD COLUMN scope text COLLATE "C" NOT NULL DEFAULT '';
CREATE INDEX outbox_fair_scoped ON outbox (lane, tenant, scope, available_at, id) WHERE state = 'PENDING';
DROP INDEX outbox_fair;
ALTER INDEX outbox_fair_scoped RENAME TO outbox_fair;

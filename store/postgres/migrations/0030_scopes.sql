-- A notification may name a scope inside its tenant (a clinic, a brand, a
-- shop: "scope", at most 64 characters; '' for none). Claims share a lane
-- between the tenants first and, inside a tenant, between its scopes
-- (qOutboxClaim): a clinic's backlog does not hold up another clinic's
-- rows, and a tenant that spreads its sends over many scopes takes no
-- more of the lane than one that does not.
--
-- The notification keeps its scope (GET shows it); each outbox row copies
-- it, as it copies the tenant, for the claim's index (migrations 31, 32); a
-- campaign's notifications take the campaign's. A row an older herald
-- writes beside the migrated schema gets '' (the column's default), so it
-- is claimed in its tenant's unscoped turn.
--
-- Adding a column with a constant default rewrites nothing: the locks,
-- taken first and in one order (migrate.go), are held for a moment.
LOCK TABLE outbox, notifications, campaigns IN ACCESS EXCLUSIVE MODE;
ALTER TABLE notifications ADD COLUMN scope text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE outbox ADD COLUMN scope text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE campaigns ADD COLUMN scope text COLLATE "C" NOT NULL DEFAULT '';

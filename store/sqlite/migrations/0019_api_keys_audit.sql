-- API keys (store.APIKeys): one row per key, holding the salted KDF hash
-- of its secret (package apikeys), never the key. scopes is a
-- comma-separated list (send, read, admin). api_key_revision is one row
-- whose counter every create and revoke bumps in its own transaction, so
-- another process on the file sees that a key changed with one read.
-- Times are Unix milliseconds; expires_at and revoked_at NULL for none.
CREATE TABLE api_keys (
    id         TEXT PRIMARY KEY,
    tenant     TEXT NOT NULL,
    name       TEXT NOT NULL,
    scopes     TEXT NOT NULL,
    hash       TEXT NOT NULL,
    created_by TEXT NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    expires_at INTEGER,
    revoked_at INTEGER
);
CREATE INDEX api_keys_tenant ON api_keys (tenant, created_at, id);
CREATE TABLE api_key_revision (
    id       INTEGER PRIMARY KEY CHECK (id = 1),
    revision INTEGER NOT NULL
);
INSERT INTO api_key_revision (id, revision) VALUES (1, 0);

-- The audit log of admin actions (store.Audit): append-only, which the
-- triggers enforce. detail is a small JSON object; no personal data
-- (package audit).
CREATE TABLE audit_log (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    at         INTEGER NOT NULL,
    tenant     TEXT NOT NULL,
    actor_key  TEXT NOT NULL,
    actor_name TEXT NOT NULL,
    action     TEXT NOT NULL,
    target     TEXT NOT NULL DEFAULT '',
    remote     TEXT NOT NULL DEFAULT '',
    detail     TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_log_tenant ON audit_log (tenant, id);
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END;

-- API keys (store.APIKeys): one row per key, holding the salted KDF hash
-- of its secret (package apikeys), never the key. api_key_revision is one
-- row whose counter every create and revoke bumps in its own transaction
-- (which also NOTIFYs every process: apikeys.go); expires_at and
-- revoked_at are NULL for none.
CREATE TABLE api_keys (
    id         text PRIMARY KEY,
    tenant     text NOT NULL,
    name       text NOT NULL,
    scopes     text[] NOT NULL,
    hash       text NOT NULL,
    created_by text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL,
    expires_at timestamptz,
    revoked_at timestamptz
);
CREATE INDEX api_keys_tenant ON api_keys (tenant, created_at, id);
CREATE TABLE api_key_revision (
    id       integer PRIMARY KEY CHECK (id = 1),
    revision bigint NOT NULL
);
INSERT INTO api_key_revision (id, revision) VALUES (1, 0);

-- The audit log of admin actions (store.Audit): append-only. The trigger
-- refuses every UPDATE and DELETE (and TRUNCATE), whoever runs them;
-- detail is a small JSON object (as written, text) without personal data
-- (package audit).
CREATE TABLE audit_log (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL,
    tenant     text NOT NULL,
    actor_key  text NOT NULL,
    actor_name text NOT NULL,
    action     text NOT NULL,
    target     text NOT NULL DEFAULT '',
    remote     text NOT NULL DEFAULT '',
    detail     text NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_log_tenant ON audit_log (tenant, id);
CREATE FUNCTION audit_log_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_log is append-only' USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_refuse();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_refuse();

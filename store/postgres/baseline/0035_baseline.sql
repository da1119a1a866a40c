-- The schema migrations 1 to 35 leave, for an empty schema in their place
-- (store/postgres/migrate.go). Generated from a schema migrated step by step:
--   go test ./store/postgres -run TestTheBaselineIsTheMigrationsApplied -update-baseline
-- Do not edit it; that test fails when it and the migrations disagree.

CREATE FUNCTION audit_log_refuse() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'audit_log is append-only' USING ERRCODE = 'insufficient_privilege';
END
$$;

CREATE FUNCTION campaign_count(campaign text, was text, now text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO campaign_counts AS k (campaign_id, slot, sent, suppressed, failed, unknown)
    VALUES (campaign, pg_backend_pid(),
            (now IS NOT DISTINCT FROM 'sent')::int - (was IS NOT DISTINCT FROM 'sent')::int,
            (now IS NOT DISTINCT FROM 'suppressed')::int - (was IS NOT DISTINCT FROM 'suppressed')::int,
            (now IS NOT DISTINCT FROM 'failed')::int - (was IS NOT DISTINCT FROM 'failed')::int,
            (now IS NOT DISTINCT FROM 'unknown')::int - (was IS NOT DISTINCT FROM 'unknown')::int)
    ON CONFLICT (campaign_id, slot) DO UPDATE
    SET sent = k.sent + excluded.sent, suppressed = k.suppressed + excluded.suppressed,
        failed = k.failed + excluded.failed, unknown = k.unknown + excluded.unknown;
END
$$;

CREATE FUNCTION campaign_count_deliveries() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM changed WHERE campaign_id IS NOT NULL) THEN
        RETURN NULL;
    END IF;
    WITH unmarked AS (
        UPDATE outbox x SET campaign_counted = false
        FROM (
            SELECT b.campaign_id, h.tid
            FROM before_change b
            CROSS JOIN LATERAL (
                SELECT y.ctid AS tid FROM outbox y
                WHERE y.notification_id = b.notification_id AND y.channel = b.channel AND y.campaign_counted
                LIMIT 1
            ) h
            WHERE b.campaign_id IS NOT NULL AND campaign_outcome(NULL, b.state) IS NULL
        ) k
        WHERE x.ctid = k.tid AND x.campaign_counted
        RETURNING k.campaign_id, campaign_outcome(x.state, NULL) AS outcome
    ),
    moves AS (
        SELECT campaign_id, campaign_outcome(NULL, state) AS outcome, 1 AS n FROM changed WHERE campaign_id IS NOT NULL
        UNION ALL
        SELECT campaign_id, campaign_outcome(NULL, state), -1 FROM before_change WHERE campaign_id IS NOT NULL
        UNION ALL
        SELECT campaign_id, outcome, -1 FROM unmarked
    ),
    sums AS (
        SELECT campaign_id,
               coalesce(sum(n) FILTER (WHERE outcome = 'sent'), 0) AS sent,
               coalesce(sum(n) FILTER (WHERE outcome = 'suppressed'), 0) AS suppressed,
               coalesce(sum(n) FILTER (WHERE outcome = 'failed'), 0) AS failed,
               coalesce(sum(n) FILTER (WHERE outcome = 'unknown'), 0) AS unknown
        FROM moves WHERE outcome IS NOT NULL
        GROUP BY campaign_id
    )
    INSERT INTO campaign_counts AS k (campaign_id, slot, sent, suppressed, failed, unknown)
    SELECT campaign_id, pg_backend_pid(), sent, suppressed, failed, unknown
    FROM sums WHERE sent <> 0 OR suppressed <> 0 OR failed <> 0 OR unknown <> 0
    ORDER BY campaign_id
    ON CONFLICT (campaign_id, slot) DO UPDATE
    SET sent = k.sent + excluded.sent, suppressed = k.suppressed + excluded.suppressed,
        failed = k.failed + excluded.failed, unknown = k.unknown + excluded.unknown;
    RETURN NULL;
END
$$;

CREATE FUNCTION campaign_count_delivery() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    now text := campaign_outcome(NULL, NEW.state);
    was text := CASE WHEN TG_OP = 'UPDATE' THEN campaign_outcome(NULL, OLD.state) END;
BEGIN
    WITH s AS (
        UPDATE outbox o SET campaign_counted = false
        WHERE was IS NULL AND o.notification_id = NEW.notification_id AND o.channel = NEW.channel AND o.campaign_counted
        RETURNING campaign_outcome(o.state, NULL) AS was
    ),
    d AS (SELECT coalesce((SELECT s.was FROM s), was) AS was)
    INSERT INTO campaign_counts AS k (campaign_id, slot, sent, suppressed, failed, unknown)
    SELECT NEW.campaign_id, pg_backend_pid(),
           (now IS NOT DISTINCT FROM 'sent')::int - (d.was IS NOT DISTINCT FROM 'sent')::int,
           (now IS NOT DISTINCT FROM 'suppressed')::int - (d.was IS NOT DISTINCT FROM 'suppressed')::int,
           (now IS NOT DISTINCT FROM 'failed')::int - (d.was IS NOT DISTINCT FROM 'failed')::int,
           (now IS NOT DISTINCT FROM 'unknown')::int - (d.was IS NOT DISTINCT FROM 'unknown')::int
    FROM d WHERE d.was IS DISTINCT FROM now
    ON CONFLICT (campaign_id, slot) DO UPDATE
    SET sent = k.sent + excluded.sent, suppressed = k.suppressed + excluded.suppressed,
        failed = k.failed + excluded.failed, unknown = k.unknown + excluded.unknown;
    RETURN NULL;
END
$$;

CREATE FUNCTION campaign_count_outbox() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    c text;
    was text;
BEGIN
    SELECT campaign_id INTO c FROM notifications WHERE id = NEW.notification_id;
    IF c IS NULL OR EXISTS (SELECT 1 FROM deliveries WHERE message_id = NEW.message_id) THEN
        RETURN NEW;
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.campaign_counted THEN
        was := campaign_outcome(OLD.state, NULL);
    END IF;
    IF was IS NOT DISTINCT FROM campaign_outcome(NEW.state, NULL) THEN
        RETURN NEW;
    END IF;
    PERFORM campaign_count(c, was, campaign_outcome(NEW.state, NULL));
    NEW.campaign_counted := campaign_outcome(NEW.state, NULL) IS NOT NULL;
    RETURN NEW;
END
$$;

CREATE FUNCTION campaign_of_delivery() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    SELECT campaign_id INTO NEW.campaign_id FROM notifications WHERE id = NEW.notification_id;
    RETURN NEW;
END
$$;

CREATE FUNCTION campaign_outcome(outbox_state text, delivery_state text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
SELECT CASE
    WHEN delivery_state IS NULL THEN CASE
        WHEN outbox_state = 'SKIPPED' THEN 'suppressed'
        WHEN outbox_state IN ('EXPIRED', 'FAILED') THEN 'failed' END
    WHEN delivery_state IN ('PROVIDER_ACCEPTED', 'DELIVERED') THEN 'sent'
    WHEN delivery_state = 'SUPPRESSED' THEN 'suppressed'
    WHEN delivery_state IN ('PERMANENT_FAILURE', 'RETRY_EXHAUSTED') THEN 'failed'
    WHEN delivery_state = 'UNKNOWN' THEN 'unknown' END
$$;

CREATE TABLE api_key_revision (
    id integer NOT NULL,
    revision bigint NOT NULL,
    CONSTRAINT api_key_revision_id_check CHECK ((id = 1))
);

CREATE TABLE api_keys (
    id text NOT NULL COLLATE pg_catalog."C",
    tenant text NOT NULL COLLATE pg_catalog."C",
    name text NOT NULL COLLATE pg_catalog."C",
    scopes text[] NOT NULL COLLATE pg_catalog."C",
    hash text NOT NULL COLLATE pg_catalog."C",
    created_by text DEFAULT ''::text NOT NULL COLLATE pg_catalog."C",
    created_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone,
    revoked_at timestamp with time zone
);

CREATE TABLE audit_log (
    id bigint NOT NULL,
    at timestamp with time zone NOT NULL,
    tenant text NOT NULL COLLATE pg_catalog."C",
    actor_key text NOT NULL COLLATE pg_catalog."C",
    actor_name text NOT NULL COLLATE pg_catalog."C",
    action text NOT NULL COLLATE pg_catalog."C",
    target text DEFAULT ''::text NOT NULL COLLATE pg_catalog."C",
    remote text DEFAULT ''::text NOT NULL COLLATE pg_catalog."C",
    detail text DEFAULT '{}'::text NOT NULL COLLATE pg_catalog."C"
);

ALTER TABLE audit_log ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME audit_log_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE campaign_counts (
    campaign_id text NOT NULL COLLATE pg_catalog."C",
    slot integer NOT NULL,
    sent bigint DEFAULT 0 NOT NULL,
    suppressed bigint DEFAULT 0 NOT NULL,
    failed bigint DEFAULT 0 NOT NULL,
    unknown bigint DEFAULT 0 NOT NULL
);

CREATE TABLE campaign_recipients (
    campaign_id text NOT NULL COLLATE pg_catalog."C",
    seq bigint NOT NULL,
    recipient text NOT NULL COLLATE pg_catalog."C",
    notification_id text NOT NULL COLLATE pg_catalog."C",
    params json
);

ALTER TABLE campaign_recipients ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME campaign_recipients_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE campaigns (
    id text NOT NULL COLLATE pg_catalog."C",
    tenant text NOT NULL COLLATE pg_catalog."C",
    kind text NOT NULL COLLATE pg_catalog."C",
    lane text NOT NULL COLLATE pg_catalog."C",
    channels text[] NOT NULL COLLATE pg_catalog."C",
    steps integer[] NOT NULL,
    params json NOT NULL,
    send_at timestamp with time zone,
    state text NOT NULL COLLATE pg_catalog."C",
    total bigint DEFAULT 0 NOT NULL,
    enqueued bigint DEFAULT 0 NOT NULL,
    fanout_seq bigint DEFAULT 0 NOT NULL,
    idempotency_key text NOT NULL COLLATE pg_catalog."C",
    request_hash text NOT NULL COLLATE pg_catalog."C",
    created_at timestamp with time zone NOT NULL,
    started_at timestamp with time zone,
    ended_at timestamp with time zone,
    draft_expires_at timestamp with time zone DEFAULT (now() + '168:00:00'::interval),
    ended_reason text COLLATE pg_catalog."C",
    scope text DEFAULT ''::text NOT NULL COLLATE pg_catalog."C"
);

CREATE TABLE consent_history (
    id bigint NOT NULL,
    tenant text NOT NULL COLLATE pg_catalog."C",
    recipient text NOT NULL COLLATE pg_catalog."C",
    channel text NOT NULL COLLATE pg_catalog."C",
    old_consent boolean,
    new_consent boolean,
    changed_at timestamp with time zone NOT NULL,
    by_tenant text NOT NULL COLLATE pg_catalog."C",
    by_key text DEFAULT ''::text NOT NULL COLLATE pg_catalog."C"
);

ALTER TABLE consent_history ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME consent_history_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE deliveries (
    message_id text NOT NULL COLLATE pg_catalog."C",
    notification_id text NOT NULL COLLATE pg_catalog."C",
    tenant text NOT NULL COLLATE pg_catalog."C",
    channel text NOT NULL COLLATE pg_catalog."C",
    provider text DEFAULT ''::text NOT NULL COLLATE pg_catalog."C",
    state text NOT NULL COLLATE pg_catalog."C",
    reason text DEFAULT ''::text NOT NULL COLLATE pg_catalog."C",
    attempts integer DEFAULT 0 NOT NULL,
    claimed_by text COLLATE pg_catalog."C",
    claimed_at timestamp with time zone,
    next_attempt_at timestamp with time zone,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    provider_ref text COLLATE pg_catalog."C",
    campaign_id text COLLATE pg_catalog."C"
);

CREATE TABLE delivery_attempts (
    message_id text NOT NULL COLLATE pg_catalog."C",
    attempt integer NOT NULL,
    owner text NOT NULL COLLATE pg_catalog."C",
    started_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone NOT NULL,
    class text NOT NULL COLLATE pg_catalog."C",
    reason text DEFAULT ''::text NOT NULL COLLATE pg_catalog."C",
    duration_ms bigint NOT NULL
);

CREATE TABLE devices (
    tenant text NOT NULL COLLATE pg_catalog."C",
    recipient text NOT NULL COLLATE pg_catalog."C",
    device_id text NOT NULL COLLATE pg_catalog."C",
    token text NOT NULL COLLATE pg_catalog."C",
    platform text NOT NULL COLLATE pg_catalog."C",
    active boolean DEFAULT true NOT NULL,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    deactivated_at timestamp with time zone,
    deactivated_reason text DEFAULT ''::text NOT NULL COLLATE pg_catalog."C",
    CONSTRAINT devices_platform_check CHECK ((platform = ANY (ARRAY['fcm'::text, 'apns'::text, 'web'::text])))
);

CREATE TABLE event_keys (
    tenant text NOT NULL COLLATE pg_catalog."C",
    recipient text NOT NULL COLLATE pg_catalog."C",
    event_id text NOT NULL COLLATE pg_catalog."C",
    kind text NOT NULL COLLATE pg_catalog."C",
    channel text NOT NULL COLLATE pg_catalog."C",
    owner text NOT NULL COLLATE pg_catalog."C",
    lease_until timestamp with time zone NOT NULL,
    taken_at timestamp with time zone NOT NULL,
    taken_from text COLLATE pg_catalog."C"
);

CREATE TABLE idempotency_keys (
    tenant text NOT NULL COLLATE pg_catalog."C",
    key text NOT NULL COLLATE pg_catalog."C",
    request_hash text NOT NULL COLLATE pg_catalog."C",
    notification_id text NOT NULL COLLATE pg_catalog."C",
    response bytea NOT NULL,
    created_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone NOT NULL
);

CREATE TABLE inbox_counters (
    tenant text NOT NULL COLLATE pg_catalog."C",
    recipient text NOT NULL COLLATE pg_catalog."C",
    seq bigint NOT NULL,
    unread bigint NOT NULL
);

CREATE TABLE inbox_items (
    tenant text NOT NULL COLLATE pg_catalog."C",
    recipient text NOT NULL COLLATE pg_catalog."C",
    seq bigint NOT NULL,
    message_id text NOT NULL COLLATE pg_catalog."C",
    notification_id text NOT NULL COLLATE pg_catalog."C",
    kind text NOT NULL COLLATE pg_catalog."C",
    title text NOT NULL COLLATE pg_catalog."C",
    body text NOT NULL COLLATE pg_catalog."C",
    locale text NOT NULL COLLATE pg_catalog."C",
    created_at timestamp with time zone NOT NULL,
    read_at timestamp with time zone,
    archived_at timestamp with time zone
);

CREATE TABLE notifications (
    id text NOT NULL COLLATE pg_catalog."C",
    tenant text NOT NULL COLLATE pg_catalog."C",
    recipient text NOT NULL COLLATE pg_catalog."C",
    event_id text NOT NULL COLLATE pg_catalog."C",
    kind text NOT NULL COLLATE pg_catalog."C",
    lane text NOT NULL COLLATE pg_catalog."C",
    params json NOT NULL,
    dedup_key text COLLATE pg_catalog."C",
    send_at timestamp with time zone,
    expires_at timestamp with time zone,
    created_at timestamp with time zone NOT NULL,
    erased_at timestamp with time zone,
    campaign_id text COLLATE pg_catalog."C",
    inbox_at smallint DEFAULT 0 NOT NULL,
    scope text DEFAULT ''::text NOT NULL COLLATE pg_catalog."C"
);

CREATE TABLE outbox (
    id bigint NOT NULL,
    notification_id text NOT NULL COLLATE pg_catalog."C",
    message_id text NOT NULL COLLATE pg_catalog."C",
    tenant text NOT NULL COLLATE pg_catalog."C",
    lane text NOT NULL COLLATE pg_catalog."C",
    channel text NOT NULL COLLATE pg_catalog."C",
    state text NOT NULL COLLATE pg_catalog."C",
    available_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone,
    attempts integer DEFAULT 0 NOT NULL,
    token bigint DEFAULT 0 NOT NULL,
    claimed_by text COLLATE pg_catalog."C",
    claimed_until timestamp with time zone,
    last_reason text DEFAULT ''::text NOT NULL COLLATE pg_catalog."C",
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    fallback_step integer,
    fallback_fails integer DEFAULT 0 NOT NULL,
    fallback_after text COLLATE pg_catalog."C",
    fallback_plan text[] COLLATE pg_catalog."C",
    campaign_counted boolean DEFAULT false NOT NULL,
    scope text DEFAULT ''::text NOT NULL COLLATE pg_catalog."C",
    deferred boolean DEFAULT false NOT NULL
)
WITH (autovacuum_vacuum_scale_factor='0.02', autovacuum_analyze_scale_factor='0.02');

ALTER TABLE outbox ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME outbox_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE parked_discards (
    id bigint NOT NULL,
    discarded_at timestamp with time zone NOT NULL,
    actor text NOT NULL COLLATE pg_catalog."C",
    message_id text NOT NULL COLLATE pg_catalog."C",
    tenant text NOT NULL COLLATE pg_catalog."C",
    parked_reason text NOT NULL COLLATE pg_catalog."C",
    reason text NOT NULL COLLATE pg_catalog."C"
);

ALTER TABLE parked_discards ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME parked_discards_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE profiles (
    tenant text NOT NULL COLLATE pg_catalog."C",
    recipient text NOT NULL COLLATE pg_catalog."C",
    data jsonb NOT NULL,
    updated_at timestamp with time zone NOT NULL
);

CREATE TABLE rate_buckets (
    provider text NOT NULL COLLATE pg_catalog."C",
    tokens double precision NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    paused_until timestamp with time zone,
    slow_factor double precision DEFAULT 1 NOT NULL,
    recover_until timestamp with time zone,
    last_grant integer DEFAULT 0 NOT NULL,
    last_free integer DEFAULT 0 NOT NULL
);

CREATE TABLE reconcile_runs (
    id bigint NOT NULL,
    started_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone NOT NULL,
    report json NOT NULL
);

ALTER TABLE reconcile_runs ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME reconcile_runs_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE watchdog_checkpoints (
    kind text NOT NULL COLLATE pg_catalog."C",
    at timestamp with time zone NOT NULL,
    message_id text NOT NULL COLLATE pg_catalog."C",
    updated_at timestamp with time zone NOT NULL
);

INSERT INTO api_key_revision (id, revision) VALUES (1, 0);

SELECT pg_catalog.setval('audit_log_id_seq', 1, false);

SELECT pg_catalog.setval('campaign_recipients_seq_seq', 1, false);

SELECT pg_catalog.setval('consent_history_id_seq', 1, false);

SELECT pg_catalog.setval('outbox_id_seq', 1, false);

SELECT pg_catalog.setval('parked_discards_id_seq', 1, false);

SELECT pg_catalog.setval('reconcile_runs_id_seq', 1, false);

ALTER TABLE ONLY api_key_revision
    ADD CONSTRAINT api_key_revision_pkey PRIMARY KEY (id);

ALTER TABLE ONLY api_keys
    ADD CONSTRAINT api_keys_pkey PRIMARY KEY (id);

ALTER TABLE ONLY audit_log
    ADD CONSTRAINT audit_log_pkey PRIMARY KEY (id);

ALTER TABLE ONLY campaign_counts
    ADD CONSTRAINT campaign_counts_pkey PRIMARY KEY (campaign_id, slot);

ALTER TABLE ONLY campaign_recipients
    ADD CONSTRAINT campaign_recipients_campaign_id_recipient_key UNIQUE (campaign_id, recipient);

ALTER TABLE ONLY campaign_recipients
    ADD CONSTRAINT campaign_recipients_pkey PRIMARY KEY (campaign_id, seq);

ALTER TABLE ONLY campaigns
    ADD CONSTRAINT campaigns_pkey PRIMARY KEY (id);

ALTER TABLE ONLY consent_history
    ADD CONSTRAINT consent_history_pkey PRIMARY KEY (id);

ALTER TABLE ONLY devices
    ADD CONSTRAINT devices_pkey PRIMARY KEY (tenant, recipient, device_id);

ALTER TABLE ONLY event_keys
    ADD CONSTRAINT event_keys_pkey PRIMARY KEY (tenant, recipient, event_id, kind, channel);

ALTER TABLE ONLY idempotency_keys
    ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (tenant, key);

ALTER TABLE ONLY inbox_counters
    ADD CONSTRAINT inbox_counters_pkey PRIMARY KEY (tenant, recipient);

ALTER TABLE ONLY inbox_items
    ADD CONSTRAINT inbox_items_message_id_key UNIQUE (message_id);

ALTER TABLE ONLY inbox_items
    ADD CONSTRAINT inbox_items_pkey PRIMARY KEY (tenant, recipient, seq);

ALTER TABLE ONLY notifications
    ADD CONSTRAINT notifications_pkey PRIMARY KEY (id);

ALTER TABLE ONLY outbox
    ADD CONSTRAINT outbox_pkey PRIMARY KEY (notification_id, channel);

ALTER TABLE ONLY parked_discards
    ADD CONSTRAINT parked_discards_pkey PRIMARY KEY (id);

ALTER TABLE ONLY profiles
    ADD CONSTRAINT profiles_pkey PRIMARY KEY (tenant, recipient);

ALTER TABLE ONLY rate_buckets
    ADD CONSTRAINT rate_buckets_pkey PRIMARY KEY (provider);

ALTER TABLE ONLY reconcile_runs
    ADD CONSTRAINT reconcile_runs_pkey PRIMARY KEY (id);

ALTER TABLE ONLY watchdog_checkpoints
    ADD CONSTRAINT watchdog_checkpoints_pkey PRIMARY KEY (kind);

CREATE INDEX api_keys_tenant ON api_keys USING btree (tenant, created_at, id);

CREATE INDEX audit_log_tenant ON audit_log USING btree (tenant, id);

CREATE INDEX campaign_recipients_recipient ON campaign_recipients USING btree (recipient) WHERE (params IS NOT NULL);

CREATE INDEX campaigns_draft ON campaigns USING btree (draft_expires_at, id) WHERE (state = 'DRAFT'::text);

CREATE UNIQUE INDEX campaigns_key ON campaigns USING btree (tenant, idempotency_key);

CREATE INDEX campaigns_running ON campaigns USING btree (started_at, id) WHERE (state = 'RUNNING'::text);

CREATE INDEX consent_history_recipient ON consent_history USING btree (tenant, recipient, id);

CREATE UNIQUE INDEX deliveries_message_id ON deliveries USING btree (message_id) WHERE (message_id IS NOT NULL);

CREATE INDEX deliveries_parked ON deliveries USING btree (updated_at, message_id) WHERE (state = 'PARKED'::text);

CREATE INDEX deliveries_retry_wait ON deliveries USING btree (next_attempt_at, message_id) WHERE (state = 'RETRY_WAIT'::text);

CREATE INDEX deliveries_sending ON deliveries USING btree (claimed_at) WHERE (state = 'SENDING'::text);

CREATE INDEX deliveries_unknown ON deliveries USING btree (provider, message_id) WHERE (state = 'UNKNOWN'::text);

CREATE UNIQUE INDEX delivery_attempts_message_attempt ON delivery_attempts USING btree (message_id, attempt);

CREATE INDEX event_keys_lease ON event_keys USING btree (lease_until);

CREATE INDEX event_keys_taken_over ON event_keys USING btree (taken_at) WHERE (taken_from IS NOT NULL);

CREATE INDEX idempotency_keys_expiry ON idempotency_keys USING btree (expires_at);

CREATE INDEX inbox_items_tenant_created ON inbox_items USING btree (tenant, created_at);

CREATE UNIQUE INDEX notifications_dedup ON notifications USING btree (tenant, dedup_key) WHERE (dedup_key IS NOT NULL);

CREATE INDEX notifications_tenant_created ON notifications USING btree (tenant, created_at, id);

CREATE INDEX notifications_tenant_recipient_created ON notifications USING btree (tenant, recipient, created_at, id);

CREATE INDEX outbox_deferred ON outbox USING btree (lane, available_at) WHERE ((state = 'PENDING'::text) AND deferred);

CREATE INDEX outbox_expiring ON outbox USING btree (expires_at) WHERE ((state = 'PENDING'::text) AND (expires_at IS NOT NULL));

CREATE INDEX outbox_fair ON outbox USING btree (lane, tenant, scope, available_at, id) WHERE ((state = 'PENDING'::text) AND (NOT deferred));

CREATE INDEX outbox_leased ON outbox USING btree (claimed_until) WHERE (state = ANY (ARRAY['CLAIMED'::text, 'PUBLISHING'::text]));

CREATE INDEX outbox_published ON outbox USING btree (updated_at, message_id) WHERE (state = 'PUBLISHED'::text);

CREATE INDEX outbox_waiting ON outbox USING btree (available_at, message_id) WHERE (state = 'WAITING'::text);

CREATE INDEX parked_discards_message ON parked_discards USING btree (message_id);

CREATE TRIGGER audit_log_append_only BEFORE DELETE OR UPDATE ON audit_log FOR EACH ROW EXECUTE FUNCTION audit_log_refuse();

CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log FOR EACH STATEMENT EXECUTE FUNCTION audit_log_refuse();

CREATE TRIGGER campaign_count_delivery_insert AFTER INSERT ON deliveries FOR EACH ROW WHEN (((new.campaign_id IS NOT NULL) AND (new.state <> 'SENDING'::text))) EXECUTE FUNCTION campaign_count_delivery();

CREATE TRIGGER campaign_count_delivery_update AFTER UPDATE ON deliveries REFERENCING OLD TABLE AS before_change NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION campaign_count_deliveries();

CREATE TRIGGER campaign_count_outbox_insert BEFORE INSERT ON outbox FOR EACH ROW WHEN ((new.state = ANY (ARRAY['SKIPPED'::text, 'EXPIRED'::text, 'FAILED'::text]))) EXECUTE FUNCTION campaign_count_outbox();

CREATE TRIGGER campaign_count_outbox_update BEFORE UPDATE OF state ON outbox FOR EACH ROW WHEN (((old.state = ANY (ARRAY['SKIPPED'::text, 'EXPIRED'::text, 'FAILED'::text])) OR (new.state = ANY (ARRAY['SKIPPED'::text, 'EXPIRED'::text, 'FAILED'::text])))) EXECUTE FUNCTION campaign_count_outbox();

CREATE TRIGGER campaign_of_delivery BEFORE INSERT ON deliveries FOR EACH ROW WHEN (((new.campaign_id IS NULL) AND (new.state <> 'SENDING'::text))) EXECUTE FUNCTION campaign_of_delivery();

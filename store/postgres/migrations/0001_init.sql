-- herald schema, version 1 (PostgreSQL). Times are timestamptz taken from the
-- database server's clock (or the test clock the store was opened with).
-- Objects are created in the first schema of search_path.

-- The recipient's inbox and the source of truth for what was accepted.
-- params is json, not jsonb: it keeps the caller's bytes exactly (and accepts
-- \u0000, which jsonb refuses); cast to jsonb to query it.
CREATE TABLE notifications (
    id          text PRIMARY KEY,
    tenant      text NOT NULL,
    recipient   text NOT NULL,
    event_id    text NOT NULL,
    kind        text NOT NULL,
    lane        text NOT NULL,
    params      json NOT NULL,
    dedup_key   text,
    send_at     timestamptz,
    expires_at  timestamptz,
    created_at  timestamptz NOT NULL
);
CREATE UNIQUE INDEX notifications_dedup ON notifications (tenant, dedup_key) WHERE dedup_key IS NOT NULL;

-- One row per planned send. Written only by the dispatcher after intake.
-- A queue table: rows are updated several times each, so autovacuum is told
-- to visit it early, before dead index entries slow the claim's index scan.
CREATE TABLE outbox (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    notification_id text NOT NULL REFERENCES notifications (id),
    message_id      text NOT NULL UNIQUE,
    tenant          text NOT NULL,
    lane            text NOT NULL,
    channel         text NOT NULL,
    state           text NOT NULL,
    available_at    timestamptz NOT NULL,
    expires_at      timestamptz,
    attempts        integer NOT NULL DEFAULT 0,
    token           bigint NOT NULL DEFAULT 0,
    claimed_by      text,
    claimed_until   timestamptz,
    last_reason     text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL
) WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
-- The claim walks this index in order and stops after LIMIT rows.
CREATE INDEX outbox_due ON outbox (lane, available_at, id) WHERE state = 'PENDING';
CREATE INDEX outbox_leased ON outbox (claimed_until) WHERE state IN ('CLAIMED', 'PUBLISHING');
CREATE INDEX outbox_expiring ON outbox (expires_at) WHERE state = 'PENDING' AND expires_at IS NOT NULL;
CREATE INDEX outbox_notification ON outbox (notification_id);

-- The sender's table. The partial unique index on message_id is the last
-- guard against a second send: the claim is INSERT … ON CONFLICT (message_id)
-- WHERE message_id IS NOT NULL DO NOTHING, and only the inserter calls the
-- provider.
CREATE TABLE deliveries (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id      text NOT NULL,
    notification_id text NOT NULL,
    tenant          text NOT NULL,
    channel         text NOT NULL,
    provider        text NOT NULL DEFAULT '',
    state           text NOT NULL,
    reason          text NOT NULL DEFAULT '',
    attempts        integer NOT NULL DEFAULT 0,
    claimed_by      text,
    claimed_at      timestamptz,
    next_attempt_at timestamptz,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL
);
CREATE UNIQUE INDEX deliveries_message_id ON deliveries (message_id) WHERE message_id IS NOT NULL;
CREATE INDEX deliveries_sending ON deliveries (claimed_at) WHERE state = 'SENDING';

-- One row per provider call: who, when, how long, what class.
CREATE TABLE delivery_attempts (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id  text NOT NULL,
    attempt     integer NOT NULL,
    owner       text NOT NULL,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL,
    class       text NOT NULL,
    reason      text NOT NULL DEFAULT '',
    duration_ms bigint NOT NULL
);
CREATE INDEX delivery_attempts_message ON delivery_attempts (message_id);

CREATE TABLE idempotency_keys (
    tenant          text NOT NULL,
    key             text NOT NULL,
    request_hash    text NOT NULL,
    notification_id text NOT NULL,
    response        bytea NOT NULL,
    created_at      timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL,
    PRIMARY KEY (tenant, key)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);

CREATE TABLE profiles (
    tenant     text NOT NULL,
    recipient  text NOT NULL,
    data       jsonb NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, recipient)
);

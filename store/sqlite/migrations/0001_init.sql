-- herald schema, version 1 (SQLite). Times are Unix milliseconds.

-- The recipient's inbox and the source of truth for what was accepted.
CREATE TABLE notifications (
    id          TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL,
    recipient   TEXT NOT NULL,
    event_id    TEXT NOT NULL,
    kind        TEXT NOT NULL,
    lane        TEXT NOT NULL,
    params      TEXT NOT NULL,
    dedup_key   TEXT,
    send_at     INTEGER,
    expires_at  INTEGER,
    created_at  INTEGER NOT NULL
);
CREATE UNIQUE INDEX notifications_dedup ON notifications (tenant, dedup_key) WHERE dedup_key IS NOT NULL;

-- One row per planned send. Written only by the dispatcher after intake.
CREATE TABLE outbox (
    id              INTEGER PRIMARY KEY,
    notification_id TEXT NOT NULL REFERENCES notifications (id),
    message_id      TEXT NOT NULL UNIQUE,
    tenant          TEXT NOT NULL,
    lane            TEXT NOT NULL,
    channel         TEXT NOT NULL,
    state           TEXT NOT NULL,
    available_at    INTEGER NOT NULL,
    expires_at      INTEGER,
    attempts        INTEGER NOT NULL DEFAULT 0,
    token           INTEGER NOT NULL DEFAULT 0,
    claimed_by      TEXT,
    claimed_until   INTEGER,
    last_reason     TEXT NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);
CREATE INDEX outbox_due ON outbox (lane, available_at, id) WHERE state = 'PENDING';
CREATE INDEX outbox_leased ON outbox (claimed_until) WHERE state IN ('CLAIMED', 'PUBLISHING');
CREATE INDEX outbox_expiring ON outbox (expires_at) WHERE state = 'PENDING' AND expires_at IS NOT NULL;
CREATE INDEX outbox_notification ON outbox (notification_id);

-- One row per message_id; the unique key is the last guard against a second send.
CREATE TABLE deliveries (
    message_id      TEXT PRIMARY KEY,
    notification_id TEXT NOT NULL,
    tenant          TEXT NOT NULL,
    channel         TEXT NOT NULL,
    provider        TEXT NOT NULL DEFAULT '',
    state           TEXT NOT NULL,
    reason          TEXT NOT NULL DEFAULT '',
    attempts        INTEGER NOT NULL DEFAULT 0,
    claimed_by      TEXT,
    claimed_at      INTEGER,
    next_attempt_at INTEGER,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX deliveries_sending ON deliveries (claimed_at) WHERE state = 'SENDING';

-- One row per provider call: who, when, how long, what class.
CREATE TABLE delivery_attempts (
    id          INTEGER PRIMARY KEY,
    message_id  TEXT NOT NULL,
    attempt     INTEGER NOT NULL,
    owner       TEXT NOT NULL,
    started_at  INTEGER NOT NULL,
    finished_at INTEGER NOT NULL,
    class       TEXT NOT NULL,
    reason      TEXT NOT NULL DEFAULT '',
    duration_ms INTEGER NOT NULL
);
CREATE INDEX delivery_attempts_message ON delivery_attempts (message_id);

CREATE TABLE idempotency_keys (
    tenant          TEXT NOT NULL,
    key             TEXT NOT NULL,
    request_hash    TEXT NOT NULL,
    notification_id TEXT NOT NULL,
    response        BLOB NOT NULL,
    created_at      INTEGER NOT NULL,
    expires_at      INTEGER NOT NULL,
    PRIMARY KEY (tenant, key)
) WITHOUT ROWID;
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);

CREATE TABLE profiles (
    tenant     TEXT NOT NULL,
    recipient  TEXT NOT NULL,
    data       TEXT NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, recipient)
) WITHOUT ROWID;

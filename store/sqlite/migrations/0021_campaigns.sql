-- Campaigns (store.Campaigns, DESIGN §8); see the PostgreSQL migration of
-- the same number. channels is one JSON array of [channel, fallback step]
-- pairs here.
CREATE TABLE campaigns (
    id              TEXT PRIMARY KEY,
    tenant          TEXT NOT NULL,
    kind            TEXT NOT NULL,
    lane            TEXT NOT NULL,
    channels        TEXT NOT NULL,
    params          TEXT NOT NULL,
    send_at         INTEGER,
    state           TEXT NOT NULL,
    total           INTEGER NOT NULL DEFAULT 0,
    enqueued        INTEGER NOT NULL DEFAULT 0,
    fanout_seq      INTEGER NOT NULL DEFAULT 0,
    idempotency_key TEXT NOT NULL,
    request_hash    TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    started_at      INTEGER,
    ended_at        INTEGER
);
CREATE UNIQUE INDEX campaigns_key ON campaigns (tenant, idempotency_key);
CREATE INDEX campaigns_running ON campaigns (started_at, id) WHERE state = 'RUNNING';

-- seq is the table's rowid: increasing, so it orders the fan-out.
CREATE TABLE campaign_recipients (
    seq             INTEGER PRIMARY KEY,
    campaign_id     TEXT NOT NULL,
    recipient       TEXT NOT NULL,
    notification_id TEXT NOT NULL,
    params          TEXT,
    UNIQUE (campaign_id, recipient)
);
CREATE INDEX campaign_recipients_seq ON campaign_recipients (campaign_id, seq);

ALTER TABLE notifications ADD COLUMN campaign_id TEXT; -- not indexed: see the PostgreSQL migration

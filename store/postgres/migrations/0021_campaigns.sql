-- Campaigns (store.Campaigns, DESIGN §8): one kind sent to many recipients.
-- A campaign row holds what every one of its notifications shares, fixed
-- when it was created (the kind's lane, channels and chain, so a catalog
-- change later does not change a campaign under way), its state and its
-- counters: total (recipients added) and enqueued (recipients fanned out),
-- each maintained by the write that changes it, never a count(*).
-- fanout_seq is the fan-out's cursor: every recipient with seq at or below
-- it has its notification, written in the same transaction that moved it.
CREATE TABLE campaigns (
    id              text PRIMARY KEY,
    tenant          text NOT NULL,
    kind            text NOT NULL,
    lane            text NOT NULL,
    channels        text[] NOT NULL,
    steps           integer[] NOT NULL,
    params          json NOT NULL,
    send_at         timestamptz,
    state           text NOT NULL,
    total           bigint NOT NULL DEFAULT 0,
    enqueued        bigint NOT NULL DEFAULT 0,
    fanout_seq      bigint NOT NULL DEFAULT 0,
    idempotency_key text NOT NULL,
    request_hash    text NOT NULL,
    created_at      timestamptz NOT NULL,
    started_at      timestamptz,
    ended_at        timestamptz
);
CREATE UNIQUE INDEX campaigns_key ON campaigns (tenant, idempotency_key);
-- The fan-out's look-up of campaigns with work left.
CREATE INDEX campaigns_running ON campaigns (started_at, id) WHERE state = 'RUNNING';

-- One row per recipient: added once (a page repeated adds nothing), with
-- its notification's id fixed at that moment and its params override
-- already merged over the campaign's (NULL: the campaign's own). seq orders
-- the fan-out.
CREATE TABLE campaign_recipients (
    campaign_id     text NOT NULL,
    seq             bigint GENERATED ALWAYS AS IDENTITY,
    recipient       text NOT NULL,
    notification_id text NOT NULL,
    params          json,
    PRIMARY KEY (campaign_id, seq),
    UNIQUE (campaign_id, recipient)
);

-- A notification's campaign (NULL off one), for a person reading the
-- table. Not indexed: the counts and the cancel find a campaign's sends
-- through its recipients' notification ids, and one more index entry per
-- notification would slow the fan-out.
ALTER TABLE notifications ADD COLUMN campaign_id text;

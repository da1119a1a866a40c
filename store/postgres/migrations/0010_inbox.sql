-- The recipient inbox (DESIGN §4, store.Inbox).
--
-- inbox_items holds one row per item intake wrote with a notification of a
-- kind that lists the channel inbox: the text chosen for the recipient's
-- language (title, body, the locale it came from), and the item's read and
-- archive marks. seq numbers one recipient's items 1, 2, 3… in commit
-- order; message_id (the notification's id + ".inbox") is the item's public
-- id. The primary key serves the feed (newest first, a backward scan), a
-- stream's replay (oldest first after a seq) and the recount;
-- inbox_items_tenant_created the retention purge (a tenant's oldest first,
-- whatever the other tenants keep); the unique message_id the marks by id.
--
-- inbox_counters holds one row per recipient with an item: the last seq
-- handed out and the count of items neither read nor archived. Intake bumps
-- the row in the transaction that inserts the item, so its lock orders one
-- recipient's inserts (seq order is commit order); every write that changes
-- the unread set takes the row's lock first and changes unread by exactly
-- the rows it changed (store.Inbox); InboxRecount recomputes it.
CREATE TABLE inbox_items (
    tenant          text NOT NULL,
    recipient       text NOT NULL,
    seq             bigint NOT NULL,
    message_id      text NOT NULL UNIQUE,
    notification_id text NOT NULL,
    kind            text NOT NULL,
    title           text NOT NULL,
    body            text NOT NULL,
    locale          text NOT NULL,
    created_at      timestamptz NOT NULL,
    read_at         timestamptz,
    archived_at     timestamptz,
    PRIMARY KEY (tenant, recipient, seq)
);
CREATE INDEX inbox_items_tenant_created ON inbox_items (tenant, created_at);

CREATE TABLE inbox_counters (
    tenant    text NOT NULL,
    recipient text NOT NULL,
    seq       bigint NOT NULL,
    unread    bigint NOT NULL,
    PRIMARY KEY (tenant, recipient)
);

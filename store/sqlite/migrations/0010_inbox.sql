-- The recipient inbox (DESIGN §4, store.Inbox). Times are Unix milliseconds.
--
-- inbox_items holds one row per item intake wrote with a notification of a
-- kind that lists the channel inbox: the text chosen for the recipient's
-- language (title, body, the locale it came from), and the item's read and
-- archive marks. seq numbers one recipient's items 1, 2, 3… in commit
-- order; message_id (the notification's id + ".inbox") is the item's public
-- id. The primary key serves the feed (newest first), a stream's replay
-- (oldest first after a seq) and the badge's recount;
-- inbox_items_tenant_created the retention purge (a tenant's oldest first,
-- whatever the other tenants keep); message_id the marks by id.
--
-- inbox_counters holds one row per recipient with an item: the last seq
-- handed out and the count of items neither read nor archived. Every write
-- that changes that set changes unread in the same transaction, by exactly
-- the rows it changed (store.Inbox); InboxRecount recomputes it.
CREATE TABLE inbox_items (
    tenant          TEXT NOT NULL,
    recipient       TEXT NOT NULL,
    seq             INTEGER NOT NULL,
    message_id      TEXT NOT NULL UNIQUE,
    notification_id TEXT NOT NULL,
    kind            TEXT NOT NULL,
    title           TEXT NOT NULL,
    body            TEXT NOT NULL,
    locale          TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    read_at         INTEGER,
    archived_at     INTEGER,
    PRIMARY KEY (tenant, recipient, seq)
) WITHOUT ROWID;
CREATE INDEX inbox_items_tenant_created ON inbox_items (tenant, created_at);

CREATE TABLE inbox_counters (
    tenant    TEXT NOT NULL,
    recipient TEXT NOT NULL,
    seq       INTEGER NOT NULL,
    unread    INTEGER NOT NULL,
    PRIMARY KEY (tenant, recipient)
) WITHOUT ROWID;

-- The feed walks the notifications' own per-recipient index instead of an
-- index of its own (SQLite only; PostgreSQL keeps inbox_items' key).
--
-- inbox_items was keyed (tenant, recipient, seq): every item landed on its
-- recipient's page of that key, one more scattered page written per create
-- on SQLite's single writer, which cost an inbox notification's intake a
-- tenth of its time. An item is now written in commit order (seq is its
-- rowid, AUTOINCREMENT so never reused, VACUUM or not), next to the items
-- before it, and the feed, the replay after a seq and the recount walk
-- notifications_tenant_recipient_created, the index the read API's listing
-- by recipient already keeps, and join each notification's item by
-- message_id (its notification's id + '.inbox'). A create keeps that walk
-- in seq order: a notification with an inbox item sorts after every earlier
-- notification of its recipient in (created_at, id) (inbox.go,
-- qNotificationInsertFeed).
--
-- A seq is now unique over the file, no longer 1, 2, 3... per recipient.
-- Items keep their order: they are numbered again here in the feed's order,
-- above every old number (inbox_legacy.ceiling), and each counter's seq
-- becomes its newest item's (or, with every item gone, the file's newest,
-- so no later item takes a seq it handed out). An item keeps its old number
-- in legacy_seq, so the feed cursors and stream event ids apps hold from
-- before, which name old numbers (at most the ceiling), still name the same
-- places (inbox.go, inboxSeq).
CREATE TABLE inbox_items_by_seq (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant          TEXT NOT NULL,
    recipient       TEXT NOT NULL,
    message_id      TEXT NOT NULL UNIQUE,
    notification_id TEXT NOT NULL,
    kind            TEXT NOT NULL,
    title           TEXT NOT NULL,
    body            TEXT NOT NULL,
    locale          TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    read_at         INTEGER,
    archived_at     INTEGER,
    legacy_seq      INTEGER
);
CREATE TABLE inbox_legacy (ceiling INTEGER NOT NULL);
INSERT INTO inbox_legacy (ceiling) SELECT coalesce(max(seq), 0) FROM inbox_items;
INSERT INTO sqlite_sequence (name, seq) SELECT 'inbox_items_by_seq', ceiling FROM inbox_legacy;
INSERT INTO inbox_items_by_seq (tenant, recipient, message_id, notification_id, kind, title, body, locale, created_at, read_at, archived_at, legacy_seq)
SELECT i.tenant, i.recipient, i.message_id, i.notification_id, i.kind, i.title, i.body, i.locale, i.created_at, i.read_at, i.archived_at, i.seq
FROM inbox_items i LEFT JOIN notifications n ON n.id = i.notification_id
ORDER BY coalesce(n.created_at, i.created_at), n.id, i.tenant, i.recipient, i.seq;
DROP TABLE inbox_items;
ALTER TABLE inbox_items_by_seq RENAME TO inbox_items;
CREATE INDEX inbox_items_tenant_created ON inbox_items (tenant, created_at);
CREATE INDEX inbox_items_legacy ON inbox_items (tenant, recipient, legacy_seq) WHERE legacy_seq IS NOT NULL;
-- Each new item is counted on its recipient's counter by this trigger,
-- in the item's own statement: one statement from Go instead of two, about
-- a tenth of what an item adds to a create (BenchmarkInboxCreate).
CREATE TRIGGER inbox_items_count AFTER INSERT ON inbox_items BEGIN
    INSERT INTO inbox_counters (tenant, recipient, seq, unread) VALUES (NEW.tenant, NEW.recipient, NEW.seq, 1)
    ON CONFLICT (tenant, recipient) DO UPDATE SET seq = excluded.seq, unread = unread + 1;
END;
UPDATE inbox_counters SET seq = coalesce(
    (SELECT max(i.seq) FROM inbox_items i WHERE i.tenant = inbox_counters.tenant AND i.recipient = inbox_counters.recipient),
    (SELECT max(seq) FROM inbox_items), (SELECT ceiling FROM inbox_legacy));

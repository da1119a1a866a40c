-- An inbox item is its notification's row (DESIGN §4: "the notification row
-- is the user's inbox entry"), and the feed walks the notifications' own
-- per-recipient index (SQLite only; PostgreSQL keeps inbox_items).
--
-- inbox_items was a table of its own keyed (tenant, recipient, seq): every
-- item cost a create one more row, one more statement and one more
-- scattered page on its recipient's part of that key, on SQLite's single
-- writer, which made an inbox notification's intake 16-22% slower than one
-- without. The item's words and marks are now columns of the notification
-- row intake writes anyway, in the same statement, and the feed, the replay
-- after a seq, the heads and the recount walk
-- notifications_tenant_recipient_created, which the read API's listing by
-- recipient already keeps. A create keeps that walk in seq order: a
-- notification with an item sorts after every notification its recipient
-- has in (created_at, id) (inbox.go, qNotificationInsertFeed).
--
-- inbox_seq numbers the items of the file in commit order, from
-- inbox_sequence (one row, moved on by the trigger below); NULL: no item,
-- or one purged or erased (its words and marks are cleared with it).
--
-- Items keep their order: they are numbered again here in the feed's order,
-- above every old number (inbox_legacy.ceiling), and each counter's seq
-- becomes its newest item's (or, with every item gone, the file's newest,
-- so no later item takes a seq it handed out). Feed cursors and stream event
-- ids that apps hold from before name old numbers (at most the ceiling):
-- inbox_legacy_items maps them to the new ones, so they still name the
-- same items (inbox.go, inboxSeq).
ALTER TABLE notifications ADD COLUMN inbox_seq INTEGER;
ALTER TABLE notifications ADD COLUMN inbox_title TEXT;
ALTER TABLE notifications ADD COLUMN inbox_body TEXT;
ALTER TABLE notifications ADD COLUMN inbox_locale TEXT;
ALTER TABLE notifications ADD COLUMN inbox_read_at INTEGER;
ALTER TABLE notifications ADD COLUMN inbox_archived_at INTEGER;

-- The ceiling is the highest old number handed out: a counter's seq, which
-- may be above every item left (the newer ones purged or erased), as well
-- as the items'.
CREATE TABLE inbox_legacy (ceiling INTEGER NOT NULL);
INSERT INTO inbox_legacy (ceiling)
SELECT max(coalesce((SELECT max(seq) FROM inbox_items), 0), coalesce((SELECT max(seq) FROM inbox_counters), 0));

CREATE TABLE inbox_legacy_items (
    tenant     TEXT NOT NULL,
    recipient  TEXT NOT NULL,
    legacy_seq INTEGER NOT NULL,
    seq        INTEGER NOT NULL,
    PRIMARY KEY (tenant, recipient, legacy_seq)
) WITHOUT ROWID;
INSERT INTO inbox_legacy_items (tenant, recipient, legacy_seq, seq)
SELECT i.tenant, i.recipient, i.seq,
       (SELECT ceiling FROM inbox_legacy) + row_number() OVER (ORDER BY n.created_at, n.id)
FROM inbox_items i JOIN notifications n ON n.id = i.notification_id;
UPDATE notifications SET inbox_seq = l.seq, inbox_title = i.title, inbox_body = i.body, inbox_locale = i.locale,
    inbox_read_at = i.read_at, inbox_archived_at = i.archived_at
FROM inbox_items i JOIN inbox_legacy_items l ON l.tenant = i.tenant AND l.recipient = i.recipient AND l.legacy_seq = i.seq
WHERE notifications.id = i.notification_id;

CREATE TABLE inbox_sequence (seq INTEGER NOT NULL);
INSERT INTO inbox_sequence (seq)
SELECT max(coalesce((SELECT max(inbox_seq) FROM notifications), 0), (SELECT ceiling FROM inbox_legacy));

UPDATE inbox_counters SET seq = coalesce(
    (SELECT max(n.inbox_seq) FROM notifications n WHERE n.tenant = inbox_counters.tenant AND n.recipient = inbox_counters.recipient),
    (SELECT seq FROM inbox_sequence));

DROP TABLE inbox_items;

-- The cursor's seek (an item by its seq) and the purge's pick (a tenant's
-- oldest items): each only over rows with an item.
CREATE INDEX notifications_inbox_seq ON notifications (inbox_seq) WHERE inbox_seq IS NOT NULL;
CREATE INDEX notifications_inbox_created ON notifications (tenant, created_at) WHERE inbox_seq IS NOT NULL;

-- A new item moves the sequence on and is counted unread on its
-- recipient's counter, in the notification's own statement.
CREATE TRIGGER notifications_inbox_count AFTER INSERT ON notifications WHEN NEW.inbox_seq IS NOT NULL BEGIN
    UPDATE inbox_sequence SET seq = NEW.inbox_seq;
    INSERT INTO inbox_counters (tenant, recipient, seq, unread) VALUES (NEW.tenant, NEW.recipient, NEW.inbox_seq, 1)
    ON CONFLICT (tenant, recipient) DO UPDATE SET seq = excluded.seq, unread = unread + 1;
END;

-- The items as a table, for operators and tests: every row that holds an
-- item or any of its words.
CREATE VIEW inbox_items AS
SELECT inbox_seq AS seq, tenant, recipient, id || '.inbox' AS message_id, id AS notification_id, kind,
       inbox_title AS title, inbox_body AS body, inbox_locale AS locale, created_at,
       inbox_read_at AS read_at, inbox_archived_at AS archived_at
FROM notifications
WHERE inbox_seq IS NOT NULL OR inbox_title IS NOT NULL OR inbox_body IS NOT NULL;

-- The inbox send is the notification's inbox_at, not two rows (package
-- store, inboxsend.go): intake wrote an outbox row DONE (reason STORED) and
-- a delivery STORED for every inbox item, rows nothing ever claimed or
-- changed, which were about two fifths of the WAL an inbox create added.
-- inbox_at is the inbox's place among the kind's channels, 1-based (0: no
-- inbox item); the read API, receipts and reconciliation show it as those
-- rows were shown, in that place among the planned sends. The rows written
-- before are turned into it here: the place is one more than the channels
-- (a push's devices one) whose rows came before the inbox's. A column with
-- a constant default rewrites nothing.
ALTER TABLE notifications ADD COLUMN inbox_at smallint NOT NULL DEFAULT 0;
UPDATE notifications n SET inbox_at = 1 + (
    SELECT count(DISTINCT split_part(o.channel, '.', 1))
    FROM outbox o
    WHERE o.notification_id = i.notification_id AND o.id < i.id)
FROM outbox i
WHERE i.notification_id = n.id AND i.channel = 'inbox';
DELETE FROM deliveries WHERE channel = 'inbox';
DELETE FROM outbox WHERE channel = 'inbox';

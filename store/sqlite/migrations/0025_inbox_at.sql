-- The inbox send is the notification's inbox_at, not two rows (package
-- store, inboxsend.go): intake wrote an outbox row DONE (reason STORED) and
-- a delivery STORED for every inbox item, rows nothing ever claimed or
-- changed, which cost an inbox create about a fifth of what it added.
-- inbox_at is the inbox's place among the kind's channels, 1-based (0: no
-- inbox item); the read API, receipts and reconciliation show it as those
-- rows were shown, in that place among the planned sends. The rows written
-- before are turned into it here: the place is one more than the channels
-- (a push's devices one) whose rows came before the inbox's.
ALTER TABLE notifications ADD COLUMN inbox_at INTEGER NOT NULL DEFAULT 0;
UPDATE notifications SET inbox_at = 1 + (
    SELECT count(DISTINCT CASE WHEN instr(o.channel, '.') > 0 THEN substr(o.channel, 1, instr(o.channel, '.') - 1) ELSE o.channel END)
    FROM outbox o JOIN outbox i ON i.notification_id = o.notification_id AND i.channel = 'inbox'
    WHERE o.notification_id = notifications.id AND o.id < i.id)
WHERE id IN (SELECT notification_id FROM outbox WHERE channel = 'inbox');
DELETE FROM deliveries WHERE channel = 'inbox';
DELETE FROM outbox WHERE channel = 'inbox';

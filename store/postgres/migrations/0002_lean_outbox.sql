-- A leaner outbox: every outbox row is written several times (insert, claim,
-- settle), and each version adds an entry to every index, so each index costs
-- on the hottest path.
--
-- message_id is derived from (notification_id, channel), so one unique index
-- on that pair guarantees what the unique message_id did and serves the
-- look-ups by notification that outbox_notification served.
--
-- The foreign key to notifications is dropped: an outbox row is only ever
-- written in the same statement as its notification (intake, Enqueue), and
-- the per-row check cost about a tenth of intake's time.
ALTER TABLE outbox DROP CONSTRAINT outbox_message_id_key;
ALTER TABLE outbox DROP CONSTRAINT outbox_notification_id_fkey;
DROP INDEX outbox_notification;
CREATE UNIQUE INDEX outbox_notification_channel ON outbox (notification_id, channel);

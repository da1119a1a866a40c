-- The outbox row's key becomes (notification_id, channel), which the unique
-- index outbox_notification_channel already guaranteed and which every
-- look-up by notification used. The surrogate key on id cost one more index
-- entry per row version, and every outbox row is written at least three
-- times (insert, claim, settle or mark); the fenced writes now find rows
-- through (notification_id, channel) instead. id stays as a plain column:
-- the claim's tie-break order and the job's outbox_id.
ALTER TABLE outbox DROP CONSTRAINT outbox_pkey;
ALTER TABLE outbox ADD CONSTRAINT outbox_pkey PRIMARY KEY USING INDEX outbox_notification_channel;

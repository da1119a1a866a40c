-- Leaner deliveries: a delivery row is inserted once and rewritten once per
-- attempt, and each attempt adds a log row; every index costs an entry per
-- row version on the hottest path. Nothing looks a delivery or an attempt up
-- by its surrogate id, so both ids (and their primary-key indexes) go:
-- a delivery is identified by the partial unique index on message_id, the
-- claim's guard; attempts are found through delivery_attempts_message.
--
-- Neither table has a primary key afterwards. A database that publishes
-- them for logical replication (or CDC) sets REPLICA IDENTITY FULL on both;
-- nothing else needs one.
ALTER TABLE deliveries DROP COLUMN id;
ALTER TABLE delivery_attempts DROP COLUMN id;

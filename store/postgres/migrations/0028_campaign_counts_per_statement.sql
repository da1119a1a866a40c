-- A campaign's counts move once per statement, not once per delivery row:
-- a merged result write settles a few dozen of a campaign's sends in one
-- UPDATE, and the row trigger of migration 27 ran a PL/pgSQL call and an
-- upsert of the same counter row for each of them (a third of the
-- statement's time in a campaign's drain). A statement-level trigger sees
-- every delivery the statement changed (its transition tables), and moves
-- each campaign's counts by their sum in one upsert.
--
-- What it counts is what campaign_count_delivery counted, row by row: a
-- campaign delivery whose state changed moves from its old outcome to its
-- new one, or, at its first outcome, from its outbox row's counted one
-- (taking the row's campaign_counted mark off). A statement-level trigger
-- runs for every UPDATE of deliveries, a campaign's or not, so it looks
-- for a campaign row first and ends there if there is none.
CREATE FUNCTION campaign_count_deliveries() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM changed WHERE campaign_id IS NOT NULL) THEN
        RETURN NULL;
    END IF;
    WITH c AS (
        SELECT n.campaign_id, n.notification_id, n.channel,
               campaign_outcome(NULL, o.state) AS was, campaign_outcome(NULL, n.state) AS now
        FROM changed n JOIN before_change o ON o.message_id = n.message_id
        WHERE n.campaign_id IS NOT NULL AND o.state IS DISTINCT FROM n.state
    ),
    s AS (
        UPDATE outbox x SET campaign_counted = false
        FROM c
        WHERE c.was IS NULL AND x.notification_id = c.notification_id AND x.channel = c.channel AND x.campaign_counted
        RETURNING x.notification_id, x.channel, campaign_outcome(x.state, NULL) AS was
    ),
    m AS (
        SELECT c.campaign_id, coalesce(s.was, c.was) AS was, c.now
        FROM c LEFT JOIN s ON s.notification_id = c.notification_id AND s.channel = c.channel
    )
    INSERT INTO campaign_counts AS k (campaign_id, slot, sent, suppressed, failed, unknown)
    SELECT campaign_id, pg_backend_pid(),
           sum((now IS NOT DISTINCT FROM 'sent')::int - (was IS NOT DISTINCT FROM 'sent')::int),
           sum((now IS NOT DISTINCT FROM 'suppressed')::int - (was IS NOT DISTINCT FROM 'suppressed')::int),
           sum((now IS NOT DISTINCT FROM 'failed')::int - (was IS NOT DISTINCT FROM 'failed')::int),
           sum((now IS NOT DISTINCT FROM 'unknown')::int - (was IS NOT DISTINCT FROM 'unknown')::int)
    FROM m WHERE was IS DISTINCT FROM now
    GROUP BY campaign_id
    ORDER BY campaign_id
    ON CONFLICT (campaign_id, slot) DO UPDATE
    SET sent = k.sent + excluded.sent, suppressed = k.suppressed + excluded.suppressed,
        failed = k.failed + excluded.failed, unknown = k.unknown + excluded.unknown;
    RETURN NULL;
END
$$;

DROP TRIGGER campaign_count_delivery_update ON deliveries;
CREATE TRIGGER campaign_count_delivery_update AFTER UPDATE ON deliveries
REFERENCING OLD TABLE AS before_change NEW TABLE AS changed
FOR EACH STATEMENT EXECUTE FUNCTION campaign_count_deliveries();

-- A campaign's send counts (sent, suppressed, failed, unknown) are kept,
-- not counted when read, as on PostgreSQL (its migration 27 says why and
-- how). Every write that changes how a campaign's send ended changes its
-- counts in the same transaction, through the triggers below. A send's
-- outcome is its delivery's state when it has a delivery row, else its
-- outbox row's:
--   delivery  PROVIDER_ACCEPTED, DELIVERED → sent; SUPPRESSED → suppressed;
--             PERMANENT_FAILURE, RETRY_EXHAUSTED → failed; UNKNOWN → unknown
--   outbox    SKIPPED → suppressed; EXPIRED, FAILED → failed
-- and none while it is under way. One row per campaign: the single writer
-- orders every update of it.
CREATE TABLE campaign_counts (
    campaign_id TEXT PRIMARY KEY,
    sent        INTEGER NOT NULL DEFAULT 0,
    suppressed  INTEGER NOT NULL DEFAULT 0,
    failed      INTEGER NOT NULL DEFAULT 0,
    unknown     INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- A delivery inserted: its outcome, less its outbox row's (one that ended
-- unsent before it). Only when either is an outcome: a claim (SENDING)
-- over a row under way writes nothing here.
CREATE TRIGGER campaign_count_delivery_insert AFTER INSERT ON deliveries
WHEN (NEW.state IN ('PROVIDER_ACCEPTED', 'DELIVERED', 'SUPPRESSED', 'PERMANENT_FAILURE', 'RETRY_EXHAUSTED', 'UNKNOWN')
      OR (SELECT state FROM outbox WHERE message_id = NEW.message_id) IN ('SKIPPED', 'EXPIRED', 'FAILED'))
     AND (SELECT campaign_id FROM notifications WHERE id = NEW.notification_id) IS NOT NULL
BEGIN
    INSERT INTO campaign_counts (campaign_id, sent, suppressed, failed, unknown)
    SELECT n.campaign_id,
           NEW.state IN ('PROVIDER_ACCEPTED', 'DELIVERED'),
           (NEW.state = 'SUPPRESSED') - coalesce(o.state = 'SKIPPED', 0),
           (NEW.state IN ('PERMANENT_FAILURE', 'RETRY_EXHAUSTED')) - coalesce(o.state IN ('EXPIRED', 'FAILED'), 0),
           NEW.state = 'UNKNOWN'
    FROM notifications n LEFT JOIN outbox o ON o.message_id = NEW.message_id
    WHERE n.id = NEW.notification_id
    ON CONFLICT (campaign_id) DO UPDATE SET sent = sent + excluded.sent, suppressed = suppressed + excluded.suppressed,
        failed = failed + excluded.failed, unknown = unknown + excluded.unknown;
END;

-- A delivery's state changed: its new outcome, less its old.
CREATE TRIGGER campaign_count_delivery_update AFTER UPDATE OF state ON deliveries
WHEN ((OLD.state IN ('PROVIDER_ACCEPTED', 'DELIVERED')) IS NOT (NEW.state IN ('PROVIDER_ACCEPTED', 'DELIVERED'))
      OR (OLD.state = 'SUPPRESSED') IS NOT (NEW.state = 'SUPPRESSED')
      OR (OLD.state IN ('PERMANENT_FAILURE', 'RETRY_EXHAUSTED')) IS NOT (NEW.state IN ('PERMANENT_FAILURE', 'RETRY_EXHAUSTED'))
      OR (OLD.state = 'UNKNOWN') IS NOT (NEW.state = 'UNKNOWN'))
     AND (SELECT campaign_id FROM notifications WHERE id = NEW.notification_id) IS NOT NULL
BEGIN
    INSERT INTO campaign_counts (campaign_id, sent, suppressed, failed, unknown)
    SELECT n.campaign_id,
           (NEW.state IN ('PROVIDER_ACCEPTED', 'DELIVERED')) - (OLD.state IN ('PROVIDER_ACCEPTED', 'DELIVERED')),
           (NEW.state = 'SUPPRESSED') - (OLD.state = 'SUPPRESSED'),
           (NEW.state IN ('PERMANENT_FAILURE', 'RETRY_EXHAUSTED')) - (OLD.state IN ('PERMANENT_FAILURE', 'RETRY_EXHAUSTED')),
           (NEW.state = 'UNKNOWN') - (OLD.state = 'UNKNOWN')
    FROM notifications n WHERE n.id = NEW.notification_id
    ON CONFLICT (campaign_id) DO UPDATE SET sent = sent + excluded.sent, suppressed = suppressed + excluded.suppressed,
        failed = failed + excluded.failed, unknown = unknown + excluded.unknown;
END;

-- An outbox row's state changed while it has no delivery: its new
-- outcome, less its old.
CREATE TRIGGER campaign_count_outbox_update AFTER UPDATE OF state ON outbox
WHEN ((OLD.state = 'SKIPPED') IS NOT (NEW.state = 'SKIPPED')
      OR (OLD.state IN ('EXPIRED', 'FAILED')) IS NOT (NEW.state IN ('EXPIRED', 'FAILED')))
     AND NOT EXISTS (SELECT 1 FROM deliveries WHERE message_id = NEW.message_id)
     AND (SELECT campaign_id FROM notifications WHERE id = NEW.notification_id) IS NOT NULL
BEGIN
    INSERT INTO campaign_counts (campaign_id, suppressed, failed)
    SELECT n.campaign_id, (NEW.state = 'SKIPPED') - (OLD.state = 'SKIPPED'),
           (NEW.state IN ('EXPIRED', 'FAILED')) - (OLD.state IN ('EXPIRED', 'FAILED'))
    FROM notifications n WHERE n.id = NEW.notification_id
    ON CONFLICT (campaign_id) DO UPDATE SET suppressed = suppressed + excluded.suppressed, failed = failed + excluded.failed;
END;

-- An outbox row written ended (a chain step written SKIPPED).
CREATE TRIGGER campaign_count_outbox_insert AFTER INSERT ON outbox
WHEN NEW.state IN ('SKIPPED', 'EXPIRED', 'FAILED')
     AND NOT EXISTS (SELECT 1 FROM deliveries WHERE message_id = NEW.message_id)
     AND (SELECT campaign_id FROM notifications WHERE id = NEW.notification_id) IS NOT NULL
BEGIN
    INSERT INTO campaign_counts (campaign_id, suppressed, failed)
    SELECT n.campaign_id, NEW.state = 'SKIPPED', NEW.state IN ('EXPIRED', 'FAILED')
    FROM notifications n WHERE n.id = NEW.notification_id
    ON CONFLICT (campaign_id) DO UPDATE SET suppressed = suppressed + excluded.suppressed, failed = failed + excluded.failed;
END;

-- The counts of the campaigns there are, as the count read them.
INSERT INTO campaign_counts (campaign_id, sent, suppressed, failed, unknown)
SELECT cr.campaign_id,
       coalesce(sum(d.state IN ('PROVIDER_ACCEPTED', 'DELIVERED')), 0),
       coalesce(sum(d.state = 'SUPPRESSED' OR (d.state IS NULL AND o.state = 'SKIPPED')), 0),
       coalesce(sum(d.state IN ('PERMANENT_FAILURE', 'RETRY_EXHAUSTED') OR (d.state IS NULL AND o.state IN ('EXPIRED', 'FAILED'))), 0),
       coalesce(sum(d.state = 'UNKNOWN'), 0)
FROM campaign_recipients cr
JOIN outbox o ON o.notification_id = cr.notification_id
LEFT JOIN deliveries d ON d.message_id = o.message_id
GROUP BY cr.campaign_id;

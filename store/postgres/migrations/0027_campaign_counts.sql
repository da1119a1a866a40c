-- A campaign's send counts (sent, suppressed, failed, unknown) are kept,
-- not counted when read: GET /v1/campaigns/{id} counted its sends through
-- three index probes per recipient, seconds for a million.
--
-- Every write that changes how a campaign's send ended changes its counts
-- in the same transaction, through the triggers below, whichever process
-- or build makes it (the sender's claims and results, a cancel, the
-- sweeps, reconciliation, the parked-message tools, an erasure, a fallback
-- chain's moves). A send's outcome is its delivery's state when it has a
-- delivery row, else its outbox row's (campaign_outcome, as the count it
-- replaces read them), so:
--   a delivery inserted    its outcome, less its outbox row's
--   a delivery's state     its new outcome, less its old
--   an outbox row's state  its new outcome, less its old, while it has no delivery
--   an outbox row inserted its outcome (a chain step written SKIPPED)
-- Deletions (retention) leave the counts as they were.
--
-- One counter row per campaign and PostgreSQL backend (slot: the backend's
-- pid): no two transactions in progress update the same row, so the
-- counts add no lock wait and no deadlock between senders; a read sums a
-- campaign's rows (one per connection that ever counted for it).
-- Nothing writes a delivery or an outbox row while this runs: the counts
-- taken at its end and the triggers take over at the same point.
LOCK TABLE deliveries, outbox IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE campaign_counts (
    campaign_id text NOT NULL,
    slot        integer NOT NULL,
    sent        bigint NOT NULL DEFAULT 0,
    suppressed  bigint NOT NULL DEFAULT 0,
    failed      bigint NOT NULL DEFAULT 0,
    unknown     bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (campaign_id, slot)
);

-- campaign_outcome is how one send ended: 'sent', 'suppressed', 'failed',
-- 'unknown', or NULL while it is under way.
CREATE FUNCTION campaign_outcome(outbox_state text, delivery_state text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE
    WHEN delivery_state IS NULL THEN CASE
        WHEN outbox_state = 'SKIPPED' THEN 'suppressed'
        WHEN outbox_state IN ('EXPIRED', 'FAILED') THEN 'failed' END
    WHEN delivery_state IN ('PROVIDER_ACCEPTED', 'DELIVERED') THEN 'sent'
    WHEN delivery_state = 'SUPPRESSED' THEN 'suppressed'
    WHEN delivery_state IN ('PERMANENT_FAILURE', 'RETRY_EXHAUSTED') THEN 'failed'
    WHEN delivery_state = 'UNKNOWN' THEN 'unknown' END
$$;

-- campaign_count moves one send of the campaign from outcome was to
-- outcome now.
CREATE FUNCTION campaign_count(campaign text, was text, now text) RETURNS void
LANGUAGE sql AS $$
INSERT INTO campaign_counts AS k (campaign_id, slot, sent, suppressed, failed, unknown)
VALUES (campaign, pg_backend_pid(),
        (now IS NOT DISTINCT FROM 'sent')::int - (was IS NOT DISTINCT FROM 'sent')::int,
        (now IS NOT DISTINCT FROM 'suppressed')::int - (was IS NOT DISTINCT FROM 'suppressed')::int,
        (now IS NOT DISTINCT FROM 'failed')::int - (was IS NOT DISTINCT FROM 'failed')::int,
        (now IS NOT DISTINCT FROM 'unknown')::int - (was IS NOT DISTINCT FROM 'unknown')::int)
ON CONFLICT (campaign_id, slot) DO UPDATE
SET sent = k.sent + excluded.sent, suppressed = k.suppressed + excluded.suppressed,
    failed = k.failed + excluded.failed, unknown = k.unknown + excluded.unknown
$$;

CREATE FUNCTION campaign_count_delivery() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    c text;
    was text;
BEGIN
    SELECT campaign_id INTO c FROM notifications WHERE id = NEW.notification_id;
    IF c IS NULL THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        SELECT campaign_outcome(o.state, NULL) INTO was FROM outbox o
        WHERE o.notification_id = NEW.notification_id AND o.channel = NEW.channel;
    ELSE
        was := campaign_outcome(NULL, OLD.state);
    END IF;
    IF was IS DISTINCT FROM campaign_outcome(NULL, NEW.state) THEN
        PERFORM campaign_count(c, was, campaign_outcome(NULL, NEW.state));
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION campaign_count_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    c text;
BEGIN
    SELECT campaign_id INTO c FROM notifications WHERE id = NEW.notification_id;
    IF c IS NULL OR EXISTS (SELECT 1 FROM deliveries WHERE message_id = NEW.message_id) THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        PERFORM campaign_count(c, NULL, campaign_outcome(NEW.state, NULL));
    ELSE
        PERFORM campaign_count(c, campaign_outcome(OLD.state, NULL), campaign_outcome(NEW.state, NULL));
    END IF;
    RETURN NULL;
END
$$;

-- The WHEN clauses keep the functions off the writes that cannot change
-- an outcome (most of them: an outbox row's claims and marks, a delivery's
-- retries); a delivery's insert runs it always, since its outbox row may
-- have ended unsent before it.
CREATE TRIGGER campaign_count_delivery_insert AFTER INSERT ON deliveries
FOR EACH ROW EXECUTE FUNCTION campaign_count_delivery();
CREATE TRIGGER campaign_count_delivery_update AFTER UPDATE OF state ON deliveries
FOR EACH ROW WHEN (campaign_outcome(NULL, OLD.state) IS DISTINCT FROM campaign_outcome(NULL, NEW.state))
EXECUTE FUNCTION campaign_count_delivery();
CREATE TRIGGER campaign_count_outbox_insert AFTER INSERT ON outbox
FOR EACH ROW WHEN (NEW.state IN ('SKIPPED', 'EXPIRED', 'FAILED'))
EXECUTE FUNCTION campaign_count_outbox();
CREATE TRIGGER campaign_count_outbox_update AFTER UPDATE OF state ON outbox
FOR EACH ROW WHEN (campaign_outcome(OLD.state, NULL) IS DISTINCT FROM campaign_outcome(NEW.state, NULL))
EXECUTE FUNCTION campaign_count_outbox();

-- The counts of the campaigns there are, as the count read them.
INSERT INTO campaign_counts (campaign_id, slot, sent, suppressed, failed, unknown)
SELECT cr.campaign_id, 0,
       count(*) FILTER (WHERE x.outcome = 'sent'), count(*) FILTER (WHERE x.outcome = 'suppressed'),
       count(*) FILTER (WHERE x.outcome = 'failed'), count(*) FILTER (WHERE x.outcome = 'unknown')
FROM campaign_recipients cr
JOIN outbox o ON o.notification_id = cr.notification_id
LEFT JOIN deliveries d ON d.message_id = o.message_id
CROSS JOIN LATERAL (SELECT campaign_outcome(o.state, d.state) AS outcome) x
WHERE x.outcome IS NOT NULL
GROUP BY cr.campaign_id;

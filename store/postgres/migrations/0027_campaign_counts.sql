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
--   a delivery's first outcome  its outcome, less its outbox row's if that
--                               was counted (campaign_counted)
--   a delivery's state          its new outcome, less its old
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
LOCK TABLE deliveries, outbox IN ACCESS EXCLUSIVE MODE;

CREATE TABLE campaign_counts (
    campaign_id text COLLATE "C" NOT NULL,
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
-- outcome now. PL/pgSQL, not SQL: a SQL function's INSERT is planned
-- afresh at every call (half a campaign's drain went there), a PL/pgSQL
-- one once per connection.
CREATE FUNCTION campaign_count(campaign text, was text, now text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO campaign_counts AS k (campaign_id, slot, sent, suppressed, failed, unknown)
    VALUES (campaign, pg_backend_pid(),
            (now IS NOT DISTINCT FROM 'sent')::int - (was IS NOT DISTINCT FROM 'sent')::int,
            (now IS NOT DISTINCT FROM 'suppressed')::int - (was IS NOT DISTINCT FROM 'suppressed')::int,
            (now IS NOT DISTINCT FROM 'failed')::int - (was IS NOT DISTINCT FROM 'failed')::int,
            (now IS NOT DISTINCT FROM 'unknown')::int - (was IS NOT DISTINCT FROM 'unknown')::int)
    ON CONFLICT (campaign_id, slot) DO UPDATE
    SET sent = k.sent + excluded.sent, suppressed = k.suppressed + excluded.suppressed,
        failed = k.failed + excluded.failed, unknown = k.unknown + excluded.unknown;
END
$$;

-- A delivery names its campaign (NULL off one), so that the triggers on a
-- delivery's writes run for a campaign's sends only: a look-up of the
-- notification's campaign in a trigger on every delivery write cost the
-- end-to-end path about 8% of its notifications/s. The claims, the hot
-- inserts, write it themselves (a key look-up in their statements); any
-- other insert (a decision, a cancel, an erasure, the parked tools: rare)
-- has it filled in by campaign_of_delivery. A delivery inserted SENDING
-- must name its campaign: every claim statement does.
ALTER TABLE deliveries ADD COLUMN campaign_id text COLLATE "C";
UPDATE deliveries d SET campaign_id = n.campaign_id FROM notifications n
WHERE n.id = d.notification_id AND n.campaign_id IS NOT NULL;

CREATE FUNCTION campaign_of_delivery() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    SELECT campaign_id INTO NEW.campaign_id FROM notifications WHERE id = NEW.notification_id;
    RETURN NEW;
END
$$;

-- An outbox row of a campaign's that ended unsent while it had no
-- delivery (SKIPPED, EXPIRED, FAILED) is counted by its outcome, and says
-- so (outbox.campaign_counted), so that a delivery it gets later (a late
-- copy of a message whose row FAILED after a lost confirm) takes the send
-- out of that count when the delivery's own outcome replaces it: the
-- claims, which insert every campaign delivery SENDING, then run no
-- trigger of their own.
ALTER TABLE outbox ADD COLUMN campaign_counted boolean NOT NULL DEFAULT false;

-- campaign_count_delivery counts a campaign's delivery's new outcome, less
-- its old one, or, at its first outcome, less its outbox row's if that was
-- counted (taking the mark off the row, so it is taken out once): one
-- statement, since it runs for every send of a campaign.
CREATE FUNCTION campaign_count_delivery() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    now text := campaign_outcome(NULL, NEW.state);
    was text := CASE WHEN TG_OP = 'UPDATE' THEN campaign_outcome(NULL, OLD.state) END;
BEGIN
    WITH s AS (
        UPDATE outbox o SET campaign_counted = false
        WHERE was IS NULL AND o.notification_id = NEW.notification_id AND o.channel = NEW.channel AND o.campaign_counted
        RETURNING campaign_outcome(o.state, NULL) AS was
    ),
    d AS (SELECT coalesce((SELECT s.was FROM s), was) AS was)
    INSERT INTO campaign_counts AS k (campaign_id, slot, sent, suppressed, failed, unknown)
    SELECT NEW.campaign_id, pg_backend_pid(),
           (now IS NOT DISTINCT FROM 'sent')::int - (d.was IS NOT DISTINCT FROM 'sent')::int,
           (now IS NOT DISTINCT FROM 'suppressed')::int - (d.was IS NOT DISTINCT FROM 'suppressed')::int,
           (now IS NOT DISTINCT FROM 'failed')::int - (d.was IS NOT DISTINCT FROM 'failed')::int,
           (now IS NOT DISTINCT FROM 'unknown')::int - (d.was IS NOT DISTINCT FROM 'unknown')::int
    FROM d WHERE d.was IS DISTINCT FROM now
    ON CONFLICT (campaign_id, slot) DO UPDATE
    SET sent = k.sent + excluded.sent, suppressed = k.suppressed + excluded.suppressed,
        failed = k.failed + excluded.failed, unknown = k.unknown + excluded.unknown;
    RETURN NULL;
END
$$;

-- A BEFORE trigger: it marks the row it counts (campaign_counted).
CREATE FUNCTION campaign_count_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    c text;
    was text;
BEGIN
    SELECT campaign_id INTO c FROM notifications WHERE id = NEW.notification_id;
    IF c IS NULL OR EXISTS (SELECT 1 FROM deliveries WHERE message_id = NEW.message_id) THEN
        RETURN NEW;
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.campaign_counted THEN
        was := campaign_outcome(OLD.state, NULL);
    END IF;
    IF was IS NOT DISTINCT FROM campaign_outcome(NEW.state, NULL) THEN
        RETURN NEW;
    END IF;
    PERFORM campaign_count(c, was, campaign_outcome(NEW.state, NULL));
    NEW.campaign_counted := campaign_outcome(NEW.state, NULL) IS NOT NULL;
    RETURN NEW;
END
$$;

-- The WHEN clauses keep the functions off the writes that cannot change
-- a campaign's outcome: every delivery off a campaign, a claim (SENDING:
-- no outcome; an outbox row's counted outcome waits for the delivery's
-- first), and an outbox row's claims and marks. They are plain column
-- tests, evaluated on every write of the two tables: with a call of
-- campaign_outcome in them the outbox's claims and marks alone cost the
-- Go API's end to end 4%. The functions check the outcome themselves.
CREATE TRIGGER campaign_of_delivery BEFORE INSERT ON deliveries
FOR EACH ROW WHEN (NEW.campaign_id IS NULL AND NEW.state <> 'SENDING')
EXECUTE FUNCTION campaign_of_delivery();
CREATE TRIGGER campaign_count_delivery_insert AFTER INSERT ON deliveries
FOR EACH ROW WHEN (NEW.campaign_id IS NOT NULL AND NEW.state <> 'SENDING')
EXECUTE FUNCTION campaign_count_delivery();
CREATE TRIGGER campaign_count_delivery_update AFTER UPDATE OF state ON deliveries
FOR EACH ROW WHEN (NEW.campaign_id IS NOT NULL AND OLD.state IS DISTINCT FROM NEW.state)
EXECUTE FUNCTION campaign_count_delivery();
CREATE TRIGGER campaign_count_outbox_insert BEFORE INSERT ON outbox
FOR EACH ROW WHEN (NEW.state IN ('SKIPPED', 'EXPIRED', 'FAILED'))
EXECUTE FUNCTION campaign_count_outbox();
CREATE TRIGGER campaign_count_outbox_update BEFORE UPDATE OF state ON outbox
FOR EACH ROW WHEN (OLD.state IN ('SKIPPED', 'EXPIRED', 'FAILED') OR NEW.state IN ('SKIPPED', 'EXPIRED', 'FAILED'))
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
UPDATE outbox o SET campaign_counted = true
FROM notifications n
WHERE n.id = o.notification_id AND n.campaign_id IS NOT NULL AND o.state IN ('SKIPPED', 'EXPIRED', 'FAILED')
  AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.message_id = o.message_id);

-- A campaign's counts: a decision beside a relay's held claim and the
-- relay's fail of the same row are counted once between them.
--
-- Migration 36 has a delivery inserted with an outcome (a decision: a
-- consent or quiet-hours suppression, a cancel) lock its outbox row while
-- a claimer or relay holds it, CLAIMED or PUBLISHING, so that the relay's
-- fail of a row whose publish went unconfirmed and the decision on a copy
-- of its message wait for each other. The relay's held claim
-- (store/postgres/hold.go) came after: until it commits, every other
-- transaction sees its rows PENDING, and the decision passed the row
-- unlocked. Left PUBLISHING by the hold's commit and failed by the relay
-- while the decision was still open, the send was counted suppressed and
-- failed: the fail found no delivery (not committed), the decision no
-- mark (not yet written).
--
-- The decision now takes a PENDING row FOR KEY SHARE, a lock the hold's
-- own write does not conflict with, so it does not wait for the hold (a
-- first version locked the row FOR NO KEY UPDATE and so waited for the
-- hold's commit, through the broker's confirms: with a campaign whose
-- sends were all decisions, on the RabbitMQ transport, it raised the
-- transactional p99 beside it by about a sixth and slowed the campaign by
-- a tenth). The count of a held row's end unsent (campaign_count_outbox,
-- from CLAIMED or PUBLISHING: the relay's fail) first locks the row FOR
-- UPDATE, which waits for such a share: the fail then finds the decision's
-- delivery and counts nothing. (Other ends come from PENDING or WAITING:
-- an expiry takes its rows FOR UPDATE SKIP LOCKED, so never one a
-- decision shares, and no copy of a WAITING row exists; locking at each
-- of them cost an expiry of 50,000 campaign rows a tenth more.) The other
-- order is migration 36's: a fail that came first holds the row, a
-- decision's lock of a PUBLISHING row waits for it and then takes its
-- count out. A claim skips a row a decision shares for that moment (SKIP
-- LOCKED), as it skips any locked row.
--
-- A send's result needs no such lock: it reads a row PENDING only while
-- the hold is open, the fail comes after the hold's commit, and by then
-- the send's delivery, inserted SENDING before the call, is committed: the
-- fail finds it and counts nothing.

CREATE OR REPLACE FUNCTION campaign_count_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    c text;
    was text;
BEGIN
    SELECT campaign_id INTO c FROM notifications WHERE id = NEW.notification_id;
    IF c IS NULL THEN
        RETURN NEW;
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.state IN ('CLAIMED', 'PUBLISHING') THEN
        PERFORM 1 FROM outbox WHERE notification_id = NEW.notification_id AND channel = NEW.channel FOR UPDATE;
    END IF;
    IF EXISTS (SELECT 1 FROM deliveries WHERE message_id = NEW.message_id) THEN
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

CREATE OR REPLACE FUNCTION campaign_count_deliveries_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM inserted WHERE campaign_id IS NOT NULL AND state <> 'SENDING') THEN
        RETURN NULL;
    END IF;
    PERFORM 1 FROM (
        SELECT i.notification_id, i.channel FROM inserted i
        WHERE i.campaign_id IS NOT NULL AND i.state <> 'SENDING'
        ORDER BY i.notification_id, i.channel
    ) b
    CROSS JOIN LATERAL (
        SELECT 1 FROM outbox y
        WHERE y.notification_id = b.notification_id AND y.channel = b.channel
          AND y.state IN ('CLAIMED', 'PUBLISHING')
        LIMIT 1
        FOR NO KEY UPDATE
    ) h;
    PERFORM 1 FROM (
        SELECT i.notification_id, i.channel FROM inserted i
        WHERE i.campaign_id IS NOT NULL AND i.state <> 'SENDING'
        ORDER BY i.notification_id, i.channel
    ) b
    CROSS JOIN LATERAL (
        SELECT 1 FROM outbox y
        WHERE y.notification_id = b.notification_id AND y.channel = b.channel
          AND y.state = 'PENDING'
        LIMIT 1
        FOR KEY SHARE
    ) h;
    WITH unmarked AS (
        UPDATE outbox x SET campaign_counted = false
        FROM (
            SELECT i.campaign_id, h.tid
            FROM inserted i
            CROSS JOIN LATERAL (
                SELECT y.ctid AS tid FROM outbox y
                WHERE y.notification_id = i.notification_id AND y.channel = i.channel AND y.campaign_counted
                LIMIT 1
            ) h
            WHERE i.campaign_id IS NOT NULL AND i.state <> 'SENDING'
        ) k
        WHERE x.ctid = k.tid AND x.campaign_counted
        RETURNING k.campaign_id, campaign_outcome(x.state, NULL) AS outcome
    ),
    moves AS (
        SELECT campaign_id, campaign_outcome(NULL, state) AS outcome, 1 AS n FROM inserted
        WHERE campaign_id IS NOT NULL AND state <> 'SENDING'
        UNION ALL
        SELECT campaign_id, outcome, -1 FROM unmarked
    ),
    sums AS (
        SELECT campaign_id,
               coalesce(sum(n) FILTER (WHERE outcome = 'sent'), 0) AS sent,
               coalesce(sum(n) FILTER (WHERE outcome = 'suppressed'), 0) AS suppressed,
               coalesce(sum(n) FILTER (WHERE outcome = 'failed'), 0) AS failed,
               coalesce(sum(n) FILTER (WHERE outcome = 'unknown'), 0) AS unknown
        FROM moves WHERE outcome IS NOT NULL
        GROUP BY campaign_id
    )
    INSERT INTO campaign_counts AS k (campaign_id, slot, sent, suppressed, failed, unknown)
    SELECT campaign_id, pg_backend_pid(), sent, suppressed, failed, unknown
    FROM sums WHERE sent <> 0 OR suppressed <> 0 OR failed <> 0 OR unknown <> 0
    ORDER BY campaign_id
    ON CONFLICT (campaign_id, slot) DO UPDATE
    SET sent = k.sent + excluded.sent, suppressed = k.suppressed + excluded.suppressed,
        failed = k.failed + excluded.failed, unknown = k.unknown + excluded.unknown;
    RETURN NULL;
END
$$;

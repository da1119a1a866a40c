-- A campaign's counts: a decision inserted beside a relay's held claim
-- waits for it, as migration 36 has it wait for a claim that is not held.
--
-- Migration 36 has a delivery inserted with an outcome (a decision: a
-- consent or quiet-hours suppression, a cancel) lock its outbox row while
-- a claimer or relay holds it, CLAIMED or PUBLISHING, so that the relay's
-- fail of a row whose publish went unconfirmed and the decision on a copy
-- of its message are counted once between them. The relay's held claim
-- (store/postgres/hold.go) came after: until it commits, every other
-- transaction sees its rows PENDING, and the decision passed the row
-- unlocked. Left PUBLISHING by the hold's commit and failed by the relay
-- while the decision was still open, the send was counted suppressed and
-- failed: the fail found no delivery (not committed), the decision no
-- mark (not yet written).
--
-- The decision now locks a PENDING row too. A held one makes it wait for
-- the hold's commit; it then takes the row as the hold left it, if
-- PUBLISHING (not confirmed, for the relay's fenced writes), and the
-- relay's fail waits for the decision and finds its delivery. A PENDING
-- row nobody holds is locked at once. Nothing that holds a row waits for
-- a decision's lock (claims skip locked rows; a hold's commit writes only
-- its own), so the wait ends with the hold.
--
-- A send's result needs no such lock: it reads a row PENDING only while
-- the hold is open, the fail comes after the hold's commit, and by then
-- the send's delivery, inserted SENDING before the call, is committed: the
-- fail finds it and counts nothing.

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
          AND y.state IN ('CLAIMED', 'PUBLISHING', 'PENDING')
        LIMIT 1
        FOR NO KEY UPDATE
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

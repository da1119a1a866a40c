-- A campaign's counts move once per INSERT statement of deliveries, as
-- migration 28 made them for UPDATE. The row trigger of migration 27 ran
-- for each delivery inserted with an outcome, and each run upserted the
-- same counter row (the campaign's, this connection's slot): a cancel
-- inserts a SUPPRESSED decision for every waiting send of the campaign in
-- one statement, and PostgreSQL finds a row updated again in the same
-- transaction by following the chain of all its versions from the index,
-- so the n-th upsert walked n versions. A cancel of 50,000 waiting sends
-- took 16 s, of 200,000 7.6 minutes; a million would have held its locks
-- for hours. The statement trigger sums the inserted rows' outcomes per
-- campaign and upserts once.
--
-- It does for the inserted rows what campaign_count_delivery (migration
-- 36) did for each: the outbox row held by a claimer or relay is locked
-- first, in key order, so a concurrent fail and the decision count the
-- send once; an outbox row counted already (ended unsent) takes its
-- count out and its mark off. A claim inserts SENDING, no outcome: the
-- function stops at once for a statement with no campaign delivery that
-- has one, as migration 28's does. As there, the transition table is
-- never joined to another by a plan that depends on its size: the outbox
-- row is a LATERAL look-up by key, written by its ctid.
CREATE FUNCTION campaign_count_deliveries_insert() RETURNS trigger LANGUAGE plpgsql AS $$
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

DROP TRIGGER campaign_count_delivery_insert ON deliveries;
CREATE TRIGGER campaign_count_deliveries_insert AFTER INSERT ON deliveries
REFERENCING NEW TABLE AS inserted
FOR EACH STATEMENT EXECUTE FUNCTION campaign_count_deliveries_insert();

-- A campaign's counts: a send's first outcome on its delivery waits for a
-- write ending its outbox row unsent at the same moment, and the
-- deliveries an INSERT statement writes move the counts once, as an
-- UPDATE's have since migration 28.
--
-- The race. The relay fails a row whose publish went unconfirmed
-- (FAILED, counted by the row's outcome and marked campaign_counted)
-- while a copy of its message may still be in the broker, be consumed
-- and sent; under READ COMMITTED the two
-- transactions did not see each other: the fail found no delivery, the
-- result write found no mark (not yet committed), and the send was
-- counted failed and sent (or failed and suppressed, a decision beside
-- the fail). Now the delivery's side first locks the outbox row while a
-- claimer or relay holds it (CLAIMED, PUBLISHING: the states its fenced
-- writes end unsent, qOutboxFail, qOutboxComplete); then either the fail
-- committed first, and the next statement's snapshot sees its mark and
-- takes it out, or the fail waits for the delivery's transaction and its
-- trigger then finds the delivery and counts nothing. A row in any other
-- state is not locked: settled (DONE with the db transport's result
-- write, in the same statement; PUBLISHED), or one no holder's write
-- ends (a campaign's PENDING and WAITING rows have no deadline to expire
-- by, and a cancel's decisions beside them take no lock).
--
-- A result write of the RabbitMQ transport may come before the relay's
-- mark of its row has committed (PUBLISHING still): it then waits for
-- the mark. One statement locks its rows in the order of their keys, as
-- the relay's mark does (OutboxMarkPublished sorts them), and the cancel
-- inserts its decisions in that order, so those never wait for each
-- other in a cycle; a pipeline batch of several such statements locks in
-- the batch's order, and should it meet a mark in a cycle, PostgreSQL
-- ends one of the two after deadlock_timeout: the batch is run again
-- statement by statement, or the mark's rows are published again after
-- their lease, and the copies are acked without a call.

CREATE OR REPLACE FUNCTION campaign_count_deliveries() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM changed WHERE campaign_id IS NOT NULL) THEN
        RETURN NULL;
    END IF;
    PERFORM 1 FROM (
        SELECT b.notification_id, b.channel FROM before_change b
        WHERE b.campaign_id IS NOT NULL AND campaign_outcome(NULL, b.state) IS NULL
        ORDER BY b.notification_id, b.channel
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
            SELECT b.campaign_id, h.tid
            FROM before_change b
            CROSS JOIN LATERAL (
                SELECT y.ctid AS tid FROM outbox y
                WHERE y.notification_id = b.notification_id AND y.channel = b.channel AND y.campaign_counted
                LIMIT 1
            ) h
            WHERE b.campaign_id IS NOT NULL AND campaign_outcome(NULL, b.state) IS NULL
        ) k
        WHERE x.ctid = k.tid AND x.campaign_counted
        RETURNING k.campaign_id, campaign_outcome(x.state, NULL) AS outcome
    ),
    moves AS (
        SELECT campaign_id, campaign_outcome(NULL, state) AS outcome, 1 AS n FROM changed WHERE campaign_id IS NOT NULL
        UNION ALL
        SELECT campaign_id, campaign_outcome(NULL, state), -1 FROM before_change WHERE campaign_id IS NOT NULL
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

-- The inserts. Migration 27's row trigger ran for each delivery inserted
-- with an outcome, and each run upserted the same counter row (the
-- campaign's, this connection's slot): a cancel inserts a SUPPRESSED
-- decision for every waiting send of the campaign in one statement, and
-- PostgreSQL finds a row updated again in the same transaction by
-- following the chain of all its versions from the index, so the n-th
-- upsert walked n versions. A cancel of 50,000 waiting sends took 16 s,
-- of 200,000 7.6 minutes; a million would have held its locks for hours.
-- The statement trigger sums the inserted rows' outcomes per campaign and
-- upserts once, after the same lock and unmark as the update's. A claim
-- inserts SENDING, no outcome: the function stops at once for a
-- statement with no campaign delivery that has one, as the update's
-- does. Migration 27's row function is left unused.
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

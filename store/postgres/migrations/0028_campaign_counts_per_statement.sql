-- A campaign's counts move once per statement, not once per delivery row:
-- a merged result write settles a few dozen of a campaign's sends in one
-- UPDATE, and the row trigger of migration 27 ran a PL/pgSQL call and an
-- upsert of the same counter row for each of them (a third of the
-- statement's time in a campaign's drain). A statement-level trigger sees
-- every delivery the statement changed (its transition tables), and moves
-- each campaign's counts by their sum in one upsert.
--
-- It counts what campaign_count_delivery counted, without pairing each
-- row's old version with its new one: the statement's rows leave their
-- old outcomes (before_change) and take their new ones (changed), so a
-- row whose state did not change adds nothing. A row that leaves a state
-- with no outcome (SENDING, RETRY_WAIT, PARKED) takes its outbox row's
-- counted outcome out, and the row's campaign_counted mark off (a late
-- copy of a send whose outbox row had failed unsent: from its delivery's
-- next write on, its delivery's state is its outcome).
--
-- PL/pgSQL plans the statement once per backend, with the transition
-- tables' sizes of the first statement that ran it there. So no step of
-- it may depend on those sizes: the two tables are never joined (a plan
-- for one row joined them with a nested loop, n² in a later cancel's
-- rows: 75 s for 20,000), and an outbox row is found by a look-up of its
-- key per row (LATERAL, LIMIT 1) and written by its ctid, whatever the
-- plan thinks the tables hold.
--
-- A statement-level trigger runs for every UPDATE of deliveries, a
-- campaign's or not, so it looks for a campaign row first and ends there
-- if there is none.
CREATE FUNCTION campaign_count_deliveries() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM changed WHERE campaign_id IS NOT NULL) THEN
        RETURN NULL;
    END IF;
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

DROP TRIGGER campaign_count_delivery_update ON deliveries;
CREATE TRIGGER campaign_count_delivery_update AFTER UPDATE ON deliveries
REFERENCING OLD TABLE AS before_change NEW TABLE AS changed
FOR EACH STATEMENT EXECUTE FUNCTION campaign_count_deliveries();

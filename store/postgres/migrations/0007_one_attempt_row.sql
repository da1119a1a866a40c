-- One attempt-log row per attempt. A sender that retries its result write
-- after an answer it lost (the first write had committed) used to add a
-- second row for the same provider call; the insert now does nothing when
-- the attempt is logged already (ON CONFLICT on this index). Duplicates
-- already written are deleted, keeping the earliest (they were written from
-- the same call, so they say the same), and the index on message_id gives
-- way to a unique one on (message_id, attempt), which serves the attempt
-- list's order too.
DELETE FROM delivery_attempts
WHERE ctid IN (
    SELECT ctid FROM (
        SELECT ctid, row_number() OVER (PARTITION BY message_id, attempt ORDER BY started_at, finished_at, ctid) AS n
        FROM delivery_attempts
    ) d
    WHERE d.n > 1
);
DROP INDEX delivery_attempts_message;
CREATE UNIQUE INDEX delivery_attempts_message_attempt ON delivery_attempts (message_id, attempt);

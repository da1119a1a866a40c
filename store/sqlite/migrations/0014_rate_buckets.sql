-- The providers' call budgets shared by every herald process on the
-- database file (store.RateBuckets, package ratelimit): one token bucket
-- per provider, created by its first take. A take reads the row, refills
-- it by the time since updated_at and takes whole tokens in the writer's
-- transaction (BEGIN IMMEDIATE: one process at a time); last_grant and
-- last_free are that take's answer, as PostgreSQL keeps them. A
-- provider's 429 empties the row and sets paused_until: no process gets a
-- token before it, and after it the refill restarts at slow_factor of the
-- rate and climbs back to the full rate at recover_until. Times are Unix
-- milliseconds.
CREATE TABLE rate_buckets (
    provider      TEXT PRIMARY KEY,
    tokens        REAL NOT NULL,
    updated_at    INTEGER NOT NULL,
    paused_until  INTEGER,
    slow_factor   REAL NOT NULL DEFAULT 1,
    recover_until INTEGER,
    last_grant    INTEGER NOT NULL DEFAULT 0,
    last_free     INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- The providers' call budgets shared by every herald process on the
-- database (store.RateBuckets, package ratelimit): one token bucket per
-- provider, created by its first take. A take refills the row by the time
-- since updated_at (the server's clock) and takes whole tokens in one
-- UPDATE, whose row lock orders concurrent takes; last_grant and
-- last_free are that take's answer, kept so the statement can return it.
-- A provider's 429 empties the row and sets paused_until: no process gets
-- a token before it, and after it the refill restarts at slow_factor of the
-- rate and climbs back to the full rate at recover_until. A handful of
-- rows, each rewritten about every 50 ms while its provider is busy.
CREATE TABLE rate_buckets (
    provider      text PRIMARY KEY,
    tokens        double precision NOT NULL,
    updated_at    timestamptz NOT NULL,
    paused_until  timestamptz,
    slow_factor   double precision NOT NULL DEFAULT 1,
    recover_until timestamptz,
    last_grant    integer NOT NULL DEFAULT 0,
    last_free     integer NOT NULL DEFAULT 0
);

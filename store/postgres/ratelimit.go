package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/store"
)

// Rate buckets (package ratelimit): store.Bucket's arithmetic in SQL.
// Each take is one autocommitted UPDATE, run on the pool rather than the
// pipeline, so no other statement of a batch holds the row's lock with
// it. Its SET is a subquery on the row, so it is evaluated, "now"
// included, after any wait for the row's lock, and again on the version a
// concurrent take left. A row's factor at a time t (store.Bucket.Factor)
// is written out in both statements:
//
//	CASE WHEN paused_until IS NULL OR t >= recover_until THEN 1
//	     WHEN t <= paused_until THEN slow_factor
//	     ELSE the climb from slow_factor to 1 between the two END
const (
	// qBucketCreate makes a provider's row on its first take, full.
	// $1 now, $2 provider, $3 burst.
	qBucketCreate = `INSERT INTO rate_buckets (provider, tokens, updated_at)
VALUES ($2::text, $3::float8, coalesce($1::timestamptz, clock_timestamp()))
ON CONFLICT (provider) DO NOTHING`
	// qBucketTake refills the row to now (never back: a now before
	// updated_at refills nothing) from the later of updated_at and the
	// pause's end, by rate × elapsed × the mean of the factor at both
	// ends (the VALUES pair), capped at burst; then takes up to want whole
	// tokens, those above the reserve unless the take has priority.
	//
	// $1 now, $2 provider, $3 rate, $4 burst, $5 want, $6 reserve,
	// $7 priority.
	qBucketTake = `UPDATE rate_buckets b
SET (tokens, updated_at, last_grant, last_free) = (
    SELECT l.level - g.granted, t.now, g.granted, least(g.granted, a.above)
    FROM (SELECT greatest(b.updated_at, coalesce($1::timestamptz, clock_timestamp())) AS now) t
    CROSS JOIN LATERAL (SELECT greatest(b.updated_at, b.paused_until) AS since) s
    CROSS JOIN LATERAL (
        SELECT least($4::float8, b.tokens + $3::float8 * extract(epoch FROM greatest(s.since, t.now) - s.since)::float8 * avg(
            CASE WHEN b.paused_until IS NULL OR x.at >= b.recover_until THEN 1
                 WHEN x.at <= b.paused_until THEN b.slow_factor
                 ELSE b.slow_factor + (1 - b.slow_factor) * extract(epoch FROM x.at - b.paused_until)::float8
                      / extract(epoch FROM b.recover_until - b.paused_until)::float8
            END)) AS level
        FROM (VALUES (s.since), (greatest(s.since, t.now))) x(at)
    ) l
    CROSS JOIN LATERAL (SELECT greatest(0, floor(l.level - $6::float8))::int AS above) a
    CROSS JOIN LATERAL (SELECT least($5::int, CASE WHEN $7::bool THEN floor(l.level)::int ELSE a.above END) AS granted) g
)
WHERE b.provider = $2::text
RETURNING b.tokens, b.updated_at, b.paused_until, b.slow_factor, b.recover_until, b.last_grant, b.last_free`
	// qBucketSlow empties the row and pauses it until now + $3; the
	// refill then restarts at half the factor the row had (at least $5)
	// and climbs back over $4. A row still paused keeps its factor and
	// pauses until the later end. A provider with no row gets one.
	//
	// $1 now, $2 provider, $3 pause, $4 recovery, $5 the factor's floor.
	qBucketSlow = `INSERT INTO rate_buckets AS b (provider, tokens, updated_at, paused_until, slow_factor, recover_until)
SELECT $2::text, 0, t.now, t.now + $3::interval, greatest($5::float8, 0.5), t.now + $3::interval + $4::interval
FROM (SELECT coalesce($1::timestamptz, clock_timestamp()) AS now) t
ON CONFLICT (provider) DO UPDATE SET (tokens, updated_at, paused_until, slow_factor, recover_until) = (
    SELECT 0, greatest(b.updated_at, t.now), p.until, p.factor, p.until + $4::interval
    FROM (SELECT coalesce($1::timestamptz, clock_timestamp()) AS now) t
    CROSS JOIN LATERAL (
        SELECT CASE WHEN t.now < b.paused_until THEN greatest(b.paused_until, t.now + $3::interval)
                    ELSE t.now + $3::interval END AS until,
               CASE WHEN t.now < b.paused_until THEN b.slow_factor
                    ELSE greatest($5::float8, (
                        CASE WHEN b.paused_until IS NULL OR t.now >= b.recover_until THEN 1
                             WHEN t.now <= b.paused_until THEN b.slow_factor
                             ELSE b.slow_factor + (1 - b.slow_factor) * extract(epoch FROM t.now - b.paused_until)::float8
                                  / extract(epoch FROM b.recover_until - b.paused_until)::float8
                        END) / 2) END AS factor
    ) p
)`
)

// BucketTake takes from p.Provider's bucket in one statement; a
// provider's first take makes its row first.
func (s *Store) BucketTake(ctx context.Context, p store.BucketTakeParams) (store.BucketGrant, error) {
	what := fmt.Sprintf("take from the rate bucket of %s", p.Provider)
	for range 2 {
		var b store.Bucket
		var paused, recover *time.Time
		var g store.BucketGrant
		err := s.pool.QueryRow(ctx, qBucketTake, s.now(), p.Provider, p.Rate, p.Burst, p.Want, p.Reserve, p.Priority).
			Scan(&b.Tokens, &b.UpdatedAt, &paused, &b.SlowFactor, &recover, &g.Granted, &g.Free)
		switch {
		case err == nil:
			b.PausedUntil, b.RecoverUntil = deref(paused), deref(recover)
			g.Wait = b.Wait(b.UpdatedAt, p)
			return g, nil
		case !errors.Is(err, pgx.ErrNoRows):
			return store.BucketGrant{}, s.fail(what, err)
		}
		if _, err := s.pool.Exec(ctx, qBucketCreate, s.now(), p.Provider, p.Burst); err != nil {
			return store.BucketGrant{}, s.fail(what+": create its row", err)
		}
	}
	return store.BucketGrant{}, fmt.Errorf("%s: its row is gone again", what)
}

// BucketSlow pauses p.Provider's bucket in one statement.
func (s *Store) BucketSlow(ctx context.Context, p store.BucketSlowParams) error {
	if _, err := s.pool.Exec(ctx, qBucketSlow, s.now(), p.Provider, p.For, p.Recover, store.BucketFactorFloor); err != nil {
		return s.fail(fmt.Sprintf("slow the rate bucket of %s", p.Provider), err)
	}
	return nil
}

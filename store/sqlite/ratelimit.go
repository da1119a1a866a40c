package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/heraldhq/herald/store"
)

// Rate buckets (package ratelimit). Each take or slow reads the row and
// writes it back in the writer's transaction, which holds the file's write
// lock (BEGIN IMMEDIATE), so no other process reads the row in between;
// the arithmetic is store.Bucket's. About twenty writes a second per busy
// provider and process: they run unprepared, like the receipts.
const (
	qBucketGet = `SELECT tokens, updated_at, paused_until, slow_factor, recover_until FROM rate_buckets WHERE provider = ?`
	qBucketPut = `INSERT INTO rate_buckets (provider, tokens, updated_at, paused_until, slow_factor, recover_until, last_grant, last_free)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (provider) DO UPDATE SET tokens = excluded.tokens, updated_at = excluded.updated_at,
    paused_until = excluded.paused_until, slow_factor = excluded.slow_factor, recover_until = excluded.recover_until,
    last_grant = excluded.last_grant, last_free = excluded.last_free`
)

// BucketTake takes from p.Provider's bucket; a provider's first take
// finds it full.
func (s *Store) BucketTake(ctx context.Context, p store.BucketTakeParams) (store.BucketGrant, error) {
	var g store.BucketGrant
	err := s.w.do(ctx, func(tx wtx) error {
		g = store.BucketGrant{}
		now := fromMs(s.now())
		b, err := bucketGet(tx, p.Provider, store.NewBucket(now, p.Burst))
		if err != nil {
			return err
		}
		b, g = b.Take(now, p)
		return bucketPut(tx, p.Provider, b, g)
	})
	if err != nil {
		return store.BucketGrant{}, fmt.Errorf("take from the rate bucket of %s: %w", p.Provider, err)
	}
	return g, nil
}

// BucketSlow pauses p.Provider's bucket.
func (s *Store) BucketSlow(ctx context.Context, p store.BucketSlowParams) error {
	err := s.w.do(ctx, func(tx wtx) error {
		now := fromMs(s.now())
		b, err := bucketGet(tx, p.Provider, store.NewBucket(now, 0))
		if err != nil {
			return err
		}
		return bucketPut(tx, p.Provider, b.Slowed(now, p), store.BucketGrant{})
	})
	if err != nil {
		return fmt.Errorf("slow the rate bucket of %s: %w", p.Provider, err)
	}
	return nil
}

// bucketGet reads provider's row, or returns fresh when it has none.
func bucketGet(tx wtx, provider string, fresh store.Bucket) (store.Bucket, error) {
	var b store.Bucket
	var updated int64
	var paused, recover sql.NullInt64
	err := tx.QueryRow(qBucketGet, provider).Scan(&b.Tokens, &updated, &paused, &b.SlowFactor, &recover)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fresh, nil
	case err != nil:
		return store.Bucket{}, fmt.Errorf("read the bucket: %w", err)
	}
	b.UpdatedAt = fromMs(updated)
	if paused.Valid {
		b.PausedUntil, b.RecoverUntil = fromMs(paused.Int64), fromMs(recover.Int64)
	}
	return b, nil
}

func bucketPut(tx wtx, provider string, b store.Bucket, g store.BucketGrant) error {
	var paused, recover any
	if !b.PausedUntil.IsZero() {
		paused, recover = ms(b.PausedUntil), ms(b.RecoverUntil)
	}
	if _, err := tx.Exec(qBucketPut, provider, b.Tokens, ms(b.UpdatedAt), paused, b.SlowFactor, recover, g.Granted, g.Free); err != nil {
		return fmt.Errorf("write the bucket: %w", err)
	}
	return nil
}

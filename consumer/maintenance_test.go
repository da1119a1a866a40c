package consumer_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/consumer"
	"github.com/heraldhq/herald/internal/testpg"
)

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(t.Context(), testpg.Schema(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// Several processes starting at once, then a restart.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() { errs <- consumer.Migrate(t.Context(), pool) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent Migrate: %v", err)
		}
	}
	if err := consumer.Migrate(t.Context(), pool); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	var n int
	err = pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_tables
WHERE schemaname = current_schema() AND tablename IN ('herald_consumed_events', 'herald_quarantined_events')`).Scan(&n)
	if err != nil || n != 2 {
		t.Fatalf("herald tables in the schema = %d, %v; want 2", n, err)
	}
}

func TestPrune(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	deliver := func(ev consumer.Event) consumer.Outcome {
		t.Helper()
		out, err := consumer.Process(ctx, b.pool, ev, func(ctx context.Context, tx pgx.Tx) error {
			return credit(ctx, pgxExec(tx), ev)
		})
		if err != nil {
			t.Fatalf("deliver %s: %v", ev.ID, err)
		}
		return out
	}
	old, recent := grantEvent("evt-old", "acc-1", 100), grantEvent("evt-recent", "acc-1", 10)
	deliver(old)
	deliver(recent)
	if _, err := b.pool.Exec(ctx, `UPDATE herald_consumed_events SET processed_at = now() - interval '40 days' WHERE event_id = 'evt-old'`); err != nil {
		t.Fatal(err)
	}
	// More old records than one batch, so Prune has to loop.
	if _, err := b.pool.Exec(ctx, `INSERT INTO herald_consumed_events (consumer, event_id, payload_hash, processed_at)
SELECT 'bulk', 'evt-' || i, 'h', now() - interval '31 days' FROM generate_series(1, 2500) AS i`); err != nil {
		t.Fatal(err)
	}
	// A quarantine row from a mismatch on the old event stays.
	changed := grantEvent("evt-old", "acc-1", 999)
	if _, err := consumer.Process(ctx, b.pool, changed, func(context.Context, pgx.Tx) error { return nil }); err == nil {
		t.Fatal("mismatch not reported")
	}

	if _, err := consumer.Prune(ctx, b.pool, 0); err == nil {
		t.Error("Prune(0) accepted: it would forget events still being redelivered")
	}
	n, err := consumer.Prune(ctx, b.pool, 30*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2501 {
		t.Errorf("pruned %d records, want 2501", n)
	}
	if got := b.records(t); got != 1 {
		t.Errorf("records left = %d, want 1 (the recent one)", got)
	}
	if got := b.count(t, `SELECT count(*) FROM herald_quarantined_events`); got != 1 {
		t.Errorf("quarantine rows = %d, want 1 (kept for review)", got)
	}
	if out := deliver(recent); out != consumer.Duplicate {
		t.Errorf("recent event again = %v, want duplicate", out)
	}
	// The hazard the retention note warns about: past its record, an event
	// is new again.
	if out := deliver(old); out != consumer.Applied {
		t.Errorf("pruned event again = %v, want applied", out)
	}
	if got := b.balance(t, "acc-1"); got != 210 {
		t.Errorf("balance = %d, want 210", got)
	}
}

package watchdog_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/postgres"
	"github.com/heraldhq/herald/watchdog"
)

// fillEnded fills a fresh schema with rows notifications, each with an
// outbox row PUBLISHED by the relay (the rabbitmq shape: every row ends
// PUBLISHED, so outbox_published holds them all, the largest set a find
// walks) and an ended delivery, spread over the last 30 days; plus 100
// retries waiting behind their PENDING outbox rows (owned: examined every
// round, never re-driven), whatever the size. It returns the store and the position of the
// last published row.
func fillEnded(b *testing.B, rows int) (*postgres.Store, store.UnownedPosition) {
	b.Helper()
	url := testpg.Schema(b)
	ctx := context.Background()
	s, err := postgres.Open(ctx, url, postgres.Options{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	start := time.Now()
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at)
SELECT 'ntf_' || lpad(g::text, 8, '0'), 't' || (g % 50), 'r' || g, 'e' || g, 'pay', 'transactional', '{}',
       now() - interval '30 days' + g * (interval '30 days' / $1::int)
FROM generate_series(1, $1::int) g`, []any{rows}},
		{`INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, token, created_at, updated_at)
SELECT id, id || '.webhook', tenant, lane, 'webhook', CASE WHEN substr(id, 5)::int % ($1::int / 100) = 7 THEN 'PENDING' ELSE 'PUBLISHED' END,
       created_at, 1, created_at, created_at + interval '50 ms'
FROM notifications`, []any{rows}},
		{`INSERT INTO deliveries (message_id, notification_id, tenant, channel, provider, state, reason, attempts, claimed_at, next_attempt_at, created_at, updated_at)
SELECT o.message_id, o.notification_id, o.tenant, 'webhook', 'sim',
       CASE WHEN o.state = 'PENDING' THEN 'RETRY_WAIT'
            ELSE (ARRAY['PROVIDER_ACCEPTED', 'PROVIDER_ACCEPTED', 'PROVIDER_ACCEPTED', 'SUPPRESSED', 'PERMANENT_FAILURE', 'UNKNOWN'])[1 + right(o.notification_id, 3)::int % 6] END,
       '', 1, o.created_at + interval '60 ms', CASE WHEN o.state = 'PENDING' THEN o.created_at END, o.created_at + interval '60 ms', o.created_at + interval '90 ms'
FROM outbox o`, nil},
		{`VACUUM ANALYZE notifications`, nil}, {`VACUUM ANALYZE outbox`, nil}, {`VACUUM ANALYZE deliveries`, nil},
	} {
		if _, err := conn.Exec(ctx, q.sql, q.args...); err != nil {
			b.Fatalf("%.60s…: %v", q.sql, err)
		}
	}
	var last store.UnownedPosition
	if err := conn.QueryRow(ctx, `SELECT updated_at, message_id FROM outbox WHERE state = 'PUBLISHED' ORDER BY updated_at DESC, message_id DESC LIMIT 1`).
		Scan(&last.At, &last.MessageID); err != nil {
		b.Fatal(err)
	}
	var waiting int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE state = 'RETRY_WAIT'`).Scan(&waiting); err != nil {
		b.Fatal(err)
	}
	b.Logf("filled %d ended deliveries and %d waiting retries in %s", rows, waiting, time.Since(start).Round(time.Second))
	return s, last
}

// BenchmarkRound times one watchdog round, every kind, on tables of 10,000
// and of 1,000,000 ended deliveries whose outbox rows are all PUBLISHED, in
// the steady state: the published checkpoint at the last row (each row is
// examined once, in the round after its grace passed). The aim on
// a million is 10 ms; the two sizes should cost the same.
func BenchmarkRound(b *testing.B) {
	for _, rows := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprintf("ended=%d", rows), func(b *testing.B) {
			s, last := fillEnded(b, rows)
			ctx := context.Background()
			if err := s.UnownedCheckpointSave(ctx, store.UnownedPublished, last); err != nil {
				b.Fatal(err)
			}
			wd := watchdog.New(watchdog.Config{Store: s, Broker: true, Logger: quiet})
			b.ResetTimer()
			for b.Loop() {
				r, err := wd.Round(ctx)
				if err != nil || len(r.Redriven) != 0 {
					b.Fatalf("round %+v (%v), want nothing moved", r, err)
				}
			}
		})
	}
}

// BenchmarkPublishedPageOnAMillionEndedDeliveries times one page of the
// published find from the start (no checkpoint yet: a first deployment on
// a full table, or reconciliation's count): 1,000 published rows examined,
// each with its delivery looked up. A round reads at most MaxPages such
// pages per kind.
func BenchmarkPublishedPageOnAMillionEndedDeliveries(b *testing.B) {
	s, _ := fillEnded(b, 1_000_000)
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		page, err := s.UnownedFind(ctx, store.UnownedFindParams{Kind: store.UnownedPublished, Grace: time.Hour, Limit: 1000})
		if err != nil || page.Examined != 1000 || len(page.Rows) != 0 {
			b.Fatalf("page examined %d, found %d (%v); want 1000 examined, none found", page.Examined, len(page.Rows), err)
		}
	}
}

package postgres

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/store"
)

// A queue table's statistics are usually stale: taken while few rows were
// leased, they make the partial index of leased rows look empty. The fenced
// writes must still be driven by the primary key, (notification_id,
// channel), or each one walks every live lease.
func TestFencedWritesUseThePrimaryKeyWithStaleStatistics(t *testing.T) {
	t.Parallel()
	url := testpg.Schema(t)
	ctx := context.Background()
	s, err := Open(ctx, url, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.pool.Exec(ctx, `INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at)
SELECT 'n' || g, 't', 'r', 'e' || g, 'k', 'transactional', '{}', now() FROM generate_series(1, 3000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, created_at, updated_at)
SELECT id, id || '.webhook', 't', 'transactional', 'webhook', 'PENDING', now(), now(), now() FROM notifications`); err != nil {
		t.Fatal(err)
	}
	// Deliveries that finished long ago: statistics taken now see no SENDING row.
	if _, err := s.pool.Exec(ctx, `INSERT INTO deliveries (message_id, notification_id, tenant, channel, state, attempts, created_at, updated_at)
SELECT id || '.sms', id, 't', 'sms', 'PROVIDER_ACCEPTED', 1, now(), now() FROM notifications`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `ANALYZE outbox; ANALYZE deliveries`); err != nil { // nothing leased yet
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `UPDATE deliveries SET state = 'SENDING', claimed_at = now()`); err != nil {
		t.Fatal(err)
	}
	rows, err := s.OutboxClaim(ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "relay", Limit: 3000, Lease: time.Hour, Publishing: true})
	if err != nil || len(rows) != 3000 {
		t.Fatalf("claimed %d (%v)", len(rows), err)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	for name, q := range map[string]struct {
		sql  string
		args []any
		// want are the indexes that must drive the statement.
		want []string
	}{
		"complete":  {qOutboxComplete, []any{nil, "DONE", "", rows[0].NotificationID, "webhook", rows[0].Fence.Token}, []string{"outbox_pkey"}},
		"retry":     {qOutboxRetry, []any{nil, time.Second, "", 0, rows[0].NotificationID, "webhook", rows[0].Fence.Token}, []string{"outbox_pkey"}},
		"published": {qOutboxPublished, []any{nil, []string{rows[0].NotificationID}, []string{"webhook"}, []int64{rows[0].Fence.Token}}, []string{"outbox_pkey"}},
		"record":    {qDeliveryRecord, []any{nil, "UNKNOWN", "", nil, "m", 1, "o", time.Now(), time.Now(), "x", 1}, []string{"deliveries_message_id"}},
		"settle": {qDeliveryRecordSettle, []any{nil, "UNKNOWN", "", nil, "m", 1, "o", time.Now(), time.Now(), "x", 1,
			rows[0].NotificationID, "webhook", rows[0].Fence.Token}, []string{"deliveries_message_id", "outbox_pkey"}},
	} {
		r, err := conn.Query(ctx, "EXPLAIN "+q.sql, q.args...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		plan, err := pgx.CollectRows(r, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%s: read the plan: %v", name, err)
		}
		text := strings.Join(plan, "\n")
		if strings.Contains(text, "outbox_leased") || strings.Contains(text, "deliveries_sending") {
			t.Errorf("%s is driven by a partial index of leased rows:\n%s", name, text)
		}
		for _, index := range q.want {
			if !strings.Contains(text, "Index Scan using "+index+" on ") {
				t.Errorf("%s does not find its row by %s:\n%s", name, index, text)
			}
		}
	}
}

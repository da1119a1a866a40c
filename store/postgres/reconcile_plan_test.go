package postgres

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/internal/testpg"
)

// A reconciliation page reads its notifications, their outbox rows and
// their deliveries through indexes, for as many rows as the page holds:
// no statement of a page scans a table, in the generic plan a prepared
// statement ends up with too. (Before the outbox range was spelled out, the
// planner hashed the whole outbox for every page: a count of a million
// notifications took a hundred full scans.)
func TestReconcilePagesReadOnlyThePage(t *testing.T) {
	t.Parallel()
	url := testpg.Schema(t)
	ctx := context.Background()
	s, err := Open(ctx, url, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// 100,000 notifications, each with an outbox row and a delivery.
	for _, q := range []string{
		`INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at)
SELECT 'ntf_' || lpad(g::text, 8, '0'), 't', 'r' || (g % 400), 'e' || g, 'k', 'transactional', '{}', timestamptz '2030-01-01' + g * interval '10 s'
FROM generate_series(1, 100000) g`,
		`INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, created_at, updated_at)
SELECT id, id || '.webhook', tenant, lane, 'webhook', 'DONE', created_at, created_at, created_at FROM notifications`,
		`INSERT INTO deliveries (message_id, notification_id, tenant, channel, state, attempts, created_at, updated_at)
SELECT message_id, notification_id, tenant, channel, CASE WHEN random() < 0.01 THEN 'UNKNOWN' ELSE 'PROVIDER_ACCEPTED' END, 1, created_at, created_at
FROM outbox`,
		`ANALYZE notifications; ANALYZE outbox; ANALYZE deliveries`,
	} {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2030, 2, 1, 0, 0, 0, 0, time.UTC)
	after, last := "ntf_00050000", "ntf_00060000"
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"Bound":         {qReconcileBound, []any{after, 10000}},
		"Groups":        {qReconcileGroups, []any{now, after, last, now}},
		"MissingOutbox": {qReconcileMissingOutbox, []any{after, last, 100}},
		"NoDelivery":    {qReconcileNoDelivery, []any{after, last, 100, now}},
		"Unknown":       {qReconcileUnknown, []any{after, last, 100}},
	} {
		execute, err := explainExecute(ctx, conn, "reconcile_"+name, q.sql, q.args)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r, err := conn.Query(ctx, execute)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		plan, err := pgx.CollectRows(r, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%s: read the plan: %v", name, err)
		}
		text := strings.Join(plan, "\n")
		for _, bad := range []string{"Seq Scan", "Bitmap Heap Scan"} {
			if strings.Contains(text, bad) {
				t.Errorf("%s: %s:\n%s", name, bad, text)
			}
		}
		if !indexCondNames(text, "notification_id") && name != "Bound" {
			t.Errorf("%s: the page's range does not bound the outbox index scan:\n%s", name, text)
		}
	}
}

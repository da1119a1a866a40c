package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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
		"extend":    {qOutboxExtend, []any{nil, time.Hour, []string{rows[0].NotificationID}, []string{"webhook"}, []int64{rows[0].Fence.Token}}, []string{"outbox_pkey"}},
		// The expiry finds the deliveries it ends by message id, however
		// many rows the planner expects to expire.
		"expire": {qOutboxExpire, []any{nil}, []string{"deliveries_message_id"}},
		"record": {qDeliveryRecord, []any{nil, "UNKNOWN", "", nil, "m", 1, "o", time.Now(), time.Now(), "x", 1}, []string{"deliveries_message_id"}},
		"settle": {qDeliveryRecordSettle, []any{nil, "UNKNOWN", "", nil, "m", 1, "o", time.Now(), time.Now(), "x", 1,
			rows[0].NotificationID, "webhook", rows[0].Fence.Token}, []string{"deliveries_message_id", "outbox_pkey"}},
	} {
		// Both plans a pooled connection can run: the custom one, planned
		// with the values (EXPLAIN with bind parameters), and the generic
		// one its statement cache settles on (a prepared statement run
		// under force_generic_plan).
		execute, err := explainExecute(ctx, conn, "plan_"+name, q.sql, q.args)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, how := range []struct{ kind, sql string }{
			{"custom", "EXPLAIN " + q.sql},
			{"generic", execute},
		} {
			var args []any
			if how.kind == "custom" {
				args = q.args
			}
			r, err := conn.Query(ctx, how.sql, args...)
			if err != nil {
				t.Fatalf("%s (%s plan): %v", name, how.kind, err)
			}
			plan, err := pgx.CollectRows(r, pgx.RowTo[string])
			if err != nil {
				t.Fatalf("%s (%s plan): read the plan: %v", name, how.kind, err)
			}
			text := strings.Join(plan, "\n")
			if how.kind == "generic" && !strings.Contains(text, "$") {
				t.Errorf("%s: the generic plan shows no parameter, so it is not generic:\n%s", name, text)
			}
			if strings.Contains(text, "outbox_leased") || strings.Contains(text, "deliveries_sending") {
				t.Errorf("%s (%s plan) is driven by a partial index of leased rows:\n%s", name, how.kind, text)
			}
			for _, index := range q.want {
				if !strings.Contains(text, "Index Scan using "+index+" on ") && !strings.Contains(text, "Bitmap Index Scan on "+index+" ") {
					t.Errorf("%s (%s plan) does not find its row by %s:\n%s", name, how.kind, index, text)
				}
			}
		}
	}
}

// explainExecute prepares sql as name on conn and returns the statement
// that EXPLAINs its execution with args. EXPLAIN EXECUTE takes no bind
// parameters, so each arg is written as a literal of its parameter's type,
// by PostgreSQL itself (quote_nullable of the value cast to text).
func explainExecute(ctx context.Context, conn *pgxpool.Conn, name, sql string, args []any) (string, error) {
	name = strings.ToLower(name) // as PostgreSQL folds the unquoted name
	if _, err := conn.Exec(ctx, "PREPARE "+name+" AS "+sql); err != nil {
		return "", fmt.Errorf("prepare: %w", err)
	}
	var types []string
	if err := conn.QueryRow(ctx, `SELECT array_agg(format_type(t, NULL) ORDER BY i)
FROM pg_prepared_statements, unnest(parameter_types::oid[]) WITH ORDINALITY AS p(t, i) WHERE name = $1`, name).Scan(&types); err != nil {
		return "", fmt.Errorf("parameter types: %w", err)
	}
	if len(types) != len(args) {
		return "", fmt.Errorf("%d parameters, %d args", len(types), len(args))
	}
	literals := make([]string, len(args))
	for i, a := range args {
		if err := conn.QueryRow(ctx, "SELECT quote_nullable(($1::"+types[i]+")::text)", a).Scan(&literals[i]); err != nil {
			return "", fmt.Errorf("parameter %d as %s: %w", i+1, types[i], err)
		}
		literals[i] += "::" + types[i]
	}
	return "EXPLAIN EXECUTE " + name + "(" + strings.Join(literals, ", ") + ")", nil
}

package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// A queue table's statistics are usually stale: taken while few rows were
// leased, they make the partial index of leased rows look empty. The fenced
// writes must still be driven by the primary key, (notification_id,
// channel), or each one walks every live lease.
func TestFencedWritesUseThePrimaryKeyWithStaleStatistics(t *testing.T) {
	t.Parallel()
	s, conn := planConn(t,
		`INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at)
SELECT 'n' || g, 't', 'r', 'e' || g, 'k', 'transactional', '{}', now() FROM generate_series(1, 3000) g`,
		`INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, created_at, updated_at)
SELECT id, id || '.webhook', 't', 'transactional', 'webhook', 'PENDING', now(), now(), now() FROM notifications`,
		// Deliveries that finished long ago: statistics taken now see no SENDING row.
		`INSERT INTO deliveries (message_id, notification_id, tenant, channel, state, attempts, created_at, updated_at)
SELECT id || '.sms', id, 't', 'sms', 'PROVIDER_ACCEPTED', 1, now(), now() FROM notifications`,
		`ANALYZE outbox; ANALYZE deliveries`, // nothing leased yet
		`UPDATE deliveries SET state = 'SENDING', claimed_at = now()`,
	)
	rows, err := s.OutboxClaim(context.Background(), store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "relay", Limit: 3000, Lease: time.Hour, Publishing: true})
	if err != nil || len(rows) != 3000 {
		t.Fatalf("claimed %d (%v)", len(rows), err)
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
		"expire": {qOutboxExpire, []any{nil, 100}, []string{"deliveries_message_id"}},
		"record": {qDeliveryRecord, []any{nil, "UNKNOWN", "", nil, "m", 1, "o", time.Now(), time.Now(), "x", 1, ""}, []string{"deliveries_message_id"}},
		"settle": {qDeliveryRecordSettle, []any{nil, "UNKNOWN", "", nil, "m", 1, "o", time.Now(), time.Now(), "x", 1, "",
			rows[0].NotificationID, "webhook", rows[0].Fence.Token}, []string{"deliveries_message_id", "outbox_pkey"}},
	} {
		plans := bothPlans(t, conn, "plan_"+name, q.sql, q.args)
		for _, how := range []string{"custom", "generic"} {
			text := plans[how]
			if how == "generic" && !strings.Contains(text, "$") {
				t.Errorf("%s: the generic plan shows no parameter, so it is not generic:\n%s", name, text)
			}
			if strings.Contains(text, "outbox_leased") || strings.Contains(text, "deliveries_sending") {
				t.Errorf("%s (%s plan) is driven by a partial index of leased rows:\n%s", name, how, text)
			}
			for _, index := range q.want {
				if !strings.Contains(text, "Index Scan using "+index+" on ") && !strings.Contains(text, "Bitmap Index Scan on "+index+" ") {
					t.Errorf("%s (%s plan) does not find its row by %s:\n%s", name, how, index, text)
				}
			}
		}
	}
}

// planConn opens a store on a fresh schema, fills it by running each
// statement of fill in order (ANALYZE among them where a test wants
// statistics), and returns it with one connection of its pool under
// plan_cache_mode force_generic_plan, to read plans on with explainExecute
// and bothPlans. Both are given back when the test ends.
func planConn(t *testing.T, fill ...string) (*Store, *pgxpool.Conn) {
	t.Helper()
	ctx := context.Background()
	s := setup(t, "", Options{})
	for _, q := range fill {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release) // before the store closes: cleanups run last first
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	return s, conn
}

// bothPlans returns, by "custom" and "generic", both plans a pooled
// connection can run sql with args under: the custom one, planned with the
// values (EXPLAIN with bind parameters), and the generic one its statement
// cache settles on (prepared as name and run through explainExecute; conn
// must be under plan_cache_mode force_generic_plan, as planConn's is).
func bothPlans(t *testing.T, conn *pgxpool.Conn, name, sql string, args []any) map[string]string {
	t.Helper()
	return map[string]string{
		"custom":  explain(t, conn, name+" (custom plan)", "EXPLAIN "+sql, args...),
		"generic": explainExecute(t, conn, name, sql, args),
	}
}

// explain runs the EXPLAIN statement sql with args on conn and returns its
// plan, a node a line; it fails the test, saying what, when it cannot.
func explain(t *testing.T, conn *pgxpool.Conn, what, sql string, args ...any) string {
	t.Helper()
	r, err := conn.Query(context.Background(), sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	plan, err := pgx.CollectRows(r, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: read the plan: %v", what, err)
	}
	return strings.Join(plan, "\n")
}

// explainExecute prepares sql as name on conn and returns the plan of its
// execution with args (EXPLAIN EXECUTE), as the session's plan_cache_mode
// plans it. EXPLAIN EXECUTE takes no bind parameters, so each arg is
// written as a literal of its parameter's type, by PostgreSQL itself
// (quote_nullable of the value cast to text).
func explainExecute(t *testing.T, conn *pgxpool.Conn, name, sql string, args []any) string {
	t.Helper()
	return explainExecuteAs(t, conn, "EXPLAIN", name, sql, args)
}

// explainExecuteAs is explainExecute with the EXPLAIN command given, such
// as "EXPLAIN (ANALYZE, BUFFERS)", which runs the statement.
func explainExecuteAs(t *testing.T, conn *pgxpool.Conn, command, name, sql string, args []any) string {
	t.Helper()
	name = strings.ToLower(name) // as PostgreSQL folds the unquoted name
	prepare(t, conn, name, sql)
	return explainPrepared(t, conn, command, name, args)
}

// prepare prepares sql as name on conn.
func prepare(t *testing.T, conn *pgxpool.Conn, name, sql string) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), "PREPARE "+name+" AS "+sql); err != nil {
		t.Fatalf("%s: prepare: %v", name, err)
	}
}

// explainPrepared returns the plan of the prepared statement name's
// execution with args, run through command (EXPLAIN, or EXPLAIN with
// options): under force_generic_plan, the generic plan it made at its
// first execution, whatever the tables hold now.
func explainPrepared(t *testing.T, conn *pgxpool.Conn, command, name string, args []any) string {
	t.Helper()
	ctx := context.Background()
	var types []string
	if err := conn.QueryRow(ctx, `SELECT array_agg(format_type(t, NULL) ORDER BY i)
FROM pg_prepared_statements, unnest(parameter_types::oid[]) WITH ORDINALITY AS p(t, i) WHERE name = $1`, name).Scan(&types); err != nil {
		t.Fatalf("%s: parameter types: %v", name, err)
	}
	if len(types) != len(args) {
		t.Fatalf("%s: %d parameters, %d args", name, len(types), len(args))
	}
	literals := make([]string, len(args))
	for i, a := range args {
		if err := conn.QueryRow(ctx, "SELECT quote_nullable(($1::"+types[i]+")::text)", a).Scan(&literals[i]); err != nil {
			t.Fatalf("%s: parameter %d as %s: %v", name, i+1, types[i], err)
		}
		literals[i] += "::" + types[i]
	}
	return explain(t, conn, name, command+" EXECUTE "+name+"("+strings.Join(literals, ", ")+")")
}

// indexCondNames reports whether an "Index Cond" line of the plan names col.
func indexCondNames(plan, col string) bool {
	for _, line := range strings.Split(plan, "\n") {
		if strings.Contains(line, "Index Cond:") && strings.Contains(line, col) {
			return true
		}
	}
	return false
}

package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A reconciliation page reads its notifications and their outbox rows by
// merging two ranges of their keys, and each planned send's delivery by one
// probe: no statement of a page scans a table, hashes one or filters a join
// by scanning a range per row, in the generic plan a prepared statement
// ends up with too, and for a page of rows inserted since the last
// ANALYZE, which the planner takes for one row. (With the planner's own
// choice, it hashed the whole outbox for every page with fresh statistics,
// and with stale ones scanned the page's whole outbox range once per
// notification: a page of intake's newest rows took minutes while the
// benchmark's intake ran.)
func TestReconcilePagesReadOnlyThePage(t *testing.T) {
	t.Parallel()
	// 100,000 notifications, each with an outbox row and a delivery, then
	// analyzed; then 20,000 more whose ids sort before all of them (as new
	// ids may, against the statistics), not analyzed.
	fill := func(prefix string, n int) []string {
		return []string{
			`INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at)
SELECT '` + prefix + `' || lpad(g::text, 8, '0'), 't', 'r' || (g % 400), 'e' || g, 'k', 'transactional', '{}', timestamptz '2030-01-01' + g * interval '10 s'
FROM generate_series(1, ` + strconv.Itoa(n) + `) g`,
			`INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, created_at, updated_at)
SELECT id, id || '.webhook', tenant, lane, 'webhook', 'DONE', created_at, created_at, created_at FROM notifications WHERE id LIKE '` + prefix + `%'`,
			`INSERT INTO deliveries (message_id, notification_id, tenant, channel, state, attempts, created_at, updated_at)
SELECT message_id, notification_id, tenant, channel, CASE WHEN random() < 0.01 THEN 'UNKNOWN' ELSE 'PROVIDER_ACCEPTED' END, 1, created_at, created_at
FROM outbox WHERE notification_id LIKE '` + prefix + `%'`,
		}
	}
	_, conn := planConn(t, append(append(fill("ntf_f", 100000), `ANALYZE notifications; ANALYZE outbox; ANALYZE deliveries`), fill("ntf_0", 20000)...)...)
	ctx := context.Background()
	// As in a page's transaction (for the session: EXPLAIN EXECUTE runs
	// outside one).
	if _, err := conn.Exec(ctx, strings.ReplaceAll(qReconcilePlan, "SET LOCAL", "SET")); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2030, 2, 1, 0, 0, 0, 0, time.UTC)
	pages := map[string][2]string{"Analyzed": {"ntf_f00050000", "ntf_f00060000"}, "Unanalyzed": {"", "ntf_000010000"}}
	for _, generic := range []bool{false, true} {
		mode := "force_custom_plan"
		if generic {
			mode = "force_generic_plan"
		}
		if _, err := conn.Exec(ctx, `SET plan_cache_mode = `+mode); err != nil {
			t.Fatal(err)
		}
		for pageName, page := range pages {
			after, last := page[0], page[1]
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
				label := fmt.Sprintf("%s/%s/%s", mode, pageName, name)
				text := explainExecute(t, conn, fmt.Sprintf("reconcile_%s_%t_%s", pageName, generic, name), q.sql, q.args)
				for _, bad := range []string{"Seq Scan", "Join Filter", "Hash", "Memoize"} {
					if strings.Contains(text, bad) {
						t.Errorf("%s: %s:\n%s", label, bad, text)
					}
				}
				if name != "Bound" && (!strings.Contains(text, "Merge") || !indexCondNames(text, "notification_id")) {
					t.Errorf("%s: the page's outbox range is not merged with its notifications:\n%s", label, text)
				}
			}
		}
	}
}

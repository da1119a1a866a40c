package postgres

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The end of a send off any fallback chain, and the expiry sweep, read
// their own rows and nothing more, whatever plan stale statistics lead the
// planner to. In issue 12's isolation run (a million-row outbox never
// analyzed: autovacuum off) every result write's generic plan scanned the
// whole outbox for the WAITING steps of a chain the send was not on
// (qFallbackMove's fr: a hash join, whose outer seq scan runs to its end
// before the join learns that fm has no rows) and was compiled by JIT at
// every call (its cost, inflated by the same statistics, passed
// jit_above_cost): about 130 ms of scanning and 60 ms of compiling a send
// on a quiet machine, on the few connections the pipeline writes through,
// which stalled the sends of both lanes; and the expiry sweep read every
// PENDING row each 5 s. Here the outbox has 100,000 rows and no
// statistics, nested loops are off so that the planner takes the hash
// join it took there, and jit_above_cost is 0. Each statement runs under
// EXPLAIN (ANALYZE, BUFFERS) in the generic plan a pooled connection
// settles on, and is rolled back.
func TestASendsEndReadsOnlyItsOwnRowsWithStaleStatistics(t *testing.T) {
	t.Parallel()
	s, conn := planConn(t,
		`INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at)
SELECT CASE WHEN g <= 3 THEN 'n' || g ELSE 'ntf_' || lpad(g::text, 26, '0') END, 't', 'member-' || g, 'cmp_01M8VFKPVA51Q2F959TH30MNV9', 'coupon',
       'marketing', '{"coupon":"C10"}', now() FROM generate_series(1, 100000) g`,
		// n1 and n3 are claimed, n1 is being sent; the rest wait.
		`INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, claimed_by, claimed_until, token,
                    created_at, updated_at)
SELECT id, id || '.webhook', 't', 'marketing', 'webhook', CASE WHEN id IN ('n1', 'n3') THEN 'CLAIMED' ELSE 'PENDING' END, now(),
       CASE WHEN id IN ('n1', 'n3') THEN 'w' END, CASE WHEN id IN ('n1', 'n3') THEN now() + interval '1 hour' END, 1, now(), now()
FROM notifications`,
		`INSERT INTO deliveries (message_id, notification_id, tenant, channel, state, attempts, claimed_by, claimed_at, created_at, updated_at)
VALUES ('n1.webhook', 'n1', 't', 'webhook', 'SENDING', 1, 'w', now(), now(), now())`,
		// n2 is a lazy fallback chain's first step (fallback.go), being sent.
		`UPDATE outbox SET state = 'CLAIMED', claimed_by = 'w', claimed_until = now() + interval '1 hour', fallback_step = 1,
    fallback_plan = '{sms,alimtalk}' WHERE notification_id = 'n2'`,
		`INSERT INTO deliveries (message_id, notification_id, tenant, channel, state, attempts, claimed_by, claimed_at, created_at, updated_at)
VALUES ('n2.webhook', 'n2', 't', 'webhook', 'SENDING', 1, 'w', now(), now(), now())`,
		// The fourth waits for a retry, and its notification was cancelled.
		`UPDATE notifications SET cancelled_at = now() WHERE id = 'ntf_00000000000000000000000004'`,
		`INSERT INTO deliveries (message_id, notification_id, tenant, channel, state, attempts, next_attempt_at, created_at, updated_at)
VALUES ('ntf_00000000000000000000000004.webhook', 'ntf_00000000000000000000000004', 't', 'webhook', 'RETRY_WAIT', 1, now(), now(), now())`,
	)
	// The plan the missing statistics of the million-row outbox led to
	// (fm estimated at 14 rows, each probe of the primary key's
	// notification_id prefix at 0.5% of the table): a hash join over a
	// scan of the outbox. And any plan's cost past jit_above_cost.
	if _, err := conn.Exec(context.Background(), `SET enable_nestloop = off; SET jit_above_cost = 0`); err != nil {
		t.Fatal(err)
	}
	var jit string
	if err := s.pool.QueryRow(context.Background(), `SHOW jit`).Scan(&jit); err != nil {
		t.Fatal(err)
	}
	if jit != "off" {
		t.Errorf("the store's connections run with jit = %s, want off", jit)
	}
	now := time.Now()
	record := []any{nil, "PROVIDER_ACCEPTED", "", nil, "n1.webhook", 1, "w", now, now, "accepted", 100, ""}
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"record":   {qDeliveryRecord, record},
		"settle":   {qDeliveryRecordSettle, append(record, "n1", "webhook", int64(1))},
		"lazy":     {qDeliveryRecordLazy, append(record, "n1", "webhook", int64(1))},
		"offchain": {qDeliveryRecordOffChain, append(record, "n1", "webhook", int64(1))},
		"end":      {qFallbackEnd, []any{nil, "n1.webhook", "", "n1", "webhook", int64(1)}},
		// The definite failure and the acceptance of a lazy chain's first
		// step, which write its later steps (qFallbackMove's fl).
		"chainfailed": {qDeliveryRecordSettle, []any{nil, "PERMANENT_FAILURE", "X", nil, "n2.webhook", 1, "w", now, now, "permanent", 100, "",
			"n2", "webhook", int64(1)}},
		"chainended": {qFallbackEnd, []any{nil, "n2.webhook", "", "n2", "webhook", int64(1)}},
		"decide":     {qDeliveryDecide, []any{nil, "n2.webhook", "n2", "t", "webhook", "SUPPRESSED", "CONSENT_DENIED"}},
		"fail":       {qOutboxFail, []any{nil, "FAILED", "RENDER", "n3", "webhook", int64(1)}},
		"stale":      {qDeliverySweepStale, []any{nil, 10 * time.Minute}},
		// A copy's claim of a message whose row exists: one being sent,
		// and a cancelled retry, which it ends, moving its chain on
		// (qFallbackMove).
		"blocked":   {qDeliveryClaimRetry, []any{nil, "n1.webhook", "sim", "w"}},
		"cancelled": {qDeliveryClaimRetry, []any{nil, "ntf_00000000000000000000000004.webhook", "sim", "w"}},
		// The expiry sweep, every 5 s, with nothing to expire.
		"expire": {qOutboxExpire, []any{nil, 100}},
	} {
		if _, err := conn.Exec(context.Background(), `BEGIN`); err != nil {
			t.Fatal(err)
		}
		plan := explainExecuteAs(t, conn, "EXPLAIN (ANALYZE, BUFFERS)", "stale_"+name, q.sql, q.args)
		if _, err := conn.Exec(context.Background(), `ROLLBACK`); err != nil {
			t.Fatal(err)
		}
		if pages := planPages(plan); pages > 200 {
			t.Errorf("%s read %d pages (it needs a handful):\n%s", name, pages, plan)
		}
		for _, line := range strings.Split(plan, "\n") {
			if strings.Contains(line, "Seq Scan on outbox") && !strings.Contains(line, "never executed") {
				t.Errorf("%s scanned the outbox:\n%s", name, plan)
				break
			}
		}
		if strings.Contains(plan, "JIT:") {
			t.Errorf("%s was compiled by JIT:\n%s", name, plan)
		}
	}
}

// planPages returns the pages (shared hit and read) the top node of an
// EXPLAIN (ANALYZE, BUFFERS) plan touched.
func planPages(plan string) int {
	m := regexp.MustCompile(`Buffers: shared((?: \w+=\d+)+)`).FindStringSubmatch(plan)
	if m == nil {
		return 0
	}
	total := 0
	for _, kv := range strings.Fields(m[1]) {
		k, v, _ := strings.Cut(kv, "=")
		if k == "hit" || k == "read" {
			n, _ := strconv.Atoi(v)
			total += n
		}
	}
	return total
}

// herald's connections start without JIT and with backend_flush_after at
// 256 kB, each unless the URL sets its own (poolConfig).
func TestConnectionsStartWithHeraldsParametersUnlessTheURLSetsThem(t *testing.T) {
	for _, c := range []struct{ url, param, want string }{
		{"postgres://u@127.0.0.1:5432/d", "jit", "off"},
		{"postgres://u@127.0.0.1:5432/d?jit=on", "jit", "on"},
		{"postgres://u@127.0.0.1:5432/d", "backend_flush_after", "256kB"},
		{"postgres://u@127.0.0.1:5432/d?backend_flush_after=1MB", "backend_flush_after", "1MB"},
		{"postgres://u@127.0.0.1:5432/d?backend_flush_after=0", "backend_flush_after", "0"},
	} {
		cfg, err := poolConfig(c.url, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.ConnConfig.RuntimeParams[c.param]; got != c.want {
			t.Errorf("%s: %s = %q, want %q", c.url, c.param, got, c.want)
		}
	}
}

// The server probes every connection of the store's, the leader's own
// included, after 10 s of silence (sessionDefaults): a leader whose host
// froze gives up its lock in about 25 s, not the kernel's two hours.
func TestTheServerProbesSilentConnections(t *testing.T) {
	s := setup(t, "", Options{})
	ctx := context.Background()
	leader, err := s.dedicatedConn(ctx, "leader")
	if err != nil {
		t.Fatal(err)
	}
	defer leader.Close(ctx)
	for name, q := range map[string]interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}{"main": s.pool, "claims": s.claims, "leader": leader} {
		for param, want := range map[string]string{"tcp_keepalives_idle": "10", "tcp_keepalives_interval": "5", "tcp_keepalives_count": "3"} {
			var got string
			if err := q.QueryRow(ctx, "SHOW "+param).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("the store's %s connection: %s = %s, want %s", name, param, got, want)
			}
		}
	}
}

// The server takes backend_flush_after on every connection the store
// opens, the claims' own included.
func TestTheStoresConnectionsFlushWhatTheyWrite(t *testing.T) {
	s := setup(t, "", Options{})
	for name, pool := range map[string]*pgxpool.Pool{"main": s.pool, "claims": s.claims} {
		var got string
		if err := pool.QueryRow(context.Background(), `SHOW backend_flush_after`).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != backendFlushAfter {
			t.Errorf("the store's %s connections run with backend_flush_after = %s, want %s", name, got, backendFlushAfter)
		}
	}
}

package e2e

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testpg"
)

// Helpers for the tests that run herald processes on PostgreSQL.

// load posts n notifications from workers goroutines, spreading them over
// clients, and returns the accepted ids. accepted counts them as they come;
// halt makes the workers stop taking new ones before n (taken counts those
// taken).
type load struct {
	n, workers int
	clients    []*client
	kind       string
	prefix     string
	stats      postStats
	accepted   atomic.Int64
	taken      atomic.Int64
	halt       atomic.Bool

	mu  sync.Mutex
	ids []string
	err error
}

func (l *load) run(ctx context.Context) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range l.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1))
				if i > l.n || l.halt.Load() {
					return
				}
				l.taken.Add(1)
				key := fmt.Sprintf("%s-%d", l.prefix, i)
				id, err := postAny(ctx, l.clients, i, key, map[string]any{
					"recipient": fmt.Sprintf("user-%d", i%97), "event_id": key, "kind": l.kind,
					"params": map[string]any{"amount": i},
				}, &l.stats)
				l.mu.Lock()
				if err != nil {
					if l.err == nil {
						l.err = err
					}
					l.mu.Unlock()
					return
				}
				l.ids = append(l.ids, id)
				l.mu.Unlock()
				l.accepted.Add(1)
			}
		}()
	}
	wg.Wait()
}

// pgQuery runs one query returning a single row on a short-lived connection
// and scans it into dest.
func pgQuery(url, sql string, args []any, dest ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, sql, args...).Scan(dest...)
}

// qUnsettled counts planned sends that are not finished: a delivery not in
// a terminal state, or an outbox row herald has yet to move on (due,
// claimed, or published and not yet marked). A delivery can end before its
// outbox row does: a row a killed or cut-off process held comes back only
// when its lease runs out and a sweep takes it (its message, sent already,
// is then finished without a call), while the delivery was ended long
// before, by the send or by the stale sweep. Reconciliation run before that
// would repair what herald finishes by itself.
const qUnsettled = `SELECT count(*) FROM outbox o LEFT JOIN deliveries d ON d.message_id = o.message_id
WHERE o.state NOT IN ('EXPIRED', 'FAILED')
  AND (o.state IN ('PENDING', 'CLAIMED', 'PUBLISHING')
       OR d.state IS NULL OR d.state NOT IN ('PROVIDER_ACCEPTED', 'DELIVERED', 'PERMANENT_FAILURE', 'RETRY_EXHAUSTED', 'UNKNOWN', 'SUPPRESSED'))`

// settle waits until every planned send in the database is finished, then
// reads every accepted id through the API (round-robin over clients) and
// returns the views. A 404 or a non-terminal state fails.
func settle(t *testing.T, dbURL string, clients []*client, ids []string, timeout time.Duration) map[string]notification {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var n int
		err := pgQuery(dbURL, qUnsettled, nil, &n)
		if err == nil && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s, %d planned sends are not finished (last error: %v)", timeout, n, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	views := readViews(t, clients, ids)
	if left := pending(views); len(left) > 0 {
		t.Fatalf("%d deliveries not terminal after the database said all were settled, e.g. %v", len(left), left[:min(5, len(left))])
	}
	return views
}

// appName is a unique application_name for one herald's connections, so a
// test can terminate exactly those.
func appName(prefix string) string {
	return prefix + "_" + testenv.RandomSuffix()
}

// terminateHerald ends every connection of the herald whose application_name
// is app: its pool, its listener and its leader connection. It returns how
// many it ended.
func terminateHerald(t *testing.T, app string) int {
	t.Helper()
	n := 0
	for _, name := range []string{app, app + " listener", app + " leader"} {
		n += testpg.TerminateBackends(t, name)
	}
	return n
}

// startServer starts s. Kept for its callers: start itself now makes sure
// no herald outlives its test.
func startServer(t *testing.T, s *server) {
	t.Helper()
	s.start()
}

// databaseName is the database a postgres:// URL names.
func databaseName(t *testing.T, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

// backendCount counts the server sessions whose application_name is name.
func backendCount(t *testing.T, name string) int {
	t.Helper()
	var n int
	if err := pgQuery(testpg.BaseURL(), `SELECT count(*)::int FROM pg_stat_activity WHERE application_name = $1`, []any{name}, &n); err != nil {
		t.Fatalf("count backends of %q: %v", name, err)
	}
	return n
}

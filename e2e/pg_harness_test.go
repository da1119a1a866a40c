package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/internal/testpg"
)

// Helpers for the tests that run herald processes on PostgreSQL.

// load posts n notifications from workers goroutines, spreading them over
// clients, and returns the accepted ids. progress counts accepted ones.
type load struct {
	n, workers int
	clients    []*client
	kind       string
	prefix     string
	stats      postStats
	accepted   atomic.Int64

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
				if i > l.n {
					return
				}
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

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
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

// unsettled counts planned sends that are not finished: an outbox row still
// waiting or leased, or a delivery not in a terminal state.
const qUnsettled = `SELECT count(*) FROM outbox o LEFT JOIN deliveries d ON d.message_id = o.message_id
WHERE o.state NOT IN ('EXPIRED', 'FAILED')
  AND (d.state IS NULL OR d.state NOT IN ('PROVIDER_ACCEPTED', 'DELIVERED', 'PERMANENT_FAILURE', 'RETRY_EXHAUSTED', 'UNKNOWN', 'SUPPRESSED'))`

// settle waits until every planned send in the database is finished, then
// reads every accepted id through the API (round-robin over clients) and
// returns the delivery states it saw. A 404 or a non-terminal state fails.
func settle(t *testing.T, dbURL string, clients []*client, ids []string, timeout time.Duration) map[string]int {
	t.Helper()
	var n int
	var lastErr error
	waitFor(t, "every delivery to be terminal", timeout, func() bool {
		lastErr = pgQuery(dbURL, qUnsettled, nil, &n)
		return lastErr == nil && n == 0
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	states := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, len(ids))
	work := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				nv, code, err := clients[i%len(clients)].get(ctx, ids[i])
				switch {
				case err != nil:
					errs <- fmt.Errorf("GET %s: %w", ids[i], err)
					continue
				case code == http.StatusNotFound:
					errs <- fmt.Errorf("accepted notification %s is gone", ids[i])
					continue
				case code != http.StatusOK:
					errs <- fmt.Errorf("GET %s answered %d", ids[i], code)
					continue
				case len(nv.Deliveries) != 1:
					errs <- fmt.Errorf("%s has %d deliveries", ids[i], len(nv.Deliveries))
					continue
				}
				mu.Lock()
				for _, d := range nv.Deliveries {
					states[d.State]++
					if !terminal(d.State) {
						errs <- fmt.Errorf("%s is %s after the database said it was settled", d.MessageID, d.State)
					}
				}
				mu.Unlock()
			}
		}()
	}
	for i := range ids {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if len(all) > 0 {
		t.Fatalf("%d problems reading accepted notifications, e.g.: %v", len(all), errors.Join(all[:min(5, len(all))]...))
	}
	return states
}

func formatStates(states map[string]int) string {
	keys := make([]string, 0, len(states))
	for s := range states {
		keys = append(keys, s)
	}
	sort.Strings(keys)
	var per []string
	for _, s := range keys {
		per = append(per, fmt.Sprintf("%s=%d", s, states[s]))
	}
	return strings.Join(per, " ")
}

// appName is a unique application_name for one herald's connections, so a
// test can terminate exactly those.
func appName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
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

// startServer starts s and kills it when the test ends if it still runs (a
// test that failed half-way leaves no herald behind).
func startServer(t *testing.T, s *server) {
	t.Helper()
	s.start()
	t.Cleanup(func() {
		select {
		case <-s.done:
		default:
			s.kill()
		}
	})
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

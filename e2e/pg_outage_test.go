package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/internal/testpg"
)

// TestPostgresGoesAway runs one herald on PostgreSQL and takes the database
// away from it while clients post: it terminates all of herald's sessions
// (pool, listener, leader) several times, and once keeps the database
// refusing connections for a while. herald must answer 503 (problem+json)
// while it cannot write, keep running, reconnect by itself, and lose no 202.
func TestPostgresGoesAway(t *testing.T) {
	if testing.Short() {
		t.Skip("outage test: skipped in -short mode")
	}
	t.Parallel()
	dbURL := testpg.Database(t)
	dbName := databaseName(t, dbURL)
	app := appName("herald_outage")
	k := newRouteSink()
	sinkSrv := httptest.NewServer(k)
	defer sinkSrv.Close()
	addr := freeAddr(t)
	srv := newServer(t, crashConfig(t, addr, sinkSrv.URL+"/h", crashSetup{
		database: testpg.WithParams(dbURL, "application_name", app),
	}), addr)
	startServer(t, srv)
	c := newClient(addr, "crash-key")
	waitFor(t, "the listener and the leader to connect", 20*time.Second, func() bool {
		return backendCount(t, app+" listener") == 1 && backendCount(t, app+" leader") == 1
	})

	const n = 1200
	l := &load{n: n, workers: 8, clients: []*client{c}, kind: "crash.test", prefix: "outage"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sending := make(chan struct{})
	began := time.Now()
	go func() { defer close(sending); l.run(ctx) }()

	// Drops: at each fifth of the run, terminate every session of herald.
	terminated := 0
	for i := 1; i <= 4; i++ {
		waitFor(t, fmt.Sprintf("%d accepted", i*n/6), time.Minute, func() bool { return l.accepted.Load() >= int64(i*n/6) })
		terminated += terminateHerald(t, app)
		t.Logf("drop %d after %d accepted (%s)", i, l.accepted.Load(), time.Since(began).Round(time.Millisecond))
		if i != 2 {
			continue
		}
		// A sustained outage: the database refuses new connections.
		outage(t, dbName, app, addr)
		t.Logf("outage over after %d accepted (%s)", l.accepted.Load(), time.Since(began).Round(time.Millisecond))
	}
	<-sending
	t.Logf("sent %d in %s", l.accepted.Load(), time.Since(began).Round(time.Millisecond))
	if l.err != nil {
		t.Fatalf("sending: %v", l.err)
	}
	select {
	case <-srv.done:
		t.Fatalf("herald exited during the outages:\n%s", srv.tail())
	default:
	}

	// It came back by itself: pool, listener and leader connected again.
	waitFor(t, "the listener and the leader to reconnect", 20*time.Second, func() bool {
		return backendCount(t, app+" listener") == 1 && backendCount(t, app+" leader") == 1
	})
	sentAt := time.Now()
	states := settle(t, dbURL, []*client{c}, l.ids, 60*time.Second)
	t.Logf("settled %s after the last 202", time.Since(sentAt).Round(time.Millisecond))
	counts, _ := k.snapshot()
	dups := duplicates(counts)
	t.Logf("outage test: accepted=%d sessions_terminated=%d 503s=%d conn_errors=%d states{%s} sink_calls=%d duplicates=%d",
		len(l.ids), terminated, l.stats.unavailable.Load(), l.stats.connErrors.Load(), formatStates(states), len(counts), len(dups))
	if len(l.ids) != n {
		t.Fatalf("accepted %d of %d", len(l.ids), n)
	}
	if len(dups) > 0 {
		t.Fatalf("message ids answered 2xx more than once: %v", dups)
	}
	if states["PROVIDER_ACCEPTED"] > len(counts) {
		t.Fatalf("%d PROVIDER_ACCEPTED but the sink saw only %d messages", states["PROVIDER_ACCEPTED"], len(counts))
	}
	if terminated < 4 {
		t.Fatalf("terminated only %d sessions over 4 drops", terminated)
	}
	if code := srv.stop(30 * time.Second); code != 0 {
		t.Fatalf("SIGTERM exit code %d:\n%s", code, srv.tail())
	}
}

// outage makes the database refuse connections, ends herald's sessions,
// checks that herald reports the outage (readyz and POST answer 503, healthz
// 200) and then lets connections in again and waits until herald is ready.
func outage(t *testing.T, dbName, app, addr string) {
	t.Helper()
	db := pgx.Identifier{dbName}.Sanitize()
	testpg.Exec(t, testpg.BaseURL(), "ALTER DATABASE "+db+" ALLOW_CONNECTIONS false")
	t.Cleanup(func() { testpg.Exec(t, testpg.BaseURL(), "ALTER DATABASE "+db+" ALLOW_CONNECTIONS true") })
	terminateHerald(t, app)
	status := func(path string) int {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	waitFor(t, "readyz to report the outage", 10*time.Second, func() bool { return status("/readyz") == http.StatusServiceUnavailable })
	if got := status("/healthz"); got != http.StatusOK {
		t.Fatalf("healthz answered %d during the outage", got)
	}
	// A POST that cannot be written is a 503 problem, and its key stays free.
	c := newClient(addr, "crash-key")
	st := &postStats{}
	probe := map[string]any{"recipient": "probe", "event_id": "probe", "kind": "crash.test", "params": map[string]any{"amount": 1}}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	var id string
	go func() {
		var err error
		id, err = postAny(ctx, []*client{c}, 0, "outage-probe", probe, st)
		got <- err
	}()
	waitFor(t, "a 503 during the outage", 10*time.Second, func() bool { return st.unavailable.Load() > 0 })
	select {
	case err := <-got:
		cancel()
		t.Fatalf("POST during the outage ended: id=%q err=%v", id, err)
	default:
	}

	testpg.Exec(t, testpg.BaseURL(), "ALTER DATABASE "+db+" ALLOW_CONNECTIONS true")
	waitFor(t, "readyz after the outage", 20*time.Second, func() bool { return status("/readyz") == http.StatusOK })
	select {
	case err := <-got: // the same key, retried, is accepted once the database is back
		cancel()
		if err != nil {
			t.Fatalf("POST retried through the outage: %v", err)
		}
	case <-time.After(20 * time.Second):
		cancel()
		t.Fatal("POST retried through the outage was not accepted after it")
	}
	if nv, code, err := c.get(context.Background(), id); err != nil || code != http.StatusOK || len(nv.Deliveries) != 1 {
		t.Fatalf("the probe accepted after the outage: code %d err %v", code, err)
	}
}

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testpg"
)

// TestPostgresGoesAway runs one herald on PostgreSQL and takes the database
// away from it while clients post: four times it terminates all of herald's
// sessions (pool, listener, leader), each time once all three are
// connected, and once it keeps the database refusing connections for a
// while. herald must answer 503 (problem+json) while it cannot write, keep
// running, notice each cut, reconnect by itself, lose no 202 and send no
// message twice. A message may end UNKNOWN only if its claim was made as a
// cut ended its session (the claim's answer was lost, so herald never
// called); every other one ends PROVIDER_ACCEPTED with exactly one call.
func TestPostgresGoesAway(t *testing.T) {
	skipShort(t, "outage test")
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
	srv.start()
	c := newClient(addr, "crash-key")

	// The load runs until the last drop was noticed (each drop waits for
	// herald to reconnect all it lost, which takes up to the leader
	// election's 5 s round) and at least n were accepted, or until 5n were.
	const n = 1200
	l := &load{n: 5 * n, workers: 8, clients: []*client{c}, kind: "crash.test", prefix: "outage"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sending := make(chan struct{})
	began := time.Now()
	go func() { defer close(sending); l.run(ctx) }()

	// Drops: four times, terminate every session of herald.
	// Each drop must be noticed before the next one.
	var cuts []cut
	var drop cut
	probe := ""
	for i := 1; i <= 4; i++ {
		testenv.WaitFor(t, fmt.Sprintf("%d accepted", i*n/5), time.Minute, func() bool { return l.accepted.Load() >= int64(i*n/5) })
		if i > 1 {
			drop.awaitNoticed(t, srv)
		}
		drop = cutSessions(t, srv, app, fmt.Sprintf("drop %d", i))
		cuts = append(cuts, drop)
		t.Logf("drop %d after %d accepted (%s)", i, l.accepted.Load(), time.Since(began).Round(time.Millisecond))
		if i != 2 {
			continue
		}
		// A sustained outage: the database refuses new connections. Its
		// effect is shown by the 503s it checks for.
		var oc cut
		oc, probe = outage(t, dbName, app, srv)
		cuts = append(cuts, oc)
		t.Logf("outage over after %d accepted (%s)", l.accepted.Load(), time.Since(began).Round(time.Millisecond))
	}
	drop.awaitNoticed(t, srv)
	testenv.WaitFor(t, fmt.Sprintf("%d accepted", n), time.Minute, func() bool { return l.accepted.Load() >= n })
	l.halt.Store(true)
	select {
	case <-sending:
	case <-ctx.Done():
		t.Fatalf("sending did not finish within 3 minutes: %d of %d accepted", l.accepted.Load(), l.taken.Load())
	}
	t.Logf("sent %d in %s", l.accepted.Load(), time.Since(began).Round(time.Millisecond))
	if l.err != nil {
		t.Fatalf("sending: %v", l.err)
	}
	if int64(len(l.ids)) != l.taken.Load() {
		t.Fatalf("accepted %d of %d", len(l.ids), l.taken.Load())
	}
	if !srv.running() {
		t.Fatalf("herald exited during the outages:\n%s", srv.tail())
	}

	// It came back by itself: pool, listener and leader connected again.
	testenv.WaitFor(t, "the listener and the leader to reconnect", 20*time.Second, func() bool {
		return backendCount(t, app+" listener") == 1 && backendCount(t, app+" leader") == 1
	})
	sentAt := time.Now()
	views := settle(t, dbURL, []*client{c}, append(l.ids, probe), 60*time.Second)
	t.Logf("settled %s after the last 202", time.Since(sentAt).Round(time.Millisecond))
	counts, _ := k.snapshot()
	t.Logf("outage test: 503s=%d conn_errors=%d %s", l.stats.unavailable.Load(), l.stats.connErrors.Load(),
		checkMessages(t, views, counts, cutUnknowns(t, dbURL, cuts)))
	if code := srv.stop(30 * time.Second); code != 0 {
		t.Fatalf("SIGTERM exit code %d:\n%s", code, srv.tail())
	}
	// Count the proof: reconciliation finds every 202 accounted for.
	wantAccounted(t, srv.config)
}

// cut is one time the test ended herald's database sessions.
type cut struct {
	name         string
	began, ended time.Time
	mark         int // herald's log position when it began
}

// cutSessions waits until the herald named app has its pool, its listener
// and its leader connected, ends all of their sessions, and fails the test
// unless it ended at least one pool session, the listener and the leader:
// a cut that ends nothing proves nothing.
func cutSessions(t *testing.T, srv *server, app, name string) cut {
	t.Helper()
	testenv.WaitFor(t, name+": herald's pool, listener and leader to be connected", 30*time.Second, func() bool {
		return backendCount(t, app) >= 1 && backendCount(t, app+" listener") == 1 && backendCount(t, app+" leader") == 1
	})
	c := cut{name: name, mark: srv.logs.Mark(), began: time.Now()}
	pool := testpg.TerminateBackends(t, app)
	listener := testpg.TerminateBackends(t, app+" listener")
	leader := testpg.TerminateBackends(t, app+" leader")
	c.ended = time.Now()
	if pool < 1 || listener != 1 || leader != 1 {
		t.Fatalf("%s ended %d pool, %d listener and %d leader sessions; want at least 1, 1 and 1", name, pool, listener, leader)
	}
	return c
}

// awaitNoticed waits until herald's log, after the cut began, shows that its
// listener and its leader election lost their connections.
func (c cut) awaitNoticed(t *testing.T, srv *server) {
	t.Helper()
	testenv.WaitFor(t, c.name+": herald to log that its listener and its leader election lost their connections", 30*time.Second, func() bool {
		out := srv.logs.Since(c.mark)
		return strings.Contains(out, "postgres: wake-up listener disconnected") &&
			strings.Contains(out, "postgres: leader election lost its connection")
	})
}

// cutUnknowns says which UNKNOWN deliveries in the database at dbURL the
// cuts explain. A claim whose statement was running when its session was
// ended may have committed with its answer lost; the sender, retrying,
// finds its own claim, backs off without calling the provider, and the
// stale sweep settles the row UNKNOWN. So such a claim had no call, was
// made just before a cut ended (claimed_at, on the database's clock, is
// its transaction's start: 1 s of slack before the cut for a statement
// slowed by load, 200 ms after), and one cut can explain no more of them
// than the sends the lane runs at once. (A result that could not be
// written for 30 s would also end UNKNOWN, after its call; no outage here
// lasts that long.)
func cutUnknowns(t *testing.T, dbURL string, cuts []cut) map[string]unknownMay {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT message_id, claimed_at FROM deliveries WHERE state = 'UNKNOWN' AND claimed_at IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	type claim struct {
		id string
		at time.Time
	}
	claims, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (claim, error) {
		var c claim
		return c, r.Scan(&c.id, &c.at)
	})
	if err != nil {
		t.Fatalf("read UNKNOWN deliveries: %v", err)
	}
	perCut := config.DefaultLaneConcurrency[heraldtype.LaneTransactional] // the tests' kind is transactional
	explained := make([]int, len(cuts))
	out := map[string]unknownMay{}
	for _, cl := range claims {
		for i, c := range cuts {
			if cl.at.Before(c.began.Add(-time.Second)) || cl.at.After(c.ended.Add(200*time.Millisecond)) || explained[i] == perCut {
				continue
			}
			explained[i]++
			out[cl.id] = unknownMay{why: fmt.Sprintf("claimed at %s as %s ended its session", cl.at.Format("15:04:05.000"), c.name)}
			break
		}
	}
	return out
}

// outage makes the database refuse connections, ends herald's sessions,
// checks that herald reports the outage (readyz and POST answer 503, healthz
// 200) and then lets connections in again and waits until herald is ready.
// It returns the cut and the id of the probe that was retried through it.
func outage(t *testing.T, dbName, app string, srv *server) (cut, string) {
	t.Helper()
	db := pgx.Identifier{dbName}.Sanitize()
	testpg.Exec(t, testpg.BaseURL(), "ALTER DATABASE "+db+" ALLOW_CONNECTIONS false")
	t.Cleanup(func() { testpg.Exec(t, testpg.BaseURL(), "ALTER DATABASE "+db+" ALLOW_CONNECTIONS true") })
	oc := cut{name: "the outage", mark: srv.logs.Mark(), began: time.Now()}
	// Whatever reconnected since the last drop.
	terminateHerald(t, app)
	c := srv.client("crash-key")
	status := func(path string) int {
		resp, err := testenv.HTTP.Get(c.base() + path)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	testenv.WaitFor(t, "readyz to report the outage", 10*time.Second, func() bool { return status("/readyz") == http.StatusServiceUnavailable })
	if got := status("/healthz"); got != http.StatusOK {
		t.Fatalf("healthz answered %d during the outage", got)
	}
	// A POST that cannot be written is a 503 problem, and its key stays free.
	st := &postStats{}
	probe := map[string]any{"recipient": "probe", "event_id": "probe", "kind": "crash.test", "params": map[string]any{"amount": 1}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		id  string
		err error
	}
	got := make(chan result, 1)
	go func() {
		id, err := postAny(ctx, []*client{c}, 0, "outage-probe", probe, st)
		got <- result{id, err}
	}()
	testenv.WaitFor(t, "a 503 during the outage", 10*time.Second, func() bool { return st.unavailable.Load() > 0 })
	select {
	case r := <-got:
		t.Fatalf("POST during the outage ended: id=%q err=%v", r.id, r.err)
	default: // it still retries: the 503s above say why
	}

	testpg.Exec(t, testpg.BaseURL(), "ALTER DATABASE "+db+" ALLOW_CONNECTIONS true")
	oc.ended = time.Now()
	testenv.WaitFor(t, "readyz after the outage", 20*time.Second, func() bool { return status("/readyz") == http.StatusOK })
	var r result
	select {
	case r = <-got: // the same key, retried, is accepted once the database is back
		if r.err != nil {
			t.Fatalf("POST retried through the outage: %v", r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("POST retried through the outage was not accepted within 20 s after it")
	}
	if nv, code, err := c.get(context.Background(), r.id); err != nil || code != http.StatusOK || len(nv.Deliveries) != 1 {
		t.Fatalf("the probe accepted after the outage: code %d err %v", code, err)
	}
	return oc, r.id
}

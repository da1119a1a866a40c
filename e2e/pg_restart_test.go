package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testpg"
)

// EnvPGRestart enables TestPostgresRestart, which stops and starts the
// PostgreSQL server the tests use.
const EnvPGRestart = "HERALD_TEST_PG_RESTART"

// TestPostgresRestart stops the whole PostgreSQL server under a running
// herald and starts it again. It runs only with HERALD_TEST_PG_RESTART=1,
// never by default: every other package's tests use the same server
// concurrently (go test ./... runs packages in parallel), and a stopped
// server fails them. Run it on its own, as .ci/run does after the other
// tests:
//
//	HERALD_TEST_PG_RESTART=1 go test ./e2e -run TestPostgresRestart -count=1
//
// Like the outage test, it allows a message to end UNKNOWN only if it was
// claimed as the stop ended its session (cutUnknowns), here with at most
// one call (see below).
//
// It is not parallel, so inside the e2e package it runs while the parallel
// tests wait. The server is found with pg_lsclusters by the port of
// HERALD_TEST_POSTGRES_URL and controlled with pg_ctlcluster; it is started
// again in t.Cleanup whatever happens.
func TestPostgresRestart(t *testing.T) {
	if os.Getenv(EnvPGRestart) != "1" {
		t.Skip("PostgreSQL restart test: set " + EnvPGRestart + "=1 to stop and start the test server (run it alone)")
	}
	testpg.Require(t)
	cluster := clusterOf(t, testpg.BaseURL())
	ctl := func(action string) error {
		args := append([]string{"--skip-systemctl-redirect"}, cluster...)
		args = append(args, action)
		if action != "start" {
			args = append(args, "-m", "fast")
		}
		if out, err := exec.Command("pg_ctlcluster", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("pg_ctlcluster %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	dbURL := testpg.Database(t)
	// Registered after Database, so it runs first: the database is dropped
	// on a running server.
	t.Cleanup(func() {
		if exec.Command("pg_isready", "-q", "-h", hostOf(testpg.BaseURL()), "-p", portOf(testpg.BaseURL())).Run() != nil {
			if err := ctl("start"); err != nil {
				t.Errorf("restart test: PostgreSQL is down and could not be started: %v", err)
			}
		}
	})
	app := appName("herald_restart")
	k := newRouteSink()
	sinkSrv := httptest.NewServer(k)
	defer sinkSrv.Close()
	addr := freeAddr(t)
	srv := newServer(t, crashConfig(t, addr, sinkSrv.URL+"/h", crashSetup{
		database: testpg.WithParams(dbURL, "application_name", app),
	}), addr)
	srv.start()
	c := srv.client("crash-key")
	status := func(path string) int {
		resp, err := testenv.HTTP.Get(c.base() + path)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	const n = 800
	l := &load{n: n, workers: 8, clients: []*client{c}, kind: "crash.test", prefix: "restart"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sending := make(chan struct{})
	go func() { defer close(sending); l.run(ctx) }()

	testenv.WaitFor(t, "a third accepted", time.Minute, func() bool { return l.accepted.Load() >= n/3 })
	stopped := cut{name: "the server's restart", mark: srv.logs.Mark(), began: time.Now()}
	if err := ctl("stop"); err != nil {
		t.Fatal(err)
	}
	t.Logf("PostgreSQL stopped after %d accepted", l.accepted.Load())
	testenv.WaitFor(t, "readyz to report the outage", 10*time.Second, func() bool { return status("/readyz") == http.StatusServiceUnavailable })
	testenv.WaitFor(t, "a 503 while the server is down", 10*time.Second, func() bool { return l.stats.unavailable.Load() > 0 })
	if got := status("/healthz"); got != http.StatusOK {
		t.Fatalf("healthz answered %d while PostgreSQL was down", got)
	}
	if err := ctl("start"); err != nil {
		t.Fatal(err)
	}
	stopped.ended = time.Now()
	t.Logf("PostgreSQL started again; %d 503s while it was down", l.stats.unavailable.Load())
	testenv.WaitFor(t, "readyz after the restart", 30*time.Second, func() bool { return status("/readyz") == http.StatusOK })
	select {
	case <-sending:
	case <-ctx.Done():
		t.Fatalf("sending did not finish within 3 minutes: %d of %d accepted", l.accepted.Load(), n)
	}
	if l.err != nil {
		t.Fatalf("sending: %v", l.err)
	}
	if len(l.ids) != n {
		t.Fatalf("accepted %d of %d", len(l.ids), n)
	}
	if !srv.running() {
		t.Fatalf("herald exited during the restart:\n%s", srv.tail())
	}
	stopped.awaitNoticed(t, srv)
	testenv.WaitFor(t, "the listener and the leader to reconnect", 30*time.Second, func() bool {
		return backendCount(t, app+" listener") == 1 && backendCount(t, app+" leader") == 1
	})
	views := settle(t, dbURL, []*client{c}, l.ids, 60*time.Second)
	counts, _ := k.snapshot()
	// Unlike a cut, a restart keeps the database away for seconds (shutdown,
	// start, herald's reconnect backoff), which on a loaded machine can
	// outlast stale_claim_after (6 s here): a claim that committed just
	// before the stop may have made its one call, and the stale sweep then
	// ended it UNKNOWN before its result could be written. One call at most,
	// never two.
	unknowns := cutUnknowns(t, dbURL, []cut{stopped})
	for id, u := range unknowns {
		u.maxCalls = 1
		unknowns[id] = u
	}
	t.Logf("restart test: 503s=%d %s", l.stats.unavailable.Load(), checkMessages(t, views, counts, unknowns))
	if code := srv.stop(30 * time.Second); code != 0 {
		t.Fatalf("SIGTERM exit code %d:\n%s", code, srv.tail())
	}
}

// clusterOf returns the version and name of the local cluster that listens
// on rawURL's port, from pg_lsclusters.
func clusterOf(t *testing.T, rawURL string) []string {
	t.Helper()
	out, err := exec.Command("pg_lsclusters", "--no-header").Output()
	if err != nil {
		t.Fatalf("pg_lsclusters: %v (the restart test needs the Debian postgresql-common tools)", err)
	}
	port := portOf(rawURL)
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[2] == port {
			return f[:2]
		}
	}
	t.Fatalf("no local cluster listens on port %s:\n%s", port, out)
	return nil
}

func portOf(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Port() == "" {
		return "5432"
	}
	return u.Port()
}

func hostOf(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Hostname() == "" {
		return "127.0.0.1"
	}
	return u.Hostname()
}

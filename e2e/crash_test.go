package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testpg"
)

// crashSetup describes one deployment shape for the crash test.
type crashSetup struct {
	// database is the config's database value.
	database string
	// extra is appended to the config (transport, rabbitmq_url…).
	extra string
	// env is added to the process environment.
	env []string
}

// crashConfig writes a config for a herald that posts to sinkURL. The
// provider timeout (5 s) leaves a sink that answers at once ample time even
// on a loaded machine, so no call of these tests ends UNKNOWN by timing
// out; lease and stale_claim_after must exceed it.
func crashConfig(t *testing.T, addr, sinkURL string, cs crashSetup) string {
	path := filepath.Join(t.TempDir(), "herald.yaml")
	writeFile(t, path, fmt.Sprintf(`listen: %s
database: %s
api_keys:
  - {key: crash-key, tenant: crash}
providers:
  - {name: sink, type: webhook, channel: webhook, url: %s, timeout: 5s}
kinds:
  - name: crash.test
    category: transactional
    channels: [webhook]
    templates:
      webhook: {title: "Paid", body: "Paid {{.amount}} won"}
lease: 8s
stale_claim_after: 6s
sweep_interval: 1s
poll_interval: 100ms
%s`, addr, cs.database, sinkURL, cs.extra))
	return path
}

// runCrash sends n notifications through a herald that is SIGKILLed kills
// times at random moments and restarted, then holds every message to the
// promise (checkMessages): after each kill it reads which claims the dead
// process left SENDING; exactly those may, and must, end UNKNOWN, and every
// other message ends PROVIDER_ACCEPTED with exactly one 2xx from the sink.
func runCrash(t *testing.T, cs crashSetup, n, kills int, seed uint64) {
	k := newRouteSink()
	sinkSrv := httptest.NewServer(k)
	defer sinkSrv.Close()
	// stranded reads what the process pid, just killed, left SENDING;
	// unsettled counts the sends herald has yet to finish (qUnsettled).
	var stranded func(pid int) []string
	var unsettled func() int
	if path, ok := strings.CutPrefix(cs.database, "sqlite:"); ok {
		stranded = func(pid int) []string { return strandedSQLite(t, path, pid) }
		unsettled = func() int { return unsettledSQLite(t, path) }
	} else {
		dbURL := cs.database
		app := appName("herald_crash")
		cs.database = testpg.WithParams(dbURL, "application_name", app)
		stranded = func(pid int) []string { return strandedPostgres(t, dbURL, app, pid) }
		unsettled = func() int { return unsettledPostgres(t, dbURL) }
	}
	addr := freeAddr(t)
	srv := newServer(t, crashConfig(t, addr, sinkSrv.URL, cs), addr, cs.env...)
	srv.start()
	c := newClient(addr, "crash-key")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// Senders: 8 clients, each retrying through restarts with the same key.
	var accepted sync.Map // id → key
	var next atomic.Int64
	var sendErr atomic.Value
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				key := fmt.Sprintf("crash-%d", i)
				id, err := c.post(ctx, key, map[string]any{
					"recipient": fmt.Sprintf("user-%d", i%97), "event_id": key, "kind": "crash.test",
					"params": map[string]any{"amount": i},
				})
				if err != nil {
					sendErr.Store(err)
					return
				}
				accepted.Store(id, key)
			}
		}()
	}
	sending := make(chan struct{})
	go func() { wg.Wait(); close(sending) }()

	// The killer: SIGKILL at random points of the run, restart at once. The
	// points are chosen by progress (how many notifications were sent), so
	// they spread over the run however fast the deployment is; the last one
	// may fall after sending, while deliveries are still being made.
	rng := rand.New(rand.NewPCG(seed, seed))
	points := make([]int64, kills)
	for i := range points {
		points[i] = int64(n/20 + rng.IntN(n))
	}
	slices.Sort(points)
	unknown := map[string]unknownMay{}
	for i, at := range points {
		for next.Load() < at {
			select {
			case <-sending:
				at = 0 // sending finished: kill now, mid-delivery
			case <-ctx.Done():
				t.Fatalf("timed out waiting for %d notifications to be sent before kill %d", at, i+1)
			case <-time.After(2 * time.Millisecond):
			}
		}
		srv.kill()
		pid := srv.cmd.Process.Pid
		// The dead process's claims without a result: its call may have
		// gone out, and nothing but the stale sweep may settle them.
		left := stranded(pid)
		for _, m := range left {
			unknown[m] = unknownMay{why: fmt.Sprintf("SENDING when kill %d stopped pid %d", i+1, pid), must: true, maxCalls: 1}
		}
		t.Logf("kill %d at %d sent: %d claims left SENDING", i+1, min(next.Load(), int64(n)), len(left))
		srv.start()
	}
	select {
	case <-sending:
	case <-ctx.Done():
		t.Fatalf("sending did not finish within 4 minutes: %d of %d taken", min(next.Load(), int64(n)), n)
	}
	if err, _ := sendErr.Load().(error); err != nil {
		t.Fatalf("sending: %v", err)
	}

	var ids []string
	accepted.Range(func(id, _ any) bool { ids = append(ids, id.(string)); return true })
	if len(ids) != n {
		t.Fatalf("accepted %d of %d", len(ids), n)
	}
	views := awaitTerminal(t, []*client{c}, ids, 90*time.Second)
	counts, _ := k.snapshot()
	t.Logf("crash test: kills=%d %s", kills, checkMessages(t, views, counts, unknown))
	// Every delivery has ended, but the outbox rows the last killed process
	// held wait for their lease (8 s) and a sweep before herald finishes them:
	// reconciliation below must find herald done by itself, not repair it.
	testenv.WaitFor(t, "herald to finish every outbox row the killed processes held", 60*time.Second,
		func() bool { return unsettled() == 0 })
	if code := srv.stop(30 * time.Second); code != 0 {
		t.Fatalf("SIGTERM exit code %d:\n%s", code, srv.tail())
	}
	// Count the proof: reconciliation finds every 202 accounted for.
	wantAccounted(t, srv.config)
}

func TestCrashSQLite(t *testing.T) {
	skipShort(t, "crash test")
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("kill schedule seed %d", seed)
	runCrash(t, crashSetup{database: "sqlite:" + filepath.Join(t.TempDir(), "herald.db")}, 2000, 5, seed)
}

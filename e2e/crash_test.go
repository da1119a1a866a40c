package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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

// crashConfig writes a config for a herald that posts to sinkURL.
func crashConfig(t *testing.T, addr, sinkURL string, cs crashSetup) string {
	path := filepath.Join(t.TempDir(), "herald.yaml")
	writeFile(t, path, fmt.Sprintf(`listen: %s
database: %s
api_keys:
  - {key: crash-key, tenant: crash}
providers:
  - {name: sink, type: webhook, channel: webhook, url: %s, timeout: 2s}
kinds:
  - name: crash.test
    category: transactional
    channels: [webhook]
    templates:
      webhook: {title: "Paid", body: "Paid {{.amount}} won"}
lease: 5s
stale_claim_after: 3s
sweep_interval: 1s
poll_interval: 100ms
%s`, addr, cs.database, sinkURL, cs.extra))
	return path
}

// runCrash sends n notifications through a herald that is SIGKILLed kills
// times at random moments and restarted, then checks that every 202 reached a
// terminal state for all its deliveries and that no message id was answered
// 2xx twice.
func runCrash(t *testing.T, cs crashSetup, n, kills int, seed uint64) {
	k := newRouteSink()
	sinkSrv := httptest.NewServer(k)
	defer sinkSrv.Close()
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
	for i, at := range points {
		for next.Load() < at {
			select {
			case <-sending:
				at = 0 // sending finished: kill now, mid-delivery
			case <-ctx.Done():
				t.Fatal("timed out")
			case <-time.After(2 * time.Millisecond):
			}
		}
		srv.kill()
		t.Logf("kill %d at %d sent", i+1, min(next.Load(), int64(n)))
		srv.start()
	}
	<-sending
	if err, _ := sendErr.Load().(error); err != nil {
		t.Fatalf("sending: %v", err)
	}

	// Wait until every delivery of every 202 is terminal.
	var ids []string
	accepted.Range(func(id, _ any) bool { ids = append(ids, id.(string)); return true })
	states := map[string]int{}
	lost := 0
	deadline := time.Now().Add(90 * time.Second)
	for {
		clear(states)
		lost, pending := 0, 0
		for _, id := range ids {
			nv, code, err := c.get(ctx, id)
			if err != nil {
				t.Fatalf("GET %s: %v", id, err)
			}
			if code == 404 {
				lost++
				continue
			}
			if len(nv.Deliveries) != 1 {
				t.Fatalf("%s has %d deliveries", id, len(nv.Deliveries))
			}
			for _, d := range nv.Deliveries {
				states[d.State]++
				if !terminal(d.State) {
					pending++
				}
			}
		}
		if lost > 0 {
			t.Fatalf("%d accepted notifications are gone", lost)
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d deliveries still not terminal: %v\n%s", pending, states, srv.tail())
		}
		time.Sleep(250 * time.Millisecond)
	}

	counts, _ := k.snapshot()
	dups := duplicates(counts)
	keys := make([]string, 0, len(states))
	for s := range states {
		keys = append(keys, s)
	}
	sort.Strings(keys)
	var per []string
	for _, s := range keys {
		per = append(per, fmt.Sprintf("%s=%d", s, states[s]))
	}
	t.Logf("crash test: accepted=%d kills=%d states{%s} sink_calls=%d duplicates=%d lost=%d",
		len(ids), kills, strings.Join(per, " "), len(counts), len(dups), lost)
	if len(ids) != n {
		t.Fatalf("accepted %d of %d", len(ids), n)
	}
	if len(dups) > 0 {
		t.Fatalf("message ids answered 2xx more than once: %v", dups)
	}
	if states["PROVIDER_ACCEPTED"] > len(counts) {
		t.Fatalf("%d PROVIDER_ACCEPTED but the sink saw only %d messages", states["PROVIDER_ACCEPTED"], len(counts))
	}
	if code := srv.stop(30 * time.Second); code != 0 {
		t.Fatalf("SIGTERM exit code %d:\n%s", code, srv.tail())
	}
}

func terminal(state string) bool {
	switch state {
	case "PROVIDER_ACCEPTED", "DELIVERED", "PERMANENT_FAILURE", "RETRY_EXHAUSTED", "UNKNOWN", "SUPPRESSED", "EXPIRED", "FAILED":
		return true
	}
	return false
}

func TestCrashSQLite(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: skipped in -short mode")
	}
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("kill schedule seed %d", seed)
	runCrash(t, crashSetup{database: "sqlite:" + filepath.Join(t.TempDir(), "herald.db")}, 2000, 5, seed)
}

package e2e

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/testpg"
)

// TestCrashPostgres is the single-process SIGKILL test (runCrash) on
// PostgreSQL.
func TestCrashPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: skipped in -short mode")
	}
	t.Parallel()
	dbURL := testpg.Database(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("kill schedule seed %d", seed)
	runCrash(t, crashSetup{database: dbURL}, 600, 4, seed)
}

// TestSeveralProcessesSharePostgres runs three herald processes on one
// database, each posting to its own path of one webhook sink, while clients
// spread notifications over all three. Mid-run the leader is SIGKILLed with
// a provider call in flight and not restarted. The other two must finish
// its work: its leases expire and they take the rows; its claimed delivery
// (the call may have gone out) ends UNKNOWN and is never called again; a
// survivor takes over leadership. At the end every 202 is terminal, no
// message id was answered 2xx twice, and every survivor made provider calls.
func TestSeveralProcessesSharePostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test: skipped in -short mode")
	}
	t.Parallel()
	dbURL := testpg.Database(t)
	k := newRouteSink()
	sinkSrv := httptest.NewServer(k)
	defer sinkSrv.Close()
	defer close(k.release)

	const procs = 3
	servers := make([]*server, procs)
	clients := make([]*client, procs)
	for i := range procs {
		addr := freeAddr(t)
		path := fmt.Sprintf("/p%d", i+1)
		servers[i] = newServer(t, crashConfig(t, addr, sinkSrv.URL+path, crashSetup{database: dbURL}), addr)
		clients[i] = newClient(addr, "crash-key")
	}
	for _, s := range servers {
		startServer(t, s) // one at a time: the first applies the migrations
	}
	leader := -1
	waitFor(t, "a leader", 20*time.Second, func() bool {
		for i, s := range servers {
			if len(logLines(s.logs.String(), "became leader")) > 0 {
				leader = i
				return true
			}
		}
		return false
	})
	victim := leader
	victimPath := fmt.Sprintf("/p%d", victim+1)
	// Hold one of the victim's provider calls once it has made a few, so the
	// kill lands with a claim in flight.
	k.mu.Lock()
	k.hold = func(path string, calls int) bool { return path == victimPath && calls >= 20 }
	k.mu.Unlock()

	const n = 2400
	l := &load{n: n, workers: 12, clients: clients, kind: "crash.test", prefix: "multi"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sending := make(chan struct{})
	go func() { defer close(sending); l.run(ctx) }()

	var heldID string
	select {
	case heldID = <-k.held:
	case <-time.After(60 * time.Second):
		t.Fatalf("the victim (process %d) made no provider call to hold", victim+1)
	}
	servers[victim].kill()
	var orphaned int
	if err := pgQuery(dbURL, `SELECT count(*)::int FROM outbox WHERE state = 'CLAIMED' AND claimed_by LIKE '%-' || $1::text || '-%'`,
		[]any{fmt.Sprint(servers[victim].cmd.Process.Pid)}, &orphaned); err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGKILLed process %d (the leader) after %d accepted, holding %s; %d outbox rows left leased to it",
		victim+1, l.accepted.Load(), heldID, orphaned)
	if orphaned == 0 {
		t.Fatal("the killed process held no lease; the test proves nothing")
	}
	<-sending
	if l.err != nil {
		t.Fatalf("sending: %v", l.err)
	}

	var live []*client
	for i, c := range clients {
		if i != victim {
			live = append(live, c)
		}
	}
	states := settle(t, dbURL, live, l.ids, 60*time.Second)
	counts, paths := k.snapshot()
	dups := duplicates(counts)
	t.Logf("multi-process test: accepted=%d failovers=%d 503s=%d states{%s} sink_calls=%d per_process=%v duplicates=%d",
		len(l.ids), l.stats.failovers.Load(), l.stats.unavailable.Load(), formatStates(states), len(counts), paths, len(dups))
	if len(l.ids) != n {
		t.Fatalf("accepted %d of %d", len(l.ids), n)
	}
	if len(dups) > 0 {
		t.Fatalf("message ids answered 2xx more than once: %v", dups)
	}
	if states["PROVIDER_ACCEPTED"] > len(counts) {
		t.Fatalf("%d PROVIDER_ACCEPTED but the sink saw only %d messages", states["PROVIDER_ACCEPTED"], len(counts))
	}
	// The held call's claim died with its process: UNKNOWN, never resent.
	if nv, code, err := live[0].get(ctx, strings.TrimSuffix(heldID, ".webhook")); err != nil || code != 200 ||
		len(nv.Deliveries) != 1 || nv.Deliveries[0].State != "UNKNOWN" || counts[heldID] != 1 {
		t.Fatalf("held message %s: code %d err %v view %+v calls %d; want UNKNOWN and one call", heldID, code, err, nv, counts[heldID])
	}
	// The work was shared, and a survivor took over the leadership.
	for i := range servers {
		if i != victim && paths[fmt.Sprintf("/p%d", i+1)] == 0 {
			t.Errorf("process %d made no provider call", i+1)
		}
	}
	took := false
	for i, s := range servers {
		if i != victim && len(logLines(s.logs.String(), "became leader")) > 0 {
			took = true
		}
	}
	if !took {
		t.Error("no surviving process became leader")
	}
	for i, s := range servers {
		if i == victim {
			continue
		}
		if code := s.stop(30 * time.Second); code != 0 {
			t.Fatalf("process %d: SIGTERM exit code %d:\n%s", i+1, code, s.tail())
		}
	}
}

package webhook_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/webhook"
)

// TestConnectionsAreKeptAtHighConcurrency: the connections of many calls
// in flight at once go back to the pool, so a second wave as wide as the
// first reuses them instead of dialling again. Each wave is held at the
// receiver until all its calls have arrived, so it needs inFlight
// connections at once. With an idle limit of 128 (the adapter's former
// setting) the second wave must dial at least inFlight-128 anew; the bound
// leaves room for the few connections the transport may not have pooled
// yet when the second wave starts (it pools them from its own goroutine).
func TestConnectionsAreKeptAtHighConcurrency(t *testing.T) {
	t.Parallel()
	const inFlight = 300
	var conns atomic.Int64
	var mu sync.Mutex
	arrived, release := 0, make(chan struct{})
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if arrived++; arrived == inFlight {
			close(release)
		}
		wait := release
		mu.Unlock()
		select {
		case <-wait:
			w.WriteHeader(http.StatusAccepted)
		case <-r.Context().Done():
		}
	}))
	ts.Config.ErrorLog = quiet
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	ts.Start()
	t.Cleanup(ts.Close)

	w := webhook.New(webhook.Config{URL: ts.URL, Timeout: callTimeout})
	wave := func(n int) {
		t.Helper()
		var wg sync.WaitGroup
		for i := range inFlight {
			wg.Go(func() {
				if out := w.Send(context.Background(), message(fmt.Sprintf("msg-wave%d-%d", n, i))); out.Class != provider.Accepted {
					t.Errorf("wave %d call %d: %+v", n, i, out)
				}
			})
		}
		wg.Wait()
		mu.Lock()
		arrived, release = 0, make(chan struct{})
		mu.Unlock()
	}
	wave(1)
	first := conns.Load()
	wave(2)
	if again := conns.Load() - first; again > inFlight/2 {
		t.Fatalf("the second wave of %d calls opened %d new connections (the first opened %d), want the first wave's reused",
			inFlight, again, first)
	}
	t.Logf("connections: first wave %d, second wave %d new", first, conns.Load()-first)
}

package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/httpapi"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/metrics"
)

// The store's gauges are computed by the leader on a timer and served
// from memory (issue 13): scrapes never read the store, a process that
// does not lead leaves them out, and a failed computation keeps the last
// values and shows a scrape no error.
func TestStoreGaugesAreServedFromMemory(t *testing.T) {
	t.Parallel()
	var reads atomic.Int64
	var fail atomic.Bool
	g := &storeGauges{
		backlogOf: func(context.Context) (map[heraldtype.Lane]int, error) {
			reads.Add(1)
			if fail.Load() {
				return nil, errors.New("dial postgres://herald:s3cret@db: connection refused")
			}
			return map[heraldtype.Lane]int{heraldtype.LaneAlert: 7}, nil
		},
		figuresOf: func(context.Context) (metrics.ReconcileFigures, error) { return metrics.ReconcileFigures{}, nil },
		logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	m := metrics.New(g.Backlog)
	m.WatchReconcile([]string{"lease"}, g.Figures)
	srv := httptest.NewServer(httpapi.MetricsHandler(m, "", g.logger))
	t.Cleanup(srv.Close)
	scrape := func() string {
		t.Helper()
		res, err := testenv.HTTP.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("scrape: %d %s", res.StatusCode, body)
		}
		return string(body)
	}
	const backlog = `herald_outbox_backlog{lane="alert"} 7`
	if s := scrape(); strings.Contains(s, "herald_outbox_backlog") || strings.Contains(s, "herald_reconcile_unknown") {
		t.Fatal("a process that has computed nothing shows the store's gauges")
	}
	now := time.Now()
	g.refresh(context.Background(), now)
	for range 20 {
		if s := scrape(); !strings.Contains(s, backlog) || !strings.Contains(s, "herald_reconcile_unknown 0") {
			t.Fatalf("after a refresh the scrape lacks the gauges:\n%s", s)
		}
	}
	if n := reads.Load(); n != 1 {
		t.Fatalf("21 scrapes and a refresh read the backlog %d times, want once (the refresh)", n)
	}
	// A failed refresh keeps the last values; no scrape sees the error.
	fail.Store(true)
	g.refresh(context.Background(), now.Add(time.Minute))
	if s := scrape(); !strings.Contains(s, backlog) || strings.Contains(s, "s3cret") || strings.Contains(s, "connection refused") {
		t.Fatalf("after a failed refresh:\n%s", s)
	}
	// A process that stops leading forgets them.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { g.run(ctx, time.Hour, func() bool { return false }); close(done) }()
	testenv.WaitFor(t, "a process that does not lead to leave the backlog out", testenv.Patience, func() bool {
		return !strings.Contains(scrape(), "herald_outbox_backlog")
	})
	cancel()
	<-done
}

// The last values do not outlive a store that keeps failing: past
// staleAfter a failed refresh drops them, and a scrape leaves the gauges
// out instead of serving old figures as current.
func TestStoreGaugesGoStaleWhileTheStoreFails(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	g := &storeGauges{
		backlogOf: func(context.Context) (map[heraldtype.Lane]int, error) {
			if fail.Load() {
				return nil, errors.New("connection refused")
			}
			return map[heraldtype.Lane]int{heraldtype.LaneAlert: 7}, nil
		},
		figuresOf:  func(context.Context) (metrics.ReconcileFigures, error) { return metrics.ReconcileFigures{}, nil },
		logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		staleAfter: 3 * time.Minute,
	}
	now := time.Now()
	g.refresh(context.Background(), now)
	fail.Store(true)
	g.refresh(context.Background(), now.Add(2*time.Minute))
	if _, err := g.Backlog(context.Background()); err != nil {
		t.Fatalf("within staleAfter: %v, want the last values", err)
	}
	g.refresh(context.Background(), now.Add(4*time.Minute))
	if _, err := g.Backlog(context.Background()); !errors.Is(err, metrics.ErrNoValue) {
		t.Fatalf("past staleAfter: %v, want ErrNoValue", err)
	}
	if _, err := g.Figures(context.Background()); !errors.Is(err, metrics.ErrNoValue) {
		t.Fatalf("past staleAfter, figures: %v, want ErrNoValue", err)
	}
}

// A refresh that read the store for long spaces the next by gaugeSpacing
// times as long, whatever the interval: a count over a million-row backlog
// must not take the leader's connection most of the time. A quick one
// keeps the interval, and a process that starts leading refreshes at once.
func TestStoreGaugesSpaceSlowRefreshes(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	end := t0
	g := &storeGauges{
		backlogOf: func(context.Context) (map[heraldtype.Lane]int, error) { return map[heraldtype.Lane]int{}, nil },
		figuresOf: func(context.Context) (metrics.ReconcileFigures, error) { return metrics.ReconcileFigures{}, nil },
		logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		clock:     func() time.Time { return end },
	}
	const interval = 15 * time.Second
	if !g.due(t0, interval) {
		t.Fatal("no refresh yet: not due")
	}
	end = t0.Add(3 * time.Second) // the refresh read the store for 3 s
	g.refresh(context.Background(), t0)
	for _, c := range []struct {
		after time.Duration
		due   bool
	}{{15 * time.Second, false}, {29 * time.Second, false}, {30 * time.Second, true}} {
		if got := g.due(t0.Add(c.after), interval); got != c.due {
			t.Errorf("%v after a 3 s refresh: due %v, want %v", c.after, got, c.due)
		}
	}
	// A quick refresh keeps the interval.
	t1 := t0.Add(30 * time.Second)
	end = t1.Add(100 * time.Millisecond)
	g.refresh(context.Background(), t1)
	if g.due(t1.Add(14*time.Second), interval) || !g.due(t1.Add(interval), interval) {
		t.Error("after a quick refresh the interval does not rule")
	}
	// A process that stops leading and leads again refreshes at once.
	g.forget()
	if !g.due(t1.Add(time.Second), interval) {
		t.Error("after forget: not due")
	}
}

package intake_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/intake"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testsqlite"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/metrics/metricstest"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/sim"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/sqlite"
)

// handing is intake in front of a running claimer of the transactional
// lane (one slot), on a SQLite store whose creates can be made to fail.
type handing struct {
	store.Notifications
	url     string
	store   store.Store
	sim     *sim.Sim
	c       *dispatch.Claimer
	claims  atomic.Int64 // rows the claimer's claims took
	fail    atomic.Bool  // creates fail (the store is unreachable)
	panics  atomic.Bool  // creates panic (a defect below intake)
	metrics *metrics.Metrics
}

// handedCount reads herald_intake_handed_total{lane="transactional"}.
func (h *handing) handedCount(t *testing.T) float64 {
	t.Helper()
	return metricstest.Series(t, h.metrics, "herald_intake_handed_total", "lane")[string(heraldtype.LaneTransactional)]
}

func (h *handing) NotificationCreate(ctx context.Context, p store.NotificationCreateParams) (store.NotificationCreateResult, error) {
	if h.fail.Load() {
		return store.NotificationCreateResult{}, errors.New("store: unreachable")
	}
	if h.panics.Load() {
		panic("a defect below intake")
	}
	return h.store.NotificationCreate(ctx, p)
}

// countClaims is the claimer's outbox with its claimed rows counted.
type countClaims struct {
	store.Outbox
	n *atomic.Int64
}

func (c countClaims) OutboxClaim(ctx context.Context, p store.OutboxClaimParams) ([]store.Claimed, error) {
	rows, err := c.Outbox.OutboxClaim(ctx, p)
	c.n.Add(int64(len(rows)))
	return rows, err
}

func startHanding(t *testing.T) *handing {
	t.Helper()
	clk := clock.Real{}
	s, err := sqlite.Open(context.Background(), testsqlite.Path(t), sqlite.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	cat, err := catalog.New([]config.Kind{{Name: "pay", Category: "transactional", Channels: []string{"webhook"},
		Templates: map[string]config.Template{"webhook": {Title: "t", Body: "b"}}}})
	if err != nil {
		t.Fatal(err)
	}
	reg := provider.NewRegistry()
	h := &handing{Notifications: s, store: s, sim: sim.New(sim.Config{})}
	reg.Register(heraldtype.ChannelWebhook, "sim", h.sim)
	snd := sender.New(sender.Config{Store: s, Providers: reg, Catalog: cat, Clock: clk, Owner: "test"})
	c := dispatch.NewClaimer(dispatch.ClaimerConfig{
		Lane: heraldtype.LaneTransactional, Store: countClaims{Outbox: s, n: &h.claims}, Wake: s.Wakeups().C(heraldtype.LaneTransactional),
		Sender: snd, Owner: "c", Concurrency: 1, Lease: time.Minute, PollInterval: time.Hour, MaxAttempts: 3,
	})
	h.c = c
	stop := testenv.Start(t, c.Run)
	t.Cleanup(stop)
	h.metrics = metrics.New(nil)
	handler := &intake.Handler{Store: h, Catalog: cat, Clock: clk, IdempotencyTTL: time.Hour, Metrics: h.metrics,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil)), Handoff: dispatch.Lanes{heraldtype.LaneTransactional: c}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handler.ServeHTTP(w, r.WithContext(auth.WithTenant(r.Context(), "t1")))
	}))
	t.Cleanup(srv.Close)
	h.url = srv.URL
	h.idle(t)
	return h
}

// idle waits until the lane's one slot is free for an offer: a send's
// provider call is counted before its slot is given back.
func (h *handing) idle(t *testing.T) {
	t.Helper()
	testenv.WaitFor(t, "the slot free", testenv.Patience, func() bool {
		if hand := h.c.Offer("t1", ""); hand != nil {
			hand.Drop()
			return true
		}
		return false
	})
}

// post sends one notification under key and returns the status.
func (h *handing) post(t *testing.T, key, event string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.url, strings.NewReader(`{"recipient":"r1","event_id":"`+event+`","kind":"pay","params":{}}`))
	req.Header.Set("Idempotency-Key", key)
	resp, err := testenv.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// sent waits until n notifications reached the provider.
func (h *handing) sent(t *testing.T, n int) {
	t.Helper()
	testenv.WaitFor(t, fmt.Sprintf("%d sends", n), testenv.Patience, func() bool { return h.sim.Total() == n })
}

// TestIntakeHandsItsRowsToItsClaimer: with a slot free, each accepted
// notification is written claimed and sent without a claim; a replay, a
// conflict, a store failure and a panic give the slot back (the lane has one), so
// the next notification is handed over too.
func TestIntakeHandsItsRowsToItsClaimer(t *testing.T) {
	t.Parallel()
	h := startHanding(t)
	for i := range 3 {
		if got := h.post(t, fmt.Sprint("k", i), fmt.Sprint("e", i)); got != http.StatusAccepted {
			t.Fatalf("POST %d: %d", i, got)
		}
		h.sent(t, i+1)
		h.idle(t)
	}
	if got := h.post(t, "k0", "e0"); got != http.StatusAccepted {
		t.Fatalf("replay: %d", got)
	}
	if got := h.post(t, "k0", "other"); got != http.StatusConflict {
		t.Fatalf("conflict: %d", got)
	}
	h.fail.Store(true)
	if got := h.post(t, "k3", "e3"); got != http.StatusServiceUnavailable {
		t.Fatalf("store down: %d", got)
	}
	h.fail.Store(false)
	h.panics.Store(true)
	req, _ := http.NewRequest(http.MethodPost, h.url, strings.NewReader(`{"recipient":"r1","event_id":"p","kind":"pay","params":{}}`))
	req.Header.Set("Idempotency-Key", "panics")
	if resp, err := testenv.HTTP.Do(req); err == nil { // the server drops the connection
		resp.Body.Close()
		t.Fatalf("a panicking create answered %d", resp.StatusCode)
	}
	h.panics.Store(false)
	h.idle(t)
	var wg sync.WaitGroup
	for i := 3; i < 6; i++ {
		wg.Go(func() {
			if got := h.post(t, fmt.Sprint("k", i), fmt.Sprint("e", i)); got != http.StatusAccepted {
				t.Errorf("POST %d: %d", i, got)
			}
		})
	}
	wg.Wait()
	h.sent(t, 6)
	// Three at once on one slot: as many are handed over as find it free
	// in turn (one, or two when the first's send ends before the last
	// offer; none when the claimer's second look after a wake-up,
	// ClaimAgainAfterWake after one that found nothing, had it pledged as
	// they came), and the claims take the others. Each row goes one way:
	// the claims took only rows of the last three, and each handed over
	// is counted, the first three among them.
	n := h.claims.Load()
	if n > 3 {
		t.Fatalf("claims took %d rows, want only those of the last three that found the slot held", n)
	}
	if got := h.handedCount(t); got != float64(6-n) {
		t.Fatalf("herald_intake_handed_total %v, want %d", got, 6-n)
	}
}

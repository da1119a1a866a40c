package ratelimit_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/ratelimit"
	"github.com/heraldhq/herald/store"
)

// fakeBuckets is a store.RateBuckets whose takes the test answers: each
// take is sent on takes and waits for its answer on grants (or answers
// itself through auto, when set).
type fakeBuckets struct {
	mu    sync.Mutex
	auto  func(p store.BucketTakeParams) (store.BucketGrant, error)
	takes chan store.BucketTakeParams
	reply chan takeReply
	slows []store.BucketSlowParams
	calls int
}

type takeReply struct {
	g   store.BucketGrant
	err error
}

func newFake() *fakeBuckets {
	return &fakeBuckets{takes: make(chan store.BucketTakeParams), reply: make(chan takeReply)}
}

func (f *fakeBuckets) BucketTake(ctx context.Context, p store.BucketTakeParams) (store.BucketGrant, error) {
	f.mu.Lock()
	f.calls++
	auto := f.auto
	f.mu.Unlock()
	if auto != nil {
		return auto(p)
	}
	f.takes <- p
	r := <-f.reply
	return r.g, r.err
}

func (f *fakeBuckets) BucketSlow(ctx context.Context, p store.BucketSlowParams) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slows = append(f.slows, p)
	return nil
}

func (f *fakeBuckets) takeCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// next receives the next take; after 30 s it fails the test.
func (f *fakeBuckets) next(t *testing.T) store.BucketTakeParams {
	t.Helper()
	return f.nextWithin(t, 30*time.Second)
}

func (f *fakeBuckets) nextWithin(t *testing.T, d time.Duration) store.BucketTakeParams {
	t.Helper()
	select {
	case p := <-f.takes:
		return p
	case <-time.After(d):
		t.Fatalf("no take within %s", d)
		panic("unreachable")
	}
}

func (f *fakeBuckets) answer(g store.BucketGrant, err error) { f.reply <- takeReply{g, err} }

// limiter is a limiter of provider "p" at 200/s (grants of 10) with a
// burst of 200 (a reserve of 50) on f; mutate adjusts its config.
func limiter(t *testing.T, f *fakeBuckets, mutate func(c *ratelimit.Config)) *ratelimit.Limiter {
	t.Helper()
	c := ratelimit.Config{
		Store: f, Limits: map[string]ratelimit.Limit{"p": {PerSecond: 200, Burst: 200}},
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
	}
	if mutate != nil {
		mutate(&c)
	}
	return ratelimit.New(c)
}

type result struct {
	who   string
	later time.Duration
	err   error
}

// waitAsync calls Wait in a goroutine and reports on out, named who.
func waitAsync(ctx context.Context, l *ratelimit.Limiter, who string, lane heraldtype.Lane, out chan<- result) {
	go func() {
		later, err := l.Wait(ctx, "p", lane)
		out <- result{who, later, err}
	}()
}

func receive(t *testing.T, c <-chan result) result {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no answer within 30 s")
		panic("unreachable")
	}
}

func TestProviderWithoutALimitIsFree(t *testing.T) {
	t.Parallel()
	f := newFake()
	l := limiter(t, f, nil)
	for range 1000 {
		if later, err := l.Wait(context.Background(), "other", heraldtype.LaneMarketing); later != 0 || err != nil {
			t.Fatalf("Wait = %s, %v", later, err)
		}
	}
	l.Slow(context.Background(), "other", time.Minute)
	if n := f.takeCount(); n != 0 || len(f.slows) != 0 {
		t.Fatalf("%d takes and %d slows for a provider without a limit", n, len(f.slows))
	}
}

func TestOneStoreRoundTripServesAGrantOfCalls(t *testing.T) {
	t.Parallel()
	f := newFake()
	var asked []int
	f.auto = func(p store.BucketTakeParams) (store.BucketGrant, error) {
		asked = append(asked, p.Want) // one fetch loop: no race
		if p.Provider != "p" || p.Rate != 200 || p.Burst != 200 || p.Reserve != 50 || !p.Priority {
			t.Errorf("take %+v", p)
		}
		return store.BucketGrant{Granted: p.Want, Free: p.Want}, nil
	}
	clk := clock.NewFake(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)) // tokens never expire
	l := limiter(t, f, func(c *ratelimit.Config) { c.Clock = clk })
	for range 1000 {
		if later, err := l.Wait(context.Background(), "p", heraldtype.LaneAlert); later != 0 || err != nil {
			t.Fatalf("Wait = %s, %v", later, err)
		}
	}
	// 200/s × 50 ms: grants of 10 once the takes have grown to it (1, 2,
	// 4, 8, 10, …).
	if n := f.takeCount(); n > 1000/10+4 {
		t.Fatalf("%d takes for 1000 calls (asked %v)", n, asked)
	}
}

func TestTokensUnspentAfterTheWindowAreDropped(t *testing.T) {
	t.Parallel()
	f := newFake()
	f.auto = func(p store.BucketTakeParams) (store.BucketGrant, error) {
		return store.BucketGrant{Granted: 5, Free: 5}, nil
	}
	clk := clock.NewFake(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	l := limiter(t, f, func(c *ratelimit.Config) { c.Clock = clk })
	ctx := context.Background()
	if _, err := l.Wait(ctx, "p", heraldtype.LaneAlert); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := l.Wait(ctx, "p", heraldtype.LaneAlert); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.takeCount(); n != 1 {
		t.Fatalf("%d takes for the grant's 5 calls, want 1", n)
	}
	if _, err := l.Wait(ctx, "p", heraldtype.LaneAlert); err != nil {
		t.Fatal(err)
	}
	clk.Advance(51 * time.Millisecond)
	if _, err := l.Wait(ctx, "p", heraldtype.LaneAlert); err != nil {
		t.Fatal(err)
	}
	if n := f.takeCount(); n != 3 {
		t.Fatalf("%d takes; want 3: a 6th call, and a 7th after the window though 4 of the 2nd grant were left", n)
	}
}

func TestWhenShortAlertAndTransactionalGoBeforeMarketing(t *testing.T) {
	t.Parallel()
	f := newFake()
	l := limiter(t, f, nil)
	ctx := context.Background()
	out := make(chan result, 8)
	// The first marketing caller makes a take for marketing alone; it is
	// held while the others queue.
	waitAsync(ctx, l, "m1", heraldtype.LaneMarketing, out)
	if p := f.next(t); p.Priority || p.Want != 1 {
		t.Fatalf("first take %+v, want one token without priority", p)
	}
	for _, w := range []struct {
		who  string
		lane heraldtype.Lane
	}{{"m2", heraldtype.LaneMarketing}, {"t1", heraldtype.LaneTransactional}, {"a1", heraldtype.LaneAlert}} {
		waitAsync(ctx, l, w.who, w.lane, out)
	}
	waitQueued(t, l, 4)
	// One token for four callers: the alert gets it.
	f.answer(store.BucketGrant{Granted: 1, Free: 1}, nil)
	if r := receive(t, out); r.who != "a1" || r.later != 0 || r.err != nil {
		t.Fatalf("first answer %+v, want a1's token", r)
	}
	// The next take has priority (t1 waits): two tokens below the
	// reserve, which marketing may not spend.
	if p := f.next(t); !p.Priority || p.Want != 3 {
		t.Fatalf("second take %+v, want 3 with priority", p)
	}
	f.answer(store.BucketGrant{Granted: 2, Free: 0}, nil)
	if r := receive(t, out); r.who != "t1" {
		t.Fatalf("second answer %+v, want t1's token", r)
	}
	if p := f.next(t); p.Priority {
		t.Fatalf("third take %+v: only marketing waits", p)
	}
	select {
	case r := <-out:
		t.Fatalf("%s was answered with a reserved token", r.who)
	default:
	}
	// An alert arriving now spends the reserved token left, at once.
	if later, err := l.Wait(ctx, "p", heraldtype.LaneAlert); later != 0 || err != nil {
		t.Fatalf("alert Wait = %s, %v", later, err)
	}
	f.answer(store.BucketGrant{Granted: 2, Free: 2}, nil)
	got := map[string]bool{receive(t, out).who: true, receive(t, out).who: true}
	if !got["m1"] || !got["m2"] {
		t.Fatalf("last answers %v, want m1 and m2", got)
	}
}

// waitQueued waits until n callers are queued (Queued, export_test.go).
func waitQueued(t *testing.T, l *ratelimit.Limiter, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for l.Queued("p") < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d callers queued, want %d", l.Queued("p"), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestAnAlertWakesATakeForMarketing(t *testing.T) {
	t.Parallel()
	f := newFake()
	l := limiter(t, f, nil)
	ctx := context.Background()
	out := make(chan result, 2)
	waitAsync(ctx, l, "m1", heraldtype.LaneMarketing, out)
	f.next(t)
	// Marketing would wait 25 s for the bucket to pass the reserve; the
	// alert must not.
	f.answer(store.BucketGrant{Wait: 25 * time.Second}, nil)
	waitAsync(ctx, l, "a1", heraldtype.LaneAlert, out)
	if p := f.nextWithin(t, 10*time.Second); !p.Priority {
		t.Fatalf("take after the alert came %+v, want priority", p)
	}
	f.answer(store.BucketGrant{Granted: 1}, nil)
	if r := receive(t, out); r.who != "a1" {
		t.Fatalf("answer %+v, want a1's", r)
	}
}

func TestAWaitBeyondMaxWaitIsALaterOffer(t *testing.T) {
	t.Parallel()
	t.Run("TheBucketSaysSo", func(t *testing.T) {
		t.Parallel()
		f := newFake()
		f.auto = func(p store.BucketTakeParams) (store.BucketGrant, error) {
			return store.BucketGrant{Wait: 45 * time.Second}, nil
		}
		l := limiter(t, f, nil)
		if later, err := l.Wait(context.Background(), "p", heraldtype.LaneAlert); later != 45*time.Second || err != nil {
			t.Fatalf("Wait = %s, %v; want 45s later", later, err)
		}
	})
	t.Run("TheCallerWaitedThatLong", func(t *testing.T) {
		t.Parallel()
		f := newFake()
		f.auto = func(p store.BucketTakeParams) (store.BucketGrant, error) {
			return store.BucketGrant{Wait: 20 * time.Millisecond}, nil
		}
		l := limiter(t, f, func(c *ratelimit.Config) { c.MaxWait = 200 * time.Millisecond })
		start := time.Now()
		later, err := l.Wait(context.Background(), "p", heraldtype.LaneMarketing)
		if later != 200*time.Millisecond || err != nil {
			t.Fatalf("Wait = %s, %v; want MaxWait later", later, err)
		}
		if took := time.Since(start); took < 200*time.Millisecond {
			t.Fatalf("answered after %s, before MaxWait", took)
		}
	})
}

func TestSlowPausesThisProcessAndTellsTheStore(t *testing.T) {
	t.Parallel()
	f := newFake()
	f.auto = func(p store.BucketTakeParams) (store.BucketGrant, error) {
		return store.BucketGrant{Granted: p.Want, Free: p.Want}, nil
	}
	l := limiter(t, f, func(c *ratelimit.Config) { c.GrantWindow = time.Hour })
	ctx := context.Background()
	if _, err := l.Wait(ctx, "p", heraldtype.LaneAlert); err != nil {
		t.Fatal(err)
	}
	taken := f.takeCount()
	l.Slow(ctx, "p", 2*time.Minute)
	l.Slow(ctx, "p", 0)
	if want := []store.BucketSlowParams{
		{Provider: "p", For: 2 * time.Minute, Recover: 10 * time.Second},
		{Provider: "p", For: time.Second, Recover: 10 * time.Second},
	}; len(f.slows) != 2 || f.slows[0] != want[0] || f.slows[1] != want[1] {
		t.Fatalf("slows %+v, want %+v", f.slows, want)
	}
	// The tokens left are dropped, and a pause past MaxWait is a later
	// offer without asking the store.
	later, err := l.Wait(ctx, "p", heraldtype.LaneAlert)
	if later < 119*time.Second || later > 2*time.Minute || err != nil {
		t.Fatalf("Wait = %s, %v; want about 2m later", later, err)
	}
	if n := f.takeCount(); n != taken {
		t.Fatalf("%d takes while paused", n-taken)
	}
}

func TestAFailingStoreFailsTheWaitAfterStoreWait(t *testing.T) {
	t.Parallel()
	f := newFake()
	broken := errors.New("connection refused")
	f.auto = func(p store.BucketTakeParams) (store.BucketGrant, error) { return store.BucketGrant{}, broken }
	l := limiter(t, f, func(c *ratelimit.Config) { c.StoreWait = 150 * time.Millisecond })
	start := time.Now()
	_, err := l.Wait(context.Background(), "p", heraldtype.LaneAlert)
	if !errors.Is(err, broken) {
		t.Fatalf("Wait: %v, want the store's error", err)
	}
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Fatalf("gave up after %s, before StoreWait", took)
	}
	if n := f.takeCount(); n < 2 {
		t.Fatalf("%d takes: the limiter did not try again", n)
	}
}

func TestACallerThatLeavesGivesItsTokenToTheNext(t *testing.T) {
	t.Parallel()
	f := newFake()
	l := limiter(t, f, nil)
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan result, 2)
	waitAsync(ctx, l, "gone", heraldtype.LaneAlert, out)
	f.next(t)
	waitAsync(context.Background(), l, "stays", heraldtype.LaneTransactional, out)
	waitQueued(t, l, 2)
	cancel()
	if r := receive(t, out); r.who != "gone" || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("answer %+v, want gone's cancellation", r)
	}
	f.answer(store.BucketGrant{Granted: 1}, nil)
	if r := receive(t, out); r.who != "stays" || r.err != nil || r.later != 0 {
		t.Fatalf("answer %+v, want stays' token", r)
	}
}

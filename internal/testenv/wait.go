package testenv

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Patience bounds a test's wait for background work: generous for a loaded
// 2-core machine under the race detector, and still a failure with a
// message instead of a run that hangs.
const Patience = 30 * time.Second

// Recv waits for a value on ch; after Patience it fails the test, saying
// what it waited for.
func Recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(Patience):
		t.Fatalf("timed out after %s waiting for %s", Patience, what)
		panic("unreachable")
	}
}

// WaitFor polls cond until it holds; after within it fails the test, saying
// what it waited for. It waits for background work, it does not order a
// race. It polls every 2 ms at first, then less often, down to every 50 ms,
// so a slow condition (an HTTP call, a query) is not run in a tight loop.
func WaitFor(t testing.TB, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for pause := 2 * time.Millisecond; !cond(); pause = min(2*pause, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(pause)
	}
}

// Start runs fn in the background and returns stop, which cancels fn's
// context and waits for fn to return; the test's cleanup calls stop too.
// stop fails the test if fn still runs 2×Patience later: fn may first have
// to wait out a timeout of Patience (a relay's confirm timeout).
func Start(t testing.TB, fn func(ctx context.Context)) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); fn(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(2 * Patience):
				t.Errorf("still running %s after it was stopped", 2*Patience)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

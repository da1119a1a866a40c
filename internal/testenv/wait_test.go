package testenv

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a testing.TB whose Fatalf records the message and ends the
// goroutine, as the real one does.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls fn with a recorder on a goroutine of its own and returns what
// it failed with ("" if it did not).
func run(t *testing.T, fn func(tb testing.TB)) string {
	t.Helper()
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); fn(r) }()
	Recv(t, done, "the helper to return or fail")
	return r.failed
}

func TestRecvReturnsTheValue(t *testing.T) {
	t.Parallel()
	ch := make(chan int, 1)
	ch <- 7
	if got := Recv(t, ch, "7"); got != 7 {
		t.Fatalf("Recv = %d, want 7", got)
	}
}

func TestWaitFor(t *testing.T) {
	t.Parallel()
	t.Run("ReturnsOnceTheConditionHolds", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int32
		msg := run(t, func(tb testing.TB) {
			WaitFor(tb, "the third call", Patience, func() bool { return calls.Add(1) == 3 })
		})
		if msg != "" || calls.Load() != 3 {
			t.Fatalf("failed %q after %d calls, want success on the third", msg, calls.Load())
		}
	})
	t.Run("FailsSayingWhatItWaitedFor", func(t *testing.T) {
		t.Parallel()
		msg := run(t, func(tb testing.TB) {
			WaitFor(tb, "something that never happens", 20*time.Millisecond, func() bool { return false })
		})
		if want := "timed out after 20ms waiting for something that never happens"; msg != want {
			t.Fatalf("failed with %q, want %q", msg, want)
		}
	})
}

func TestStartStopCancelsAndWaits(t *testing.T) {
	t.Parallel()
	var returned atomic.Bool
	stop := Start(t, func(ctx context.Context) {
		<-ctx.Done()
		returned.Store(true)
	})
	stop()
	if !returned.Load() {
		t.Fatal("stop returned before fn did")
	}
	stop() // a second stop (the cleanup's) is a no-op
}

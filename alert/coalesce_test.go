package alert_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/heraldhq/herald/alert"
)

// A flood of one kind and reason reaches the sink as its first Burst
// alerts and, when the window ends, one alert counting the rest; another
// cause in the same window is not held back by it.
func TestCoalesceHoldsAFloodBackAndCountsIt(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	rec := &alert.Recorder{}
	c := &alert.Coalesce{Next: rec, Every: time.Minute, Burst: 3, Now: func() time.Time { return now }}
	ctx := context.Background()
	for i := range 10 {
		c.Alert(ctx, alert.Alert{Kind: alert.Parked, Reason: "EUCKR_UNENCODABLE", MessageID: fmt.Sprint("m", i), Tenant: "shop"})
	}
	c.Alert(ctx, alert.Alert{Kind: alert.UnknownOutcome, Reason: "TIMEOUT", MessageID: "x1"})
	c.Alert(ctx, alert.Alert{Kind: alert.Parked, Reason: "TEMPLATE_FAILED", MessageID: "t1"})
	ids := func() []string {
		var out []string
		for _, a := range rec.Alerts() {
			out = append(out, fmt.Sprintf("%s/%s/%s/%d", a.Kind, a.Reason, a.MessageID, a.Count))
		}
		return out
	}
	want := []string{"PARKED/EUCKR_UNENCODABLE/m0/0", "PARKED/EUCKR_UNENCODABLE/m1/0", "PARKED/EUCKR_UNENCODABLE/m2/0",
		"UNKNOWN_OUTCOME/TIMEOUT/x1/0", "PARKED/TEMPLATE_FAILED/t1/0"}
	if got := ids(); !slices.Equal(got, want) {
		t.Fatalf("within the window: %v, want %v", got, want)
	}
	// The next window: the held seven go out first, counted; the count
	// starts again.
	now = now.Add(time.Minute)
	c.Alert(ctx, alert.Alert{Kind: alert.Parked, Reason: "EUCKR_UNENCODABLE", MessageID: "m10"})
	want = append(want, "PARKED/EUCKR_UNENCODABLE//7", "PARKED/EUCKR_UNENCODABLE/m10/0")
	if got := ids(); !slices.Equal(got, want) {
		t.Fatalf("after the window: %v, want %v", got, want)
	}
	// Flush sends what the current window holds, once.
	for i := range 5 {
		c.Alert(ctx, alert.Alert{Kind: alert.Parked, Reason: "EUCKR_UNENCODABLE", MessageID: fmt.Sprint("n", i)})
	}
	c.Flush(ctx)
	c.Flush(ctx)
	got := ids()
	if last := got[len(got)-1]; last != "PARKED/EUCKR_UNENCODABLE//3" || len(got) != len(want)+2+1 {
		t.Fatalf("after the flush: %v", got)
	}
}

// Run ends each window on its own, so a flood's count goes out though no
// alert follows it.
func TestCoalesceRunEndsTheWindows(t *testing.T) {
	t.Parallel()
	rec := &alert.Recorder{}
	c := &alert.Coalesce{Next: rec, Every: 20 * time.Millisecond, Burst: 1}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	for range 4 {
		c.Alert(ctx, alert.Alert{Kind: alert.StaleClaim, Reason: "STALE_CLAIM", MessageID: "m"})
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if got := rec.Alerts(); len(got) == 2 && got[1].Count == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no count after the window: %+v", rec.Alerts())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
}

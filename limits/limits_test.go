package limits_test

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/limits"
)

func TestLimiter(t *testing.T) {
	t.Parallel()
	t.Run("NoRatesIsNoLimiter", func(t *testing.T) {
		t.Parallel()
		l := limits.New(limits.Config{})
		if l != nil || l.Key("k") != 0 || l.Send("t") != 0 {
			t.Fatal("a limiter without rates limits")
		}
	})
	t.Run("BurstThenTheRateAndARefusalSpendsNothing", func(t *testing.T) {
		t.Parallel()
		clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		l := limits.New(limits.Config{KeyRate: 2, KeyBurst: 2, Clock: clk})
		if l.Key("k") != 0 || l.Key("k") != 0 {
			t.Fatal("the burst was refused")
		}
		for range 3 {
			if wait := l.Key("k"); wait != 500*time.Millisecond {
				t.Fatalf("past the burst: wait %s, want 500ms every time (a refusal spends nothing)", wait)
			}
		}
		if l.Key("other") != 0 {
			t.Fatal("another key shares the bucket")
		}
		clk.Advance(500 * time.Millisecond)
		if wait := l.Key("k"); wait != 0 {
			t.Fatalf("after the wait: %s, want 0", wait)
		}
	})
	t.Run("RetryAfterIsWholeSecondsAtLeastOne", func(t *testing.T) {
		t.Parallel()
		for wait, want := range map[time.Duration]string{time.Millisecond: "1", time.Second: "1", 1500 * time.Millisecond: "2"} {
			rec := httptest.NewRecorder()
			limits.TooMany(rec, wait, "slow down")
			if rec.Code != 429 || rec.Header().Get("Retry-After") != want || rec.Header().Get("Content-Type") != "application/problem+json" {
				t.Errorf("TooMany(%s) = %d, Retry-After %q; want 429, %s", wait, rec.Code, rec.Header().Get("Retry-After"), want)
			}
		}
	})
}

// BenchmarkKey is what the per-key rate adds to a request.
func BenchmarkKey(b *testing.B) {
	l := limits.New(limits.Config{KeyRate: 1e9})
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Key("key")
		}
	})
}

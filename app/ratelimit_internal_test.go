package app

import (
	"context"
	"log/slog"
	"testing"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// takes is a store.RateBuckets that grants what is asked and notes it.
type takes struct{ asked []store.BucketTakeParams }

func (s *takes) BucketTake(_ context.Context, p store.BucketTakeParams) (store.BucketGrant, error) {
	s.asked = append(s.asked, p)
	return store.BucketGrant{Granted: p.Want, Free: p.Want}, nil
}

func (s *takes) BucketSlow(context.Context, store.BucketSlowParams) error { return nil }

func TestRateLimiterLimitsTheProvidersWithARateLimit(t *testing.T) {
	t.Parallel()
	cfg := &config.Config{Providers: []config.Provider{
		{Name: "free", Type: "sim", Channel: "sms"},
		{Name: "vendor", Type: "sim", Channel: "push", RateLimit: &config.RateLimit{PerSecond: 200, Burst: 40}},
	}}
	if l := rateLimiter(&config.Config{Providers: cfg.Providers[:1]}, &takes{}, slog.New(slog.DiscardHandler)); l != nil {
		t.Fatalf("a limiter (%T) with no provider limited: the sender's nil check would not skip it", l)
	}
	st := &takes{}
	l := rateLimiter(cfg, st, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	for _, name := range []string{"free", "vendor"} {
		if later, err := l.Wait(ctx, name, heraldtype.LaneAlert); later != 0 || err != nil {
			t.Fatalf("Wait %s = %s, %v", name, later, err)
		}
	}
	if len(st.asked) != 1 || st.asked[0].Provider != "vendor" || st.asked[0].Rate != 200 || st.asked[0].Burst != 40 {
		t.Fatalf("takes %+v, want one of vendor at 200/s, burst 40", st.asked)
	}
}

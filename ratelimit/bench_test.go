package ratelimit_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/ratelimit"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/postgres"
	"github.com/heraldhq/herald/store/sqlite"
)

// counted counts a store's takes.
type counted struct {
	store.RateBuckets
	takes atomic.Int64
}

func (c *counted) BucketTake(ctx context.Context, p store.BucketTakeParams) (store.BucketGrant, error) {
	c.takes.Add(1)
	return c.RateBuckets.BucketTake(ctx, p)
}

// BenchmarkWait is the limiter's cost per call with a bucket that never
// runs short (a billion a second): the local spend, and a take from the
// store for each grant (every 50 ms at the most). "unlimited" is a
// provider without a limit, for comparison.
func BenchmarkWait(b *testing.B) {
	stores := []struct {
		name string
		open func(b *testing.B) store.RateBuckets
	}{
		{"sqlite", func(b *testing.B) store.RateBuckets {
			s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "herald.db"), sqlite.Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		}},
		{"postgres", func(b *testing.B) store.RateBuckets {
			s, err := postgres.Open(context.Background(), testpg.Schema(b), postgres.Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		}},
	}
	ctx := context.Background()
	for _, st := range stores {
		for _, parallel := range []bool{false, true} {
			name := st.name + "/serial"
			if parallel {
				name = st.name + "/parallel"
			}
			b.Run(name, func(b *testing.B) {
				c := &counted{RateBuckets: st.open(b)}
				l := ratelimit.New(ratelimit.Config{Store: c, Limits: map[string]ratelimit.Limit{"p": {PerSecond: 1e9, Burst: 1e9}}})
				wait := func() {
					if later, err := l.Wait(ctx, "p", heraldtype.LaneTransactional); later != 0 || err != nil {
						b.Fatalf("Wait = %s, %v", later, err)
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				if parallel {
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							wait()
						}
					})
				} else {
					for b.Loop() {
						wait()
					}
				}
				b.ReportMetric(float64(c.takes.Load())/float64(b.N), "takes/op")
			})
		}
	}
	b.Run("unlimited", func(b *testing.B) {
		l := ratelimit.New(ratelimit.Config{Limits: map[string]ratelimit.Limit{"p": {PerSecond: 1}}})
		b.ReportAllocs()
		for b.Loop() {
			if _, err := l.Wait(ctx, "other", heraldtype.LaneTransactional); err != nil {
				b.Fatal(err)
			}
		}
	})
}

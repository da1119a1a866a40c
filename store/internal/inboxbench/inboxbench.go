// Package inboxbench holds the inbox benchmarks both drivers run on a store
// of their own (store/sqlite, store/postgres): the same operations, timed
// the same way, so that their figures compare.
package inboxbench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// Create measures intake writes with and without an inbox item
// (recipients spread over 1,000), from parallelism goroutines per
// GOMAXPROCS: what the inbox adds to a create's store cost. open returns
// a fresh store for each sub-benchmark, which Create closes; params
// returns a create of the recipient, with its channels, new each call.
func Create(b *testing.B, open func(b *testing.B) store.Store, parallelism int, params func(recipient string) store.NotificationCreateParams) {
	for _, inbox := range []bool{false, true} {
		b.Run(fmt.Sprintf("inbox=%v", inbox), func(b *testing.B) {
			s := open(b)
			defer s.Close()
			b.SetParallelism(parallelism)
			start := time.Now()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					p := params(fmt.Sprintf("user-%d", rand.IntN(1000)))
					if inbox {
						p.Channels = append(p.Channels, heraldtype.ChannelInbox)
						p.Inbox = []store.InboxText{{Title: "Paid", Body: "Paid 1,000 won"}}
					}
					if _, err := s.NotificationCreate(context.Background(), p); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "notifications/s")
		})
	}
}

// Read100k times the reads of recipient r1 of tenant t1, whom the caller
// gave 100,000 items (seqs 1 to 100,000): a feed page of 50, the newest
// or the one before a random seq, and the badge, each a sub-benchmark.
func Read100k(b *testing.B, s store.Inbox) {
	ctx := context.Background()
	reads := map[string]func(rng *rand.Rand) error{
		"feed-newest": func(*rand.Rand) error {
			_, err := s.InboxFeed(ctx, store.InboxFeedParams{Tenant: "t1", Recipient: "r1", Limit: 50})
			return err
		},
		"feed-deep": func(rng *rand.Rand) error {
			_, err := s.InboxFeed(ctx, store.InboxFeedParams{Tenant: "t1", Recipient: "r1", Before: 1 + rng.Int64N(100_000), Limit: 50})
			return err
		},
		"badge": func(*rand.Rand) error { _, err := s.InboxBadge(ctx, "t1", "r1"); return err },
	}
	for _, name := range []string{"feed-newest", "feed-deep", "badge"} {
		b.Run(name, func(b *testing.B) { timeEach(b, reads[name]) })
	}
}

// timeEach runs read b.N times, timing each call, and reports p50 and p99
// in milliseconds.
func timeEach(b *testing.B, read func(rng *rand.Rand) error) {
	rng := rand.New(rand.NewPCG(1, 2))
	took := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		began := time.Now()
		if err := read(rng); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(began))
	}
	b.StopTimer()
	slices.Sort(took)
	at := func(q float64) float64 { return float64(took[int(q*float64(len(took)-1))].Microseconds()) / 1000 }
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
}

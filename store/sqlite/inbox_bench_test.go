package sqlite

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/store"
)

// BenchmarkInboxCreate measures intake writes with and without an inbox
// item (recipients spread over 1,000) from 64 goroutines: what the inbox
// adds to a create's store cost.
//
//	go test ./store/sqlite -run '^$' -bench InboxCreate -benchtime 20000x -count 3
func BenchmarkInboxCreate(b *testing.B) {
	for _, inbox := range []bool{false, true} {
		b.Run(fmt.Sprintf("inbox=%v", inbox), func(b *testing.B) {
			s, err := Open(context.Background(), filepath.Join(b.TempDir(), "herald.db"), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			b.SetParallelism(32)
			start := time.Now()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := ids.New("ntf", time.Now())
					p := store.NotificationCreateParams{
						Tenant: "t1", IdempotencyKey: "k-" + id, RequestHash: "h", IdempotencyTTL: time.Hour, Response: []byte(id),
						ID: id, Recipient: fmt.Sprintf("user-%d", rand.IntN(1000)), EventID: "e", Kind: "k", Lane: heraldtype.LaneTransactional,
						Channels: []heraldtype.Channel{heraldtype.ChannelWebhook},
					}
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

// qBenchInboxFill writes the benchmark's items set-based: r1's 100,000 (a
// tenth read, a hundredth archived) and 1,000 other recipients' 100 each,
// with their counters. No ANALYZE: herald runs none on SQLite (with
// statistics, each new bound seq would make SQLite prepare the feed again).
var qBenchInboxFill = []string{
	`WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < 100000)
INSERT INTO inbox_items (tenant, recipient, seq, message_id, notification_id, kind, title, body, locale, created_at, read_at, archived_at)
SELECT 't1', 'r1', i, 'ntf_' || i || '.inbox', 'ntf_' || i, 'k', 'Paid', 'Paid ' || i || ' won', '', 1000 * i,
       CASE WHEN i % 10 = 0 THEN 1 END, CASE WHEN i % 100 = 0 THEN 1 END
FROM g`,
	`WITH RECURSIVE g(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM g WHERE i < 99999)
INSERT INTO inbox_items (tenant, recipient, seq, message_id, notification_id, kind, title, body, locale, created_at)
SELECT 't1', 'u' || (i / 100), i % 100 + 1, 'ntf_o' || i || '.inbox', 'ntf_o' || i, 'k', 'Paid', 'Paid', '', 1000 * i
FROM g`,
	`INSERT INTO inbox_counters (tenant, recipient, seq, unread)
SELECT tenant, recipient, max(seq), sum(read_at IS NULL AND archived_at IS NULL) FROM inbox_items GROUP BY tenant, recipient`,
}

// BenchmarkInboxRead100k: a recipient with 100,000 items among 100,000
// other recipients' items; one op is a feed page of 50 (the newest page,
// or the page before a random seq) or a badge read, timed one by one and
// reported as p50 and p99.
//
//	go test ./store/sqlite -run '^$' -bench InboxRead100k -benchtime 5000x
func BenchmarkInboxRead100k(b *testing.B) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "herald.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for _, q := range qBenchInboxFill {
		if _, err := s.wdb.ExecContext(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
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

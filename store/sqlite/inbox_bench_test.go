package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/internal/inboxbench"
)

// BenchmarkInboxCreate measures intake writes with and without an inbox
// item (recipients spread over 1,000) from 64 goroutines: what the inbox
// adds to a create's store cost.
//
//	go test ./store/sqlite -run '^$' -bench InboxCreate -benchtime 20000x -count 3
func BenchmarkInboxCreate(b *testing.B) {
	open := func(b *testing.B) store.Store {
		s, err := Open(context.Background(), filepath.Join(b.TempDir(), "herald.db"), Options{})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	inboxbench.Create(b, open, 32, func(recipient string) store.NotificationCreateParams {
		id := ids.New("ntf", time.Now())
		return store.NotificationCreateParams{
			Tenant: "t1", IdempotencyKey: "k-" + id, RequestHash: "h", IdempotencyTTL: time.Hour, Response: []byte(id),
			ID: id, Recipient: recipient, EventID: "e", Kind: "k", Lane: heraldtype.LaneTransactional,
			Channels: []heraldtype.Channel{heraldtype.ChannelWebhook},
		}
	})
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
	inboxbench.Read100k(b, s)
}

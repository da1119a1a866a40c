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

// qBenchInboxFill writes the benchmark's notifications and items
// set-based: r1's 100,000 (a tenth read, a hundredth archived; seqs 1 to
// 100,000, as inboxbench picks them) and 1,000 other recipients' 100 each,
// created between r1's; the trigger keeps their counters. No ANALYZE:
// herald runs none on SQLite (with statistics, each new bound seq would
// make SQLite prepare the feed again).
var qBenchInboxFill = []string{
	`WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < 100000)
INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at, inbox_at,
                           inbox_seq, inbox_title, inbox_body, inbox_locale, inbox_read_at, inbox_archived_at)
SELECT 'ntf_' || i, 't1', 'r1', 'e', 'k', 'transactional', '{}', 1000 * i, 1,
       i, 'Paid', 'Paid ' || i || ' won', '', CASE WHEN i % 10 = 0 THEN 1 END, CASE WHEN i % 100 = 0 THEN 1 END
FROM g
UNION ALL
SELECT 'ntf_o' || (i - 1), 't1', 'u' || ((i - 1) / 100), 'e', 'k', 'transactional', '{}', 1000 * i + 500, 1,
       100000 + i, 'Paid', 'Paid', '', NULL, NULL
FROM g`,
	// The insert counted every item unread (notifications_inbox_count);
	// r1's are seqs 1 to 100,000.
	`UPDATE inbox_counters SET unread = unread - (
    SELECT count(*) FROM notifications WHERE inbox_seq <= 100000 AND (inbox_read_at IS NOT NULL OR inbox_archived_at IS NOT NULL))
WHERE tenant = 't1' AND recipient = 'r1'`,
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

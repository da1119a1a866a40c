package postgres

import (
	"context"
	"log/slog"
	"runtime"
	"testing"

	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/internal/inboxbench"
)

// BenchmarkInboxCreate measures intake writes with and without an inbox
// item (recipients spread over 1,000), from as many goroutines as the pool
// has connections: what the inbox adds to a create's store cost.
//
//	go test ./store/postgres -run '^$' -bench InboxCreate -benchtime 20000x -count 3
func BenchmarkInboxCreate(b *testing.B) {
	open := func(b *testing.B) store.Store {
		s, err := Open(context.Background(), testpg.Schema(b), Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	inboxbench.Create(b, open, max(1, DefaultMaxConns/runtime.GOMAXPROCS(0)), func(recipient string) store.NotificationCreateParams {
		return params(func(p *store.NotificationCreateParams) { p.Recipient = recipient })
	})
}

// BenchmarkInboxRead100k: a recipient with 100,000 items (a tenth of them
// read, a hundredth archived) among 100,000 other recipients' items; one
// op is a feed page of 50 (the newest page, or the page before a random
// seq) or a badge read, timed one by one and reported as p50 and p99.
//
//	go test ./store/postgres -run '^$' -bench InboxRead100k -benchtime 5000x
func BenchmarkInboxRead100k(b *testing.B) {
	ctx := context.Background()
	s, err := Open(ctx, testpg.Schema(b), Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if _, err := s.pool.Exec(ctx, qBenchInboxFill); err != nil {
		b.Fatal(err)
	}
	inboxbench.Read100k(b, s)
}

// qBenchInboxFill writes the benchmark's items set-based: r1's 100,000 and
// 1,000 other recipients' 100 each, with their counters.
const qBenchInboxFill = `
INSERT INTO inbox_items (tenant, recipient, seq, message_id, notification_id, kind, title, body, locale, created_at, read_at, archived_at)
SELECT 't1', 'r1', g, 'ntf_' || g || '.inbox', 'ntf_' || g, 'k', 'Paid', 'Paid ' || g || ' won', '', now() - (100000 - g) * interval '1 second',
       CASE WHEN g % 10 = 0 THEN now() END, CASE WHEN g % 100 = 0 THEN now() END
FROM generate_series(1, 100000) g;
INSERT INTO inbox_items (tenant, recipient, seq, message_id, notification_id, kind, title, body, locale, created_at)
SELECT 't1', 'u' || (g / 100), g % 100 + 1, 'ntf_o' || g || '.inbox', 'ntf_o' || g, 'k', 'Paid', 'Paid', '', now()
FROM generate_series(0, 99999) g;
INSERT INTO inbox_counters (tenant, recipient, seq, unread)
SELECT tenant, recipient, max(seq), count(*) FILTER (WHERE read_at IS NULL AND archived_at IS NULL) FROM inbox_items GROUP BY tenant, recipient;
ANALYZE inbox_items; ANALYZE inbox_counters`

package postgres

import (
	"context"
	"time"

	"github.com/heraldhq/herald/store"
)

// InboxHeads (store.InboxHeads): one statement, so one snapshot, for a
// batch of inboxes.
const (
	// qInboxHeads reads, for each key ($1 tenants, $2 recipients, in
	// step), the counter row by its primary key and the newest item by
	// inbox_items' (a backward scan from the recipient's end), each a
	// LATERAL probe per key: OFFSET 0 keeps the planner from turning the
	// counters' into a hash join over the whole table (which it chose for
	// 500 keys of 10,000 counters).
	qInboxHeads = `SELECT k.tenant, k.recipient, coalesce(c.unread, 0), coalesce(c.seq, 0),
       i.seq, i.message_id, i.notification_id, i.kind, i.title, i.body, i.created_at, i.read_at, i.archived_at
FROM unnest($1::text[], $2::text[]) AS k(tenant, recipient)
LEFT JOIN LATERAL (
    SELECT unread, seq FROM inbox_counters WHERE tenant = k.tenant AND recipient = k.recipient OFFSET 0) c ON true
LEFT JOIN LATERAL (
    SELECT seq, message_id, notification_id, kind, title, body, created_at, read_at, archived_at FROM inbox_items
    WHERE tenant = k.tenant AND recipient = k.recipient
    ORDER BY seq DESC LIMIT 1) i ON true`
)

// InboxHeads reads the badge and newest item of every inbox of keys in one
// statement.
func (s *Store) InboxHeads(ctx context.Context, keys []store.InboxKey) (map[store.InboxKey]store.InboxHead, error) {
	out := make(map[store.InboxKey]store.InboxHead, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	tenants, recipients := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		tenants[i], recipients[i] = k.Tenant, k.Recipient
	}
	rows, err := s.pool.Query(ctx, qInboxHeads, tenants, recipients)
	if err != nil {
		return nil, s.fail("read inbox heads", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			k                    store.InboxKey
			h                    store.InboxHead
			seq                  *int64
			mid, nid, kind, t, b *string
			created              *time.Time
			readAt, archivedAt   *time.Time
		)
		if err := rows.Scan(&k.Tenant, &k.Recipient, &h.Badge.Unread, &h.Badge.Seq,
			&seq, &mid, &nid, &kind, &t, &b, &created, &readAt, &archivedAt); err != nil {
			return nil, s.fail("read inbox heads", err)
		}
		if seq != nil {
			h.Newest = &store.InboxItem{Seq: *seq, MessageID: *mid, NotificationID: *nid, Kind: *kind, Title: *t, Body: *b,
				CreatedAt: created.UTC(), ReadAt: utcPtr(readAt), ArchivedAt: utcPtr(archivedAt)}
			h.Before = *seq - 1 // an inbox's seqs are 1, 2, 3…
		}
		out[k] = h
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("read inbox heads", err)
	}
	return out, nil
}

package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/heraldhq/herald/store"
)

// InboxHeads (store.InboxHeads): one statement on the read pool, so one
// snapshot, for a batch of inboxes.
const (
	// qInboxHeads reads, for each key of ?1 (a JSON array of [tenant,
	// recipient]), the counter row by its key, the newest item, the first
	// found walking the recipient's notifications backward from the end
	// (inbox.go), and the seq of the item before it (0: none).
	qInboxHeads = `WITH k AS (
    SELECT json_extract(value, '$[0]') AS tenant, json_extract(value, '$[1]') AS recipient FROM json_each(?1))
SELECT k.tenant, k.recipient, coalesce(c.unread, 0), coalesce(c.seq, 0),
       ` + qInboxItemCols + `,
       coalesce((SELECT m.inbox_seq FROM notifications m
                 WHERE m.tenant = k.tenant AND m.recipient = k.recipient AND m.inbox_seq IS NOT NULL
                 ORDER BY m.created_at DESC, m.id DESC LIMIT 1 OFFSET 1), 0)
FROM k
LEFT JOIN inbox_counters c ON c.tenant = k.tenant AND c.recipient = k.recipient
LEFT JOIN notifications n ON n.rowid = (
    SELECT m.rowid FROM notifications m
    WHERE m.tenant = k.tenant AND m.recipient = k.recipient AND m.inbox_seq IS NOT NULL
    ORDER BY m.created_at DESC, m.id DESC LIMIT 1)`
)

// InboxHeads reads the badge and newest item of every inbox of keys in one
// statement.
func (s *Store) InboxHeads(ctx context.Context, keys []store.InboxKey) (map[store.InboxKey]store.InboxHead, error) {
	out := make(map[store.InboxKey]store.InboxHead, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	pairs := make([][2]string, len(keys))
	for i, k := range keys {
		pairs[i] = [2]string{k.Tenant, k.Recipient}
	}
	arg, err := json.Marshal(pairs)
	if err != nil {
		return nil, fmt.Errorf("read inbox heads: %w", err)
	}
	rows, err := s.query(ctx, qInboxHeads, string(arg))
	if err != nil {
		return nil, fmt.Errorf("read inbox heads: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			k                    store.InboxKey
			h                    store.InboxHead
			seq, created         sql.NullInt64
			readAt, archivedAt   sql.NullInt64
			mid, nid, kind, t, b sql.NullString
		)
		if err := rows.Scan(&k.Tenant, &k.Recipient, &h.Badge.Unread, &h.Badge.Seq,
			&seq, &mid, &nid, &kind, &t, &b, &created, &readAt, &archivedAt, &h.Before); err != nil {
			return nil, fmt.Errorf("read inbox heads: %w", err)
		}
		if seq.Valid {
			it := store.InboxItem{Seq: seq.Int64, MessageID: mid.String, NotificationID: nid.String, Kind: kind.String, Title: t.String, Body: b.String}
			fillItem(&it, created.Int64, readAt, archivedAt)
			h.Newest = &it
		}
		out[k] = h
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read inbox heads: %w", err)
	}
	return out, nil
}

package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// The recipient inbox (store.Inbox). Every write runs on the writer, which
// is the only writer of the file, so a write's reads and changes of one
// counter row cannot interleave with another's: the writer is the counter
// row's lock. Reads are single statements on the read pool, each its own
// snapshot (WAL).
//
// Each statement names its rows by key: the feed, the replay after a seq
// and the recount walk inbox_items' primary key (tenant, recipient, seq);
// marks by id find items by message_id; the purge walks
// inbox_items_tenant_created from each tenant's oldest item.
const (
	// Create (in the notification's transaction). ?1 tenant, ?2 recipient.
	qInboxLanguage = `SELECT coalesce(json_extract(data, '$.language'), '') FROM profiles WHERE tenant = ?1 AND recipient = ?2`
	// qInboxBump takes the recipient's next seq and counts the new item
	// unread; ?1 tenant, ?2 recipient. qInboxItemInsert, next in the same
	// transaction, reads that seq back from the counter row in its own
	// statement: a RETURNING here would cost an ephemeral table in SQLite
	// and, as a query inside a database/sql transaction, a goroutine that
	// watches the transaction's context (about 7% of an inbox
	// notification's intake, measured with BenchmarkEndToEndInbox).
	qInboxBump = `INSERT INTO inbox_counters (tenant, recipient, seq, unread) VALUES (?1, ?2, 1, 1)
ON CONFLICT (tenant, recipient) DO UPDATE SET seq = seq + 1, unread = unread + 1`
	qInboxItemInsert = `INSERT INTO inbox_items (tenant, recipient, seq, message_id, notification_id, kind, title, body, locale, created_at)
VALUES (?1, ?2, (SELECT seq FROM inbox_counters WHERE tenant = ?1 AND recipient = ?2), ?3, ?4, ?5, ?6, ?7, ?8, ?9)`

	// qInboxFeed reads the counter and a page of items in one statement,
	// so one snapshot. ?1 tenant, ?2 recipient, ?3 before (seq), ?4 1 to
	// include archived items, ?5 limit.
	qInboxFeed = `SELECT c.unread, c.seq, i.seq, i.message_id, i.notification_id, i.kind, i.title, i.body, i.created_at, i.read_at, i.archived_at
FROM (SELECT coalesce(max(unread), 0) AS unread, coalesce(max(seq), 0) AS seq
      FROM inbox_counters WHERE tenant = ?1 AND recipient = ?2) c
LEFT JOIN (SELECT seq, message_id, notification_id, kind, title, body, created_at, read_at, archived_at FROM inbox_items
           WHERE tenant = ?1 AND recipient = ?2 AND seq < ?3 AND (?4 OR archived_at IS NULL)
           ORDER BY seq DESC LIMIT ?5) i
ORDER BY i.seq DESC`
	// ?1 tenant, ?2 recipient, ?3 after (seq), ?4 limit.
	qInboxAfter = `SELECT seq, message_id, notification_id, kind, title, body, created_at, read_at, archived_at FROM inbox_items
WHERE tenant = ?1 AND recipient = ?2 AND seq > ?3 ORDER BY seq LIMIT ?4`
	// ?1 tenant, ?2 recipient.
	qInboxBadge = `SELECT unread, seq FROM inbox_counters WHERE tenant = ?1 AND recipient = ?2`

	// The marks set read_at (or archived_at) where it is unset and return,
	// per item changed, whether it counted as unread before. ?1 now,
	// ?2 tenant, ?3 recipient, then ?4 the message ids (JSON array) or the
	// last seq.
	qInboxReadIDs = `UPDATE inbox_items SET read_at = ?1
WHERE message_id IN (SELECT value FROM json_each(?4)) AND tenant = ?2 AND recipient = ?3 AND read_at IS NULL
RETURNING archived_at IS NULL`
	qInboxReadUpTo = `UPDATE inbox_items SET read_at = ?1
WHERE tenant = ?2 AND recipient = ?3 AND seq <= ?4 AND read_at IS NULL
RETURNING archived_at IS NULL`
	qInboxArchive = `UPDATE inbox_items SET archived_at = ?1
WHERE message_id = ?4 AND tenant = ?2 AND recipient = ?3 AND archived_at IS NULL
RETURNING read_at IS NULL`
	qInboxItemExists = `SELECT count(*) FROM inbox_items WHERE message_id = ?1 AND tenant = ?2 AND recipient = ?3`
	// qInboxUnreadLower takes n (?3) items off the counter and returns it.
	// ?1 tenant, ?2 recipient.
	qInboxUnreadLower = `UPDATE inbox_counters SET unread = unread - ?3 WHERE tenant = ?1 AND recipient = ?2 RETURNING unread, seq`

	// qInboxRecountBatch lists up to ?5 counter rows after (?1, ?2), of
	// tenant ?3 and recipient ?4 ('' for any), each with what its items
	// say: the unread count and the newest seq.
	qInboxRecountBatch = `SELECT c.tenant, c.recipient, c.unread, c.seq,
       (SELECT count(*) FROM inbox_items i WHERE i.tenant = c.tenant AND i.recipient = c.recipient AND i.read_at IS NULL AND i.archived_at IS NULL),
       (SELECT coalesce(max(i.seq), 0) FROM inbox_items i WHERE i.tenant = c.tenant AND i.recipient = c.recipient)
FROM inbox_counters c
WHERE (c.tenant, c.recipient) > (?1, ?2) AND (?3 = '' OR c.tenant = ?3) AND (?4 = '' OR c.recipient = ?4)
ORDER BY c.tenant, c.recipient LIMIT ?5`
	// qInboxRecountSet sets a counter to what its items say; its seq never
	// goes back. ?1 tenant, ?2 recipient, ?3 unread, ?4 newest item's seq.
	qInboxRecountSet = `UPDATE inbox_counters SET unread = ?3, seq = max(seq, ?4) WHERE tenant = ?1 AND recipient = ?2 RETURNING unread, seq`

	// The purge, tenant by tenant: qInboxTenants lists the tenants with an
	// inbox (a skip scan of the counters' key); qInboxPurgePick the oldest
	// ?3 items of tenant ?1 created before ?2, walking
	// inbox_items_tenant_created; qInboxPurge deletes the items the
	// picks kept (?1, a JSON array of [tenant, recipient, seq]) and
	// returns each with whether it counted as unread.
	qInboxTenants = `WITH RECURSIVE t(tenant) AS (
    SELECT min(tenant) FROM inbox_counters
    UNION ALL
    SELECT (SELECT min(c.tenant) FROM inbox_counters c WHERE c.tenant > t.tenant) FROM t WHERE t.tenant IS NOT NULL)
SELECT tenant FROM t WHERE tenant IS NOT NULL`
	qInboxPurgePick = `SELECT recipient, seq, created_at FROM inbox_items
WHERE tenant = ?1 AND created_at < ?2 ORDER BY created_at LIMIT ?3`
	qInboxPurge = `DELETE FROM inbox_items WHERE (tenant, recipient, seq) IN (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]') FROM json_each(?1))
RETURNING tenant, recipient, read_at IS NULL AND archived_at IS NULL`
)

// inboxQueries are prepared on the writer's connection at open.
var inboxQueries = []string{
	qInboxLanguage, qInboxBump, qInboxItemInsert,
	qInboxReadIDs, qInboxReadUpTo, qInboxArchive, qInboxItemExists, qInboxUnreadLower, qInboxBadge,
	qInboxRecountBatch, qInboxRecountSet, qInboxTenants, qInboxPurgePick, qInboxPurge,
}

// execer runs statements in a write transaction: the writer's (wtx) or a
// caller's (CreateTx).
type execer interface {
	Exec(q string, args ...any) (sql.Result, error)
	QueryRow(q string, args ...any) *sql.Row
}

// callerTx runs a caller's *sql.Tx's statements under ctx.
type callerTx struct {
	ctx context.Context
	tx  *sql.Tx
}

func (t callerTx) Exec(q string, args ...any) (sql.Result, error) {
	return t.tx.ExecContext(t.ctx, q, args...)
}
func (t callerTx) QueryRow(q string, args ...any) *sql.Row {
	return t.tx.QueryRowContext(t.ctx, q, args...)
}

// insertPlanned writes the notification's planned sends after its row: a
// PENDING outbox row per channel (for push, per active device), and for
// the inbox the item and the counter's bump: the send itself is recorded
// in the notification row's inbox_at, ended STORED at once (store,
// inboxsend.go).
// It reports whether a PENDING row was written (a claimer has something to
// wake for).
func insertPlanned(tx execer, p store.NotificationCreateParams, available, now int64) (pending bool, err error) {
	chain, err := newChain(p) // a fallback chain's rows carry their step (fallback.go)
	if err != nil {
		return false, err
	}
	for _, ch := range p.Channels {
		if ch == heraldtype.ChannelInbox {
			if err := insertInboxItem(tx, p, now); err != nil {
				return false, err
			}
			continue
		}
		if chain != nil && !chain.written() {
			continue // a lazy chain's later step
		}
		// Push plans a send per active device (devices.go).
		sends, err := plannedSends(tx, p, ch)
		if err != nil {
			return false, err
		}
		for _, send := range sends {
			if chain != nil {
				if err := chain.insert(tx, p, send, available, now); err != nil {
					return false, err
				}
				continue
			}
			if _, err := tx.Exec(qOutboxInsert, p.ID, store.MessageID(p.ID, send), p.Tenant, string(p.Lane), string(send),
				available, msPtr(p.ExpiresAt), now, now); err != nil {
				return false, fmt.Errorf("insert outbox row: %w", err)
			}
		}
		pending = true
	}
	return pending, nil
}

// insertInboxItem writes p's inbox item with the recipient's next seq, in
// the text for the profile's language as this transaction reads it.
func insertInboxItem(tx execer, p store.NotificationCreateParams, now int64) error {
	var lang string
	if p.InboxNeedsLanguage() {
		err := tx.QueryRow(qInboxLanguage, p.Tenant, p.Recipient).Scan(&lang)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("read profile language: %w", err)
		}
	}
	text, err := p.InboxText(lang)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(qInboxBump, p.Tenant, p.Recipient); err != nil {
		return fmt.Errorf("bump inbox counter: %w", err)
	}
	if _, err := tx.Exec(qInboxItemInsert, p.Tenant, p.Recipient, store.MessageID(p.ID, heraldtype.ChannelInbox), p.ID, p.Kind,
		text.Title, text.Body, text.Locale, now); err != nil {
		return fmt.Errorf("insert inbox item: %w", err)
	}
	return nil
}

// itemCols scans an item's columns (seq first).
func itemCols(it *store.InboxItem, created *int64, readAt, archivedAt *sql.NullInt64) []any {
	return []any{&it.Seq, &it.MessageID, &it.NotificationID, &it.Kind, &it.Title, &it.Body, created, readAt, archivedAt}
}

func fillItem(it *store.InboxItem, created int64, readAt, archivedAt sql.NullInt64) {
	it.CreatedAt, it.ReadAt, it.ArchivedAt = fromMs(created), fromNullMs(readAt), fromNullMs(archivedAt)
}

// InboxFeed reads a page of the recipient's items, newest first, and the
// badge, in one statement.
func (s *Store) InboxFeed(ctx context.Context, p store.InboxFeedParams) (store.InboxPage, error) {
	before, fetch := p.Window()
	rows, err := s.query(ctx, qInboxFeed, p.Tenant, p.Recipient, before, p.Archived, fetch)
	if err != nil {
		return store.InboxPage{}, fmt.Errorf("read inbox feed: %w", err)
	}
	defer rows.Close()
	var page store.InboxPage
	for rows.Next() {
		var (
			seq, created         sql.NullInt64
			readAt, archivedAt   sql.NullInt64
			mid, nid, kind, t, b sql.NullString
		)
		if err := rows.Scan(&page.Badge.Unread, &page.Badge.Seq, &seq, &mid, &nid, &kind, &t, &b, &created, &readAt, &archivedAt); err != nil {
			return store.InboxPage{}, fmt.Errorf("read inbox feed: %w", err)
		}
		if !seq.Valid {
			continue // no item: the counter's row alone
		}
		it := store.InboxItem{Seq: seq.Int64, MessageID: mid.String, NotificationID: nid.String, Kind: kind.String, Title: t.String, Body: b.String}
		fillItem(&it, created.Int64, readAt, archivedAt)
		page.Items = append(page.Items, it)
	}
	if err := rows.Err(); err != nil {
		return store.InboxPage{}, fmt.Errorf("read inbox feed: %w", err)
	}
	page.Cut(p)
	return page, nil
}

// InboxItemsAfter reads up to limit items after afterSeq, oldest first.
func (s *Store) InboxItemsAfter(ctx context.Context, tenant, recipient string, afterSeq int64, limit int) ([]store.InboxItem, error) {
	rows, err := s.query(ctx, qInboxAfter, tenant, recipient, afterSeq, max(limit, 1))
	if err != nil {
		return nil, fmt.Errorf("read inbox items: %w", err)
	}
	defer rows.Close()
	var out []store.InboxItem
	for rows.Next() {
		var it store.InboxItem
		var created int64
		var readAt, archivedAt sql.NullInt64
		if err := rows.Scan(itemCols(&it, &created, &readAt, &archivedAt)...); err != nil {
			return nil, fmt.Errorf("read inbox items: %w", err)
		}
		fillItem(&it, created, readAt, archivedAt)
		out = append(out, it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read inbox items: %w", err)
	}
	return out, nil
}

// InboxBadge reads the recipient's counter.
func (s *Store) InboxBadge(ctx context.Context, tenant, recipient string) (store.InboxBadge, error) {
	var b store.InboxBadge
	err := s.queryRow(ctx, qInboxBadge, tenant, recipient).Scan(&b.Unread, &b.Seq)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return store.InboxBadge{}, fmt.Errorf("read inbox badge: %w", err)
	}
	return b, nil
}

// countTrue runs a mark that returns, per changed row, whether it counted
// as unread, and says how many did and how many rows changed.
func countTrue(tx wtx, q string, args ...any) (counted, changed int64, err error) {
	rows, err := tx.Query(q, args...)
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var c bool
		if err := rows.Scan(&c); err != nil {
			return 0, 0, err
		}
		changed++
		if c {
			counted++
		}
	}
	return counted, changed, rows.Err()
}

// lowerUnread takes n off the recipient's counter and returns the badge
// after it (read as is when n is 0).
func lowerUnread(tx wtx, tenant, recipient string, n int64) (store.InboxBadge, error) {
	var b store.InboxBadge
	q, args := qInboxUnreadLower, []any{tenant, recipient, n}
	if n == 0 {
		q, args = qInboxBadge, args[:2]
	}
	err := tx.QueryRow(q, args...).Scan(&b.Unread, &b.Seq)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return store.InboxBadge{}, fmt.Errorf("lower inbox counter: %w", err)
	}
	return b, nil
}

// InboxMarkRead marks the recipient's unread items named by p read and
// lowers the counter by the unread ones among them.
func (s *Store) InboxMarkRead(ctx context.Context, p store.InboxMarkReadParams) (store.InboxBadge, error) {
	q, which := qInboxReadUpTo, any(p.UpToSeq)
	switch {
	case p.All && p.UpToSeq <= 0:
		which = int64(1<<63 - 1)
	case !p.All:
		if len(p.IDs) == 0 {
			return s.InboxBadge(ctx, p.Tenant, p.Recipient)
		}
		q, which = qInboxReadIDs, jsonList(p.IDs)
	}
	var badge store.InboxBadge
	var changed int64
	err := s.w.do(ctx, func(tx wtx) error {
		counted, n, err := countTrue(tx, q, s.now(), p.Tenant, p.Recipient, which)
		if err != nil {
			return fmt.Errorf("mark inbox items read: %w", err)
		}
		changed = n
		badge, err = lowerUnread(tx, p.Tenant, p.Recipient, counted)
		return err
	})
	if err != nil {
		return store.InboxBadge{}, fmt.Errorf("mark inbox read: %w", err)
	}
	if changed > 0 {
		s.inboxChanged(store.InboxKey{Tenant: p.Tenant, Recipient: p.Recipient})
	}
	return badge, nil
}

// InboxArchive archives one of the recipient's items.
func (s *Store) InboxArchive(ctx context.Context, tenant, recipient, messageID string) (bool, error) {
	var found, changed bool
	err := s.w.do(ctx, func(tx wtx) error {
		found, changed = false, false
		counted, n, err := countTrue(tx, qInboxArchive, s.now(), tenant, recipient, messageID)
		if err != nil {
			return fmt.Errorf("archive inbox item: %w", err)
		}
		if n == 0 {
			var k int
			if err := tx.QueryRow(qInboxItemExists, messageID, tenant, recipient).Scan(&k); err != nil {
				return fmt.Errorf("read inbox item: %w", err)
			}
			found = k > 0
			return nil
		}
		found, changed = true, true
		_, err = lowerUnread(tx, tenant, recipient, counted)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("archive inbox item: %w", err)
	}
	if changed {
		s.inboxChanged(store.InboxKey{Tenant: tenant, Recipient: recipient})
	}
	return found, nil
}

// InboxRecount recomputes counters from the items, a batch per write
// transaction.
func (s *Store) InboxRecount(ctx context.Context, p store.InboxRecountParams) (store.InboxRecountResult, error) {
	batch := p.BatchOrDefault()
	var res store.InboxRecountResult
	afterT, afterR := "", ""
	for {
		var checked int
		var drifted []store.InboxDrift
		var lastT, lastR string
		err := s.w.do(ctx, func(tx wtx) error {
			checked, drifted = 0, nil
			rows, err := tx.Query(qInboxRecountBatch, afterT, afterR, p.Tenant, p.Recipient, batch)
			if err != nil {
				return fmt.Errorf("read inbox counters: %w", err)
			}
			type row struct {
				tenant, recipient string
				was, is           store.InboxBadge
			}
			var list []row
			for rows.Next() {
				var r row
				if err := rows.Scan(&r.tenant, &r.recipient, &r.was.Unread, &r.was.Seq, &r.is.Unread, &r.is.Seq); err != nil {
					rows.Close()
					return fmt.Errorf("read inbox counters: %w", err)
				}
				list = append(list, r)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return fmt.Errorf("read inbox counters: %w", err)
			}
			checked = len(list)
			for _, r := range list {
				lastT, lastR = r.tenant, r.recipient
				if !r.is.DriftedFrom(r.was) {
					continue
				}
				var now store.InboxBadge
				if err := tx.QueryRow(qInboxRecountSet, r.tenant, r.recipient, r.is.Unread, r.is.Seq).Scan(&now.Unread, &now.Seq); err != nil {
					return fmt.Errorf("set inbox counter: %w", err)
				}
				drifted = append(drifted, store.InboxDrift{Tenant: r.tenant, Recipient: r.recipient, Was: r.was, Now: now})
			}
			return nil
		})
		if err != nil {
			return res, fmt.Errorf("recount inbox: %w", err)
		}
		s.inboxChanged(res.Add(checked, drifted)...)
		if checked < batch {
			return res, nil
		}
		afterT, afterR = lastT, lastR
	}
}

// InboxPurge deletes up to p.Limit items created before p.Before, oldest
// first, and lowers the counters of the unread ones, in one transaction.
func (s *Store) InboxPurge(ctx context.Context, p store.InboxPurgeParams) (int, error) {
	var deleted int
	var keys []store.InboxKey
	err := s.w.do(ctx, func(tx wtx) error {
		deleted, keys = 0, nil
		picked, err := purgePick(tx, p)
		if err != nil || len(picked) == 0 {
			return err
		}
		list := make([][3]any, len(picked))
		for i, it := range picked {
			list[i] = [3]any{it.Tenant, it.Recipient, it.Seq}
		}
		b, _ := json.Marshal(list)
		rows, err := tx.Query(qInboxPurge, string(b))
		if err != nil {
			return fmt.Errorf("delete inbox items: %w", err)
		}
		unread := map[store.InboxKey]int64{}
		for rows.Next() {
			var k store.InboxKey
			var counted bool
			if err := rows.Scan(&k.Tenant, &k.Recipient, &counted); err != nil {
				rows.Close()
				return fmt.Errorf("delete inbox items: %w", err)
			}
			deleted++
			if _, seen := unread[k]; !seen {
				keys, unread[k] = append(keys, k), 0
			}
			if counted {
				unread[k]++
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("delete inbox items: %w", err)
		}
		for _, k := range keys {
			if n := unread[k]; n > 0 {
				if _, err := lowerUnread(tx, k.Tenant, k.Recipient, n); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("purge inbox: %w", err)
	}
	s.inboxChanged(keys...)
	return deleted, nil
}

// purgePick picks the items a purge deletes: each tenant's oldest, then
// the oldest of those.
func purgePick(tx wtx, p store.InboxPurgeParams) ([]store.InboxPurgeItem, error) {
	var all []string
	if p.Tenant == "" {
		rows, err := tx.Query(qInboxTenants)
		if err != nil {
			return nil, fmt.Errorf("list inbox tenants: %w", err)
		}
		for rows.Next() {
			var t string
			if err := rows.Scan(&t); err != nil {
				rows.Close()
				return nil, fmt.Errorf("list inbox tenants: %w", err)
			}
			all = append(all, t)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("list inbox tenants: %w", err)
		}
	}
	var picked []store.InboxPurgeItem
	for _, t := range p.Tenants(all) {
		rows, err := tx.Query(qInboxPurgePick, t, ms(p.Before), max(p.Limit, 1))
		if err != nil {
			return nil, fmt.Errorf("pick inbox items: %w", err)
		}
		for rows.Next() {
			it := store.InboxPurgeItem{Tenant: t}
			var created int64
			if err := rows.Scan(&it.Recipient, &it.Seq, &created); err != nil {
				rows.Close()
				return nil, fmt.Errorf("pick inbox items: %w", err)
			}
			it.CreatedAt = fromMs(created)
			picked = append(picked, it)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("pick inbox items: %w", err)
		}
	}
	return p.Oldest(picked), nil
}

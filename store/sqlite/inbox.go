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
// An item is its notification's row (migration 26): inbox_seq, unique over
// the file and handed out in commit order, and the item's words and marks
// (inbox_title, inbox_body, inbox_locale, inbox_read_at,
// inbox_archived_at), written by the create's own insert
// (qNotificationInsertFeed); a trigger moves the sequence on and counts the
// item. A recipient's items are found walking
// notifications_tenant_recipient_created, which intake writes for every
// notification anyway. That walk is in seq order because a create keeps it
// so: a notification with an item sorts, in (created_at, id), after every
// notification its recipient already has. A walk seeks to a seq through
// notifications_inbox_seq; when that item is gone (purged or erased) it
// walks from the end and skips by seq, which still gives the right items,
// only slower. A purged or erased item's seq and words are cleared
// (inbox_seq NULL); its notification stays.
//
// Marks by id find the notification by its id (the item's message id less
// ".inbox"); the purge walks notifications_inbox_created from each
// tenant's oldest item.
const (
	// Create (in the notification's transaction). ?1 tenant, ?2 recipient.
	qInboxLanguage = `SELECT coalesce(json_extract(data, '$.language'), '') FROM profiles WHERE tenant = ?1 AND recipient = ?2`
	// qNotificationInsertFeed is qNotificationInsert for a notification
	// with an inbox item (?14 title, ?15 body, ?16 locale; ?13 the scope),
	// which takes the next seq. Its created_at is ?11 (now) unless the recipient already has
	// a notification at or after (?11, ?1) in (created_at, id), the order
	// the feed walks (a clock stepped back, or a notification of the
	// recipient created in the same millisecond with a greater id and
	// committed first); it then sorts just after the newest one: in its
	// millisecond if ?1 is greater than its id, else in the next. So the
	// walk's order is the order the items were committed in, their seq
	// order, and a feed page or a replay never skips an item that commits
	// while an app reads. The statement holds the file's write lock (SQLite
	// has one writer), so no other create comes between its reads and its
	// write.
	qNotificationInsertFeed = `INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, dedup_key, send_at, expires_at, created_at, inbox_at,
                           scope, inbox_seq, inbox_title, inbox_body, inbox_locale)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, coalesce((
    SELECT CASE WHEN ?11 > m.created_at OR ?11 = m.created_at AND ?1 > m.id THEN ?11
                WHEN ?1 > m.id THEN m.created_at
                ELSE m.created_at + 1 END
    FROM (SELECT created_at, id FROM notifications WHERE tenant = ?2 AND recipient = ?3 ORDER BY created_at DESC, id DESC LIMIT 1) m), ?11),
    ?12, ?13, (SELECT seq + 1 FROM inbox_sequence), ?14, ?15, ?16)
ON CONFLICT (tenant, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING`

	// qInboxItemCols are an item's columns off its notification row n, in
	// itemCols' order.
	qInboxItemCols = `n.inbox_seq, n.id || '.inbox', n.id, n.kind, n.inbox_title, n.inbox_body, n.created_at, n.inbox_read_at, n.inbox_archived_at`

	// ?1 tenant, ?2 recipient.
	qInboxBadge = `SELECT unread, seq FROM inbox_counters WHERE tenant = ?1 AND recipient = ?2`

	// Seqs handed out before migration 26 (inboxSeq), through
	// inbox_legacy_items (each item's old number and new seq, as the
	// migration numbered them; an item gone since may still be listed, and
	// takes no part in a walk). qInboxLegacyUp is the newest item up to old
	// number ?3, qInboxLegacyDown the oldest from it on (or, with none, one
	// above the newest; 1 with none at all). ?1 tenant, ?2 recipient.
	qInboxLegacyCeiling = `SELECT coalesce(max(ceiling), 0) FROM inbox_legacy`
	qInboxLegacyUp      = `SELECT coalesce(max(seq), 0) FROM inbox_legacy_items WHERE tenant = ?1 AND recipient = ?2 AND legacy_seq <= ?3`
	qInboxLegacyDown    = `SELECT coalesce(
    (SELECT min(seq) FROM inbox_legacy_items WHERE tenant = ?1 AND recipient = ?2 AND legacy_seq >= ?3),
    (SELECT max(seq) + 1 FROM inbox_legacy_items WHERE tenant = ?1 AND recipient = ?2), 1)`

	// The marks set inbox_read_at (or inbox_archived_at) where it is unset
	// and return, per item changed, whether it counted as unread before.
	// ?1 now, ?2 tenant, ?3 recipient, then ?4 the items' notification ids
	// (JSON array; store.InboxNotificationID), the last seq, or the item's
	// notification id.
	qInboxReadIDs = `UPDATE notifications SET inbox_read_at = ?1
WHERE id IN (SELECT value FROM json_each(?4))
  AND tenant = ?2 AND recipient = ?3 AND inbox_seq IS NOT NULL AND inbox_read_at IS NULL
RETURNING inbox_archived_at IS NULL`
	qInboxReadUpTo = `UPDATE notifications SET inbox_read_at = ?1
WHERE tenant = ?2 AND recipient = ?3 AND inbox_seq <= ?4 AND inbox_read_at IS NULL
RETURNING inbox_archived_at IS NULL`
	qInboxArchive = `UPDATE notifications SET inbox_archived_at = ?1
WHERE id = ?4 AND tenant = ?2 AND recipient = ?3 AND inbox_seq IS NOT NULL AND inbox_archived_at IS NULL
RETURNING inbox_read_at IS NULL`
	// ?1 the item's notification id, ?2 tenant, ?3 recipient.
	qInboxItemExists = `SELECT count(*) FROM notifications WHERE id = ?1 AND tenant = ?2 AND recipient = ?3 AND inbox_seq IS NOT NULL`
	// qInboxUnreadLower takes n (?3) items off the counter and returns it.
	// ?1 tenant, ?2 recipient.
	qInboxUnreadLower = `UPDATE inbox_counters SET unread = unread - ?3 WHERE tenant = ?1 AND recipient = ?2 RETURNING unread, seq`

	// qInboxRecountBatch lists up to ?5 counter rows after (?1, ?2), of
	// tenant ?3 and recipient ?4 ('' for any), each with what its items
	// say: the unread count and the newest seq.
	qInboxRecountBatch = `SELECT c.tenant, c.recipient, c.unread, c.seq,
       (SELECT count(*) FROM notifications n
        WHERE n.tenant = c.tenant AND n.recipient = c.recipient AND n.inbox_seq IS NOT NULL
          AND n.inbox_read_at IS NULL AND n.inbox_archived_at IS NULL),
       (SELECT coalesce(max(n.inbox_seq), 0) FROM notifications n WHERE n.tenant = c.tenant AND n.recipient = c.recipient)
FROM inbox_counters c
WHERE (c.tenant, c.recipient) > (?1, ?2) AND (?3 = '' OR c.tenant = ?3) AND (?4 = '' OR c.recipient = ?4)
ORDER BY c.tenant, c.recipient LIMIT ?5`
	// qInboxRecountSet sets a counter to what its items say; its seq never
	// goes back. ?1 tenant, ?2 recipient, ?3 unread, ?4 newest item's seq.
	qInboxRecountSet = `UPDATE inbox_counters SET unread = ?3, seq = max(seq, ?4) WHERE tenant = ?1 AND recipient = ?2 RETURNING unread, seq`

	// The purge, tenant by tenant: qInboxTenants lists the tenants with an
	// inbox (a skip scan of the counters' key); qInboxPurgePick the oldest
	// ?3 items of tenant ?1 created before ?2, walking
	// notifications_inbox_created (named: the planner would walk
	// notifications_tenant_created and skip the rows cleared before, which
	// grow with every purge), each with whether it counts as unread;
	// qInboxPurge clears the items the picks kept (?1, a JSON array of
	// seqs).
	qInboxTenants = `WITH RECURSIVE t(tenant) AS (
    SELECT min(tenant) FROM inbox_counters
    UNION ALL
    SELECT (SELECT min(c.tenant) FROM inbox_counters c WHERE c.tenant > t.tenant) FROM t WHERE t.tenant IS NOT NULL)
SELECT tenant FROM t WHERE tenant IS NOT NULL`
	qInboxPurgePick = `SELECT recipient, inbox_seq, created_at, inbox_read_at IS NULL AND inbox_archived_at IS NULL
FROM notifications INDEXED BY notifications_inbox_created
WHERE tenant = ?1 AND created_at < ?2 AND inbox_seq IS NOT NULL ORDER BY created_at LIMIT ?3`
	qInboxPurge = `UPDATE notifications SET ` + qInboxClear + `
WHERE inbox_seq IN (SELECT value FROM json_each(?1))`
	// qInboxClear clears an item off its notification row.
	qInboxClear = `inbox_seq = NULL, inbox_title = NULL, inbox_body = NULL, inbox_locale = NULL,
    inbox_read_at = NULL, inbox_archived_at = NULL`
)

// The feed walks a recipient's items down from a seq, a replay up.
var (
	// qInboxFeed reads the counter and a page of items in one statement,
	// so one snapshot. ?1 tenant, ?2 recipient, ?3 before (seq), ?4 1 to
	// include archived items, ?5 limit.
	qInboxFeed = `WITH ` + inboxSeqKey("9223372036854775807") + `
SELECT c.unread, c.seq, p.*
FROM (SELECT coalesce(max(unread), 0) AS unread, coalesce(max(seq), 0) AS seq
      FROM inbox_counters WHERE tenant = ?1 AND recipient = ?2) c
LEFT JOIN (SELECT ` + qInboxItemCols + ` FROM notifications n
           WHERE n.tenant = ?1 AND n.recipient = ?2 AND (n.created_at, n.id) < (SELECT at, id FROM key)
             AND n.inbox_seq < ?3 AND (?4 OR n.inbox_archived_at IS NULL)
           ORDER BY n.created_at DESC, n.id DESC LIMIT ?5) p
ORDER BY 3 DESC`
	// qInboxAfter: ?1 tenant, ?2 recipient, ?3 after (seq), ?4 limit.
	qInboxAfter = `WITH ` + inboxSeqKey("-9223372036854775808") + `
SELECT ` + qInboxItemCols + ` FROM notifications n
WHERE n.tenant = ?1 AND n.recipient = ?2 AND (n.created_at, n.id) > (SELECT at, id FROM key) AND n.inbox_seq > ?3
ORDER BY n.created_at, n.id LIMIT ?4`
)

// inboxSeqKey is the CTE key: the place in the walk of item seq ?3 of
// tenant ?1's recipient ?2, its notification's (created_at, id), or, with
// no such item, (end, ”), the end the walk starts from (the largest time
// going down, the smallest going up).
func inboxSeqKey(end string) string {
	return `key AS (
    SELECT coalesce(max(created_at), ` + end + `) AS at, coalesce(max(id), '') AS id
    FROM notifications WHERE inbox_seq = ?3 AND tenant = ?1 AND recipient = ?2)`
}

// inboxQueries are the writer's to cache (writeQueries; stmts).
var inboxQueries = []string{
	qInboxLanguage, qNotificationInsertFeed,
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
// PENDING outbox row per channel (for push, per active device). The inbox's
// item is the notification row itself (notificationInsert) and its send is
// recorded in the row's inbox_at, ended STORED at once (store,
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
				available, msPtr(p.ExpiresAt), now, now, p.Scope, deferredAt(available, now)); err != nil {
				return false, fmt.Errorf("insert outbox row: %w", err)
			}
		}
		pending = true
	}
	return pending, nil
}

// insertHanded writes the one outbox row of a Handable p already claimed
// by p.Claim (store.NotificationCreateParams.Claim) and returns it as a
// claim would: on no chain, with no delivery row yet, and the recipient's
// profile.
func insertHanded(tx execer, p store.NotificationCreateParams, now int64) (*store.Claimed, error) {
	// The profile, as a claim reads it: the dispatcher's gate (quiet
	// hours' early stop) rules only on a profile the transport read.
	var data sql.NullString
	var updated sql.NullInt64
	err := tx.QueryRow(qProfileGet, p.Tenant, p.Recipient).Scan(&data, &updated)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("read profile: %w", err)
	}
	row := p.Handed(0, 0, msTime(p.ExpiresAt), knownProfile(data, updated))
	err = tx.QueryRow(qOutboxInsertClaimed, p.ID, row.MessageID, p.Tenant, string(p.Lane), string(row.Channel), now, msPtr(p.ExpiresAt), p.Scope,
		p.Claim.Owner, now+p.Claim.Lease.Milliseconds(), string(p.Claim.State())).Scan(&row.OutboxID, &row.Fence.Token)
	if err != nil {
		return nil, fmt.Errorf("insert claimed outbox row: %w", err)
	}
	row.Fence.ID = row.OutboxID
	return row, nil
}

// notificationInsert returns the statement and arguments that insert p's
// notification created now: with an inbox item, qNotificationInsertFeed
// with the item's text for the profile's language as tx reads it, else
// qNotificationInsert.
func notificationInsert(tx execer, p store.NotificationCreateParams, now int64) (string, []any, error) {
	args := []any{p.ID, p.Tenant, p.Recipient, p.EventID, p.Kind, string(p.Lane),
		string(paramsOrEmpty(p.Params)), nullString(p.DedupKey), msPtr(p.SendAt), msPtr(p.ExpiresAt), now, p.InboxAt(), p.Scope}
	if !p.InboxWanted() {
		return qNotificationInsert, args, nil
	}
	var lang string
	if p.InboxNeedsLanguage() {
		err := tx.QueryRow(qInboxLanguage, p.Tenant, p.Recipient).Scan(&lang)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return "", nil, fmt.Errorf("read profile language: %w", err)
		}
	}
	text, err := p.InboxText(lang)
	if err != nil {
		return "", nil, err
	}
	return qNotificationInsertFeed, append(args, text.Title, text.Body, text.Locale), nil
}

// itemCols scans an item's columns (seq first).
func itemCols(it *store.InboxItem, created *int64, readAt, archivedAt *sql.NullInt64) []any {
	return []any{&it.Seq, &it.MessageID, &it.NotificationID, &it.Kind, &it.Title, &it.Body, created, readAt, archivedAt}
}

func fillItem(it *store.InboxItem, created int64, readAt, archivedAt sql.NullInt64) {
	it.CreatedAt, it.ReadAt, it.ArchivedAt = fromMs(created), fromNullMs(readAt), fromNullMs(archivedAt)
}

// inboxSeq returns the seq an app gave (a cursor's, a stream's last event
// id) in today's numbers. A seq from before migration 26 (at most
// s.legacySeqs, and not 0) named a recipient's items 1, 2, 3…; the
// migration numbered the items again above them all and kept each item's
// old number in inbox_legacy_items. So up (reading after it, or marking up to
// it) it becomes the newest item whose old number is at most it; down
// (reading below it) the oldest whose old number is at least it. Where a
// recipient's old numbers did not follow the items' (created_at, id),
// which the migration's numbering follows, the walk from such a cursor
// follows the new order.
func (s *Store) inboxSeq(ctx context.Context, tenant, recipient string, seq int64, up bool) (int64, error) {
	if seq <= 0 || seq > s.legacySeqs {
		return seq, nil
	}
	q := qInboxLegacyDown
	if up {
		q = qInboxLegacyUp
	}
	var now int64
	if err := s.queryRow(ctx, q, tenant, recipient, seq).Scan(&now); err != nil {
		return 0, fmt.Errorf("read the item of inbox seq %d from before migration 26: %w", seq, err)
	}
	return now, nil
}

// InboxFeed reads a page of the recipient's items, newest first, and the
// badge, in one statement.
func (s *Store) InboxFeed(ctx context.Context, p store.InboxFeedParams) (store.InboxPage, error) {
	var err error
	if p.Before, err = s.inboxSeq(ctx, p.Tenant, p.Recipient, p.Before, false); err != nil {
		return store.InboxPage{}, fmt.Errorf("read inbox feed: %w", err)
	}
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
	afterSeq, err := s.inboxSeq(ctx, tenant, recipient, afterSeq, true)
	if err != nil {
		return nil, fmt.Errorf("read inbox items: %w", err)
	}
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
	upTo, err := s.inboxSeq(ctx, p.Tenant, p.Recipient, p.UpToSeq, true) // 0 for an old number below every item: marks none
	if err != nil {
		return store.InboxBadge{}, fmt.Errorf("mark inbox read: %w", err)
	}
	q, which := qInboxReadUpTo, any(upTo)
	switch {
	case p.All && p.UpToSeq <= 0:
		which = int64(1<<63 - 1)
	case !p.All:
		var ids []string
		for _, mid := range p.IDs {
			if id, ok := store.InboxNotificationID(mid); ok {
				ids = append(ids, id)
			}
		}
		if len(ids) == 0 {
			return s.InboxBadge(ctx, p.Tenant, p.Recipient)
		}
		q, which = qInboxReadIDs, jsonList(ids)
	}
	var badge store.InboxBadge
	var changed int64
	err = s.w.do(ctx, func(tx wtx) error {
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
	id, ok := store.InboxNotificationID(messageID)
	if !ok {
		return false, nil // not an inbox item's id
	}
	var found, changed bool
	err := s.w.do(ctx, func(tx wtx) error {
		found, changed = false, false
		counted, n, err := countTrue(tx, qInboxArchive, s.now(), tenant, recipient, id)
		if err != nil {
			return fmt.Errorf("archive inbox item: %w", err)
		}
		if n == 0 {
			var k int
			if err := tx.QueryRow(qInboxItemExists, id, tenant, recipient).Scan(&k); err != nil {
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

// InboxPurge clears up to p.Limit items created before p.Before off their
// notifications, oldest first, and lowers the counters of the unread ones,
// in one transaction.
func (s *Store) InboxPurge(ctx context.Context, p store.InboxPurgeParams) (int, error) {
	var deleted int
	var keys []store.InboxKey
	err := s.w.do(ctx, func(tx wtx) error {
		deleted, keys = 0, nil
		picked, unreadSeqs, err := purgePick(tx, p)
		if err != nil || len(picked) == 0 {
			return err
		}
		list := make([]int64, len(picked))
		unread := map[store.InboxKey]int64{}
		for i, it := range picked {
			list[i] = it.Seq
			k := store.InboxKey{Tenant: it.Tenant, Recipient: it.Recipient}
			if _, seen := unread[k]; !seen {
				keys, unread[k] = append(keys, k), 0
			}
			if unreadSeqs[it.Seq] {
				unread[k]++
			}
		}
		b, _ := json.Marshal(list)
		r, err := tx.Exec(qInboxPurge, string(b))
		if err != nil {
			return fmt.Errorf("clear inbox items: %w", err)
		}
		n, _ := r.RowsAffected()
		deleted = int(n)
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

// purgePick picks the items a purge clears: each tenant's oldest, then
// the oldest of those; unread holds the seqs of the picked ones that count
// as unread. It runs in the purge's write transaction, so what it read
// stays true until the purge clears them.
func purgePick(tx wtx, p store.InboxPurgeParams) (picked []store.InboxPurgeItem, unread map[int64]bool, err error) {
	var all []string
	if p.Tenant == "" {
		rows, err := tx.Query(qInboxTenants)
		if err != nil {
			return nil, nil, fmt.Errorf("list inbox tenants: %w", err)
		}
		for rows.Next() {
			var t string
			if err := rows.Scan(&t); err != nil {
				rows.Close()
				return nil, nil, fmt.Errorf("list inbox tenants: %w", err)
			}
			all = append(all, t)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, nil, fmt.Errorf("list inbox tenants: %w", err)
		}
	}
	unread = map[int64]bool{}
	for _, t := range p.Tenants(all) {
		rows, err := tx.Query(qInboxPurgePick, t, ms(p.Before), max(p.Limit, 1))
		if err != nil {
			return nil, nil, fmt.Errorf("pick inbox items: %w", err)
		}
		for rows.Next() {
			it := store.InboxPurgeItem{Tenant: t}
			var created int64
			var counted bool
			if err := rows.Scan(&it.Recipient, &it.Seq, &created, &counted); err != nil {
				rows.Close()
				return nil, nil, fmt.Errorf("pick inbox items: %w", err)
			}
			it.CreatedAt = fromMs(created)
			picked = append(picked, it)
			unread[it.Seq] = counted
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, nil, fmt.Errorf("pick inbox items: %w", err)
		}
	}
	return p.Oldest(picked), unread, nil
}

package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/store"
)

// The recipient inbox (store.Inbox).
//
// Reads are single statements, so one snapshot each: the feed reads the
// counter and its page together. Every write that changes a recipient's
// unread set locks the recipient's counter row first (SELECT … FOR UPDATE,
// or intake's upsert), then changes the items, then the counter by the
// rows it changed, all in one transaction. One lock order everywhere —
// counters before items, several counters in (tenant, recipient) order —
// so the writes wait for each other and never deadlock, and each one's
// statements after the lock see every write committed before it (READ
// COMMITTED takes a new snapshot per statement).
//
// Each statement finds its rows by key: the feed, the replay after a seq
// and the recount walk inbox_items' primary key (tenant, recipient, seq);
// marks by id find items by message_id; the purge walks
// inbox_items_tenant_created from each tenant's oldest item.
const (
	// qInboxLanguage reads the recipient's profile language for the
	// choice of a create's text. $1 tenant, $2 recipient.
	qInboxLanguage = `SELECT coalesce(data->>'language', '') FROM profiles WHERE tenant = $1::text AND recipient = $2::text`

	// qInboxFeed reads the counter and a page of items in one statement.
	// $1 tenant, $2 recipient, $3 before (seq), $4 include archived,
	// $5 limit.
	qInboxFeed = `SELECT c.unread, c.seq, i.seq, i.message_id, i.notification_id, i.kind, i.title, i.body, i.created_at, i.read_at, i.archived_at
FROM (SELECT coalesce(max(unread), 0) AS unread, coalesce(max(seq), 0) AS seq
      FROM inbox_counters WHERE tenant = $1::text AND recipient = $2::text) c
LEFT JOIN LATERAL (
    SELECT seq, message_id, notification_id, kind, title, body, created_at, read_at, archived_at FROM inbox_items
    WHERE tenant = $1::text AND recipient = $2::text AND seq < $3::bigint AND ($4::boolean OR archived_at IS NULL)
    ORDER BY seq DESC LIMIT $5::integer) i ON true
ORDER BY i.seq DESC`
	// $1 tenant, $2 recipient, $3 after (seq), $4 limit.
	qInboxAfter = `SELECT seq, message_id, notification_id, kind, title, body, created_at, read_at, archived_at FROM inbox_items
WHERE tenant = $1::text AND recipient = $2::text AND seq > $3::bigint ORDER BY seq LIMIT $4::integer`
	// $1 tenant, $2 recipient.
	qInboxBadge = `SELECT unread, seq FROM inbox_counters WHERE tenant = $1::text AND recipient = $2::text`
	qInboxLock  = qInboxBadge + ` FOR UPDATE`

	// The marks, each under the counter row's lock: u sets read_at (or
	// archived_at) where it is unset and says of each row it changed
	// whether it counted as unread; the counter loses those. The statement
	// returns the badge after it and how many rows changed. $1 now,
	// $2 tenant, $3 recipient, $4 the message ids, the last seq, or the
	// message id.
	qInboxReadIDs = `WITH u AS (
    UPDATE inbox_items SET read_at = coalesce($1::timestamptz, now())
    WHERE message_id = ANY($4::text[]) AND tenant = $2::text AND recipient = $3::text AND read_at IS NULL
    RETURNING archived_at IS NULL AS counted
)` + qInboxLower
	qInboxReadUpTo = `WITH u AS (
    UPDATE inbox_items SET read_at = coalesce($1::timestamptz, now())
    WHERE tenant = $2::text AND recipient = $3::text AND seq <= $4::bigint AND read_at IS NULL
    RETURNING archived_at IS NULL AS counted
)` + qInboxLower
	qInboxArchive = `WITH u AS (
    UPDATE inbox_items SET archived_at = coalesce($1::timestamptz, now())
    WHERE message_id = $4::text AND tenant = $2::text AND recipient = $3::text AND archived_at IS NULL
    RETURNING read_at IS NULL AS counted
)` + qInboxLower
	qInboxLower = `
UPDATE inbox_counters SET unread = unread - (SELECT count(*) FROM u WHERE counted)
WHERE tenant = $2::text AND recipient = $3::text
RETURNING unread, seq, (SELECT count(*) FROM u)`
	qInboxItemExists = `SELECT EXISTS (SELECT 1 FROM inbox_items WHERE message_id = $1::text AND tenant = $2::text AND recipient = $3::text)`

	// qInboxRecountLock locks up to $5 counter rows after ($1, $2), of
	// tenant $3 and recipient $4 ('' for any), in key order.
	qInboxRecountLock = `SELECT tenant, recipient, unread, seq FROM inbox_counters
WHERE (tenant, recipient) > ($1::text, $2::text) AND ($3::text = '' OR tenant = $3::text) AND ($4::text = '' OR recipient = $4::text)
ORDER BY tenant, recipient LIMIT $5::integer
FOR UPDATE`
	// qInboxRecountItems says, in a statement after the lock (so a
	// snapshot that holds every item committed before it), what the items
	// of the recipients $1, $2 (parallel) say: unread count, newest seq.
	qInboxRecountItems = `SELECT v.tenant, v.recipient, x.unread, x.seq
FROM unnest($1::text[], $2::text[]) AS v (tenant, recipient),
LATERAL (SELECT count(*) FILTER (WHERE i.read_at IS NULL AND i.archived_at IS NULL) AS unread, coalesce(max(i.seq), 0) AS seq
         FROM inbox_items i WHERE i.tenant = v.tenant AND i.recipient = v.recipient) x`
	// qInboxRecountSet sets a counter to what its items say; its seq never
	// goes back. $1 tenant, $2 recipient, $3 unread, $4 newest item's seq.
	qInboxRecountSet = `UPDATE inbox_counters SET unread = $3::bigint, seq = greatest(seq, $4::bigint)
WHERE tenant = $1::text AND recipient = $2::text RETURNING unread, seq`

	// qInboxTenants lists the tenants with an inbox (a skip scan of the
	// counters' key); qInboxPurgePick the oldest $3 items of tenant $1
	// created before $2, walking inbox_items_tenant_created.
	qInboxTenants = `WITH RECURSIVE t AS (
    SELECT min(tenant) AS tenant FROM inbox_counters
    UNION ALL
    SELECT (SELECT min(c.tenant) FROM inbox_counters c WHERE c.tenant > t.tenant) FROM t WHERE t.tenant IS NOT NULL)
SELECT tenant FROM t WHERE tenant IS NOT NULL`
	qInboxPurgePick = `SELECT recipient, seq, created_at FROM inbox_items
WHERE tenant = $1::text AND created_at < $2::timestamptz ORDER BY created_at LIMIT $3::integer`
	// qInboxPurgeLock locks the picked items' counter rows in key order.
	qInboxPurgeLock = `SELECT count(*) FROM (
    SELECT 1 FROM inbox_counters c JOIN unnest($1::text[], $2::text[]) AS v (tenant, recipient)
        ON c.tenant = v.tenant AND c.recipient = v.recipient
    ORDER BY c.tenant, c.recipient FOR UPDATE OF c) l`
	// qInboxPurge deletes the picked items ($1, $2, $3 parallel) that are
	// still there and lowers each counter by its unread ones; it returns
	// each recipient with how many of its items it deleted.
	qInboxPurge = `WITH d AS (
    DELETE FROM inbox_items i USING unnest($1::text[], $2::text[], $3::bigint[]) AS v (tenant, recipient, seq)
    WHERE i.tenant = v.tenant AND i.recipient = v.recipient AND i.seq = v.seq
    RETURNING i.tenant, i.recipient, i.read_at IS NULL AND i.archived_at IS NULL AS counted
),
g AS (SELECT tenant, recipient, count(*) AS deleted, count(*) FILTER (WHERE counted) AS unread FROM d GROUP BY tenant, recipient),
u AS (
    UPDATE inbox_counters c SET unread = c.unread - g.unread FROM g
    WHERE c.tenant = g.tenant AND c.recipient = g.recipient AND g.unread > 0
)
SELECT tenant, recipient, deleted FROM g`
)

// inboxForLanguage returns p's inbox text for the recipient and the
// profile language it was chosen by, which it reads with q only when the
// choice depends on it.
func inboxForLanguage(ctx context.Context, q Querier, p store.NotificationCreateParams) (inboxArgs, string, error) {
	var lang string
	if p.InboxNeedsLanguage() {
		err := q.QueryRow(ctx, qInboxLanguage, p.Tenant, p.Recipient).Scan(&lang)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) && !errors.Is(err, sql.ErrNoRows) {
			return inboxArgs{}, "", fmt.Errorf("read profile language: %w", err)
		}
	}
	text, err := p.InboxText(lang)
	if err != nil {
		return inboxArgs{}, "", err
	}
	return newInboxArgs(p, text), lang, nil
}

// scanItem scans qInboxAfter's columns.
func scanItem(row pgx.Row) (store.InboxItem, error) {
	var it store.InboxItem
	err := row.Scan(&it.Seq, &it.MessageID, &it.NotificationID, &it.Kind, &it.Title, &it.Body, &it.CreatedAt, &it.ReadAt, &it.ArchivedAt)
	it.CreatedAt = it.CreatedAt.UTC()
	it.ReadAt, it.ArchivedAt = utcPtr(it.ReadAt), utcPtr(it.ArchivedAt)
	return it, err
}

// InboxFeed reads a page of the recipient's items, newest first, and the
// badge, in one statement.
func (s *Store) InboxFeed(ctx context.Context, p store.InboxFeedParams) (store.InboxPage, error) {
	before, fetch := p.Window()
	rows, err := s.pool.Query(ctx, qInboxFeed, p.Tenant, p.Recipient, before, p.Archived, fetch)
	if err != nil {
		return store.InboxPage{}, s.fail("read inbox feed", err)
	}
	defer rows.Close()
	var page store.InboxPage
	for rows.Next() {
		var (
			seq                  *int64
			mid, nid, kind, t, b *string
			created              *time.Time
			readAt, archivedAt   *time.Time
		)
		if err := rows.Scan(&page.Badge.Unread, &page.Badge.Seq, &seq, &mid, &nid, &kind, &t, &b, &created, &readAt, &archivedAt); err != nil {
			return store.InboxPage{}, s.fail("read inbox feed", err)
		}
		if seq == nil {
			continue // no item: the counter's row alone
		}
		page.Items = append(page.Items, store.InboxItem{Seq: *seq, MessageID: *mid, NotificationID: *nid, Kind: *kind, Title: *t, Body: *b,
			CreatedAt: created.UTC(), ReadAt: utcPtr(readAt), ArchivedAt: utcPtr(archivedAt)})
	}
	if err := rows.Err(); err != nil {
		return store.InboxPage{}, s.fail("read inbox feed", err)
	}
	page.Cut(p)
	return page, nil
}

// InboxItemsAfter reads up to limit items after afterSeq, oldest first.
func (s *Store) InboxItemsAfter(ctx context.Context, tenant, recipient string, afterSeq int64, limit int) ([]store.InboxItem, error) {
	rows, err := s.pool.Query(ctx, qInboxAfter, tenant, recipient, afterSeq, max(limit, 1))
	if err != nil {
		return nil, s.fail("read inbox items", err)
	}
	defer rows.Close()
	var out []store.InboxItem
	for rows.Next() {
		it, err := scanItem(rows)
		if err != nil {
			return nil, s.fail("read inbox items", err)
		}
		out = append(out, it)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("read inbox items", err)
	}
	return out, nil
}

// InboxBadge reads the recipient's counter.
func (s *Store) InboxBadge(ctx context.Context, tenant, recipient string) (store.InboxBadge, error) {
	var b store.InboxBadge
	err := s.pool.QueryRow(ctx, qInboxBadge, tenant, recipient).Scan(&b.Unread, &b.Seq)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return store.InboxBadge{}, s.fail("read inbox badge", err)
	}
	return b, nil
}

// inboxMark runs one mark (q with $4 = which) under the recipient's
// counter lock and returns the badge after it and how many items changed.
// A recipient without a counter row has no item: nothing changes.
func (s *Store) inboxMark(ctx context.Context, tenant, recipient, q string, which any) (b store.InboxBadge, changed int64, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		b, changed = store.InboxBadge{}, 0
		err := tx.QueryRow(ctx, qInboxLock, tenant, recipient).Scan(&b.Unread, &b.Seq)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("lock inbox counter: %w", err)
		}
		return tx.QueryRow(ctx, q, s.now(), tenant, recipient, which).Scan(&b.Unread, &b.Seq, &changed)
	})
	if err == nil && changed > 0 {
		s.inboxChanged(store.InboxKey{Tenant: tenant, Recipient: recipient})
	}
	return b, changed, err
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
		q, which = qInboxReadIDs, p.IDs
	}
	b, _, err := s.inboxMark(ctx, p.Tenant, p.Recipient, q, which)
	if err != nil {
		return store.InboxBadge{}, s.fail("mark inbox read", err)
	}
	return b, nil
}

// InboxArchive archives one of the recipient's items.
func (s *Store) InboxArchive(ctx context.Context, tenant, recipient, messageID string) (bool, error) {
	_, changed, err := s.inboxMark(ctx, tenant, recipient, qInboxArchive, messageID)
	if err != nil {
		return false, s.fail("archive inbox item", err)
	}
	if changed > 0 {
		return true, nil
	}
	var found bool
	if err := s.pool.QueryRow(ctx, qInboxItemExists, messageID, tenant, recipient).Scan(&found); err != nil {
		return false, s.fail("archive inbox item", err)
	}
	return found, nil
}

// InboxRecount recomputes counters from the items, a batch per
// transaction: it locks the batch's counter rows, then counts their items.
func (s *Store) InboxRecount(ctx context.Context, p store.InboxRecountParams) (store.InboxRecountResult, error) {
	batch := p.BatchOrDefault()
	var res store.InboxRecountResult
	afterT, afterR := "", ""
	for {
		var checked int
		var drifted []store.InboxDrift
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			checked, drifted = 0, nil
			was, tenants, recipients, err := recountLock(ctx, tx, afterT, afterR, p, batch)
			if err != nil || len(tenants) == 0 {
				return err
			}
			checked = len(tenants)
			afterT, afterR = tenants[checked-1], recipients[checked-1]
			rows, err := tx.Query(ctx, qInboxRecountItems, tenants, recipients)
			if err != nil {
				return fmt.Errorf("count inbox items: %w", err)
			}
			is := map[store.InboxKey]store.InboxBadge{}
			for rows.Next() {
				var k store.InboxKey
				var b store.InboxBadge
				if err := rows.Scan(&k.Tenant, &k.Recipient, &b.Unread, &b.Seq); err != nil {
					rows.Close()
					return fmt.Errorf("count inbox items: %w", err)
				}
				is[k] = b
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return fmt.Errorf("count inbox items: %w", err)
			}
			for i := range tenants {
				k := store.InboxKey{Tenant: tenants[i], Recipient: recipients[i]}
				if !is[k].DriftedFrom(was[i]) {
					continue
				}
				var now store.InboxBadge
				if err := tx.QueryRow(ctx, qInboxRecountSet, k.Tenant, k.Recipient, is[k].Unread, is[k].Seq).Scan(&now.Unread, &now.Seq); err != nil {
					return fmt.Errorf("set inbox counter: %w", err)
				}
				drifted = append(drifted, store.InboxDrift{Tenant: k.Tenant, Recipient: k.Recipient, Was: was[i], Now: now})
			}
			return nil
		})
		if err != nil {
			return res, s.fail("recount inbox", err)
		}
		s.inboxChanged(res.Add(checked, drifted)...)
		if checked < batch {
			return res, nil
		}
	}
}

// recountLock locks a batch of counter rows and returns them as they were.
func recountLock(ctx context.Context, tx pgx.Tx, afterT, afterR string, p store.InboxRecountParams, batch int) (was []store.InboxBadge, tenants, recipients []string, err error) {
	rows, err := tx.Query(ctx, qInboxRecountLock, afterT, afterR, p.Tenant, p.Recipient, batch)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("lock inbox counters: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var t, r string
		var b store.InboxBadge
		if err := rows.Scan(&t, &r, &b.Unread, &b.Seq); err != nil {
			return nil, nil, nil, fmt.Errorf("lock inbox counters: %w", err)
		}
		was, tenants, recipients = append(was, b), append(tenants, t), append(recipients, r)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, nil, fmt.Errorf("lock inbox counters: %w", err)
	}
	return was, tenants, recipients, nil
}

// InboxPurge deletes up to p.Limit items created before p.Before, oldest
// first, and lowers the counters of the unread ones, in one transaction:
// it picks the items, locks their counters, then deletes those still
// there.
func (s *Store) InboxPurge(ctx context.Context, p store.InboxPurgeParams) (int, error) {
	var deleted int
	var keys []store.InboxKey
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		deleted, keys = 0, nil
		picked, err := purgePick(ctx, tx, p)
		if err != nil || len(picked) == 0 {
			return err
		}
		tenants, recipients, seqs := make([]string, len(picked)), make([]string, len(picked)), make([]int64, len(picked))
		for i, it := range picked {
			tenants[i], recipients[i], seqs[i] = it.Tenant, it.Recipient, it.Seq
		}
		var locked int64
		if err := tx.QueryRow(ctx, qInboxPurgeLock, tenants, recipients).Scan(&locked); err != nil {
			return fmt.Errorf("lock inbox counters: %w", err)
		}
		rows, err := tx.Query(ctx, qInboxPurge, tenants, recipients, seqs)
		if err != nil {
			return fmt.Errorf("delete inbox items: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var k store.InboxKey
			var n int
			if err := rows.Scan(&k.Tenant, &k.Recipient, &n); err != nil {
				return fmt.Errorf("delete inbox items: %w", err)
			}
			keys, deleted = append(keys, k), deleted+n
		}
		return rows.Err()
	})
	if err != nil {
		return 0, s.fail("purge inbox", err)
	}
	s.inboxChanged(keys...)
	return deleted, nil
}

// purgePick picks the items a purge deletes: each tenant's oldest, then
// the oldest of those.
func purgePick(ctx context.Context, tx pgx.Tx, p store.InboxPurgeParams) ([]store.InboxPurgeItem, error) {
	var all []string
	if p.Tenant == "" {
		rows, err := tx.Query(ctx, qInboxTenants)
		if err != nil {
			return nil, fmt.Errorf("list inbox tenants: %w", err)
		}
		if all, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return nil, fmt.Errorf("list inbox tenants: %w", err)
		}
	}
	var picked []store.InboxPurgeItem
	for _, t := range p.Tenants(all) {
		rows, err := tx.Query(ctx, qInboxPurgePick, t, p.Before, max(p.Limit, 1))
		if err != nil {
			return nil, fmt.Errorf("pick inbox items: %w", err)
		}
		for rows.Next() {
			it := store.InboxPurgeItem{Tenant: t}
			if err := rows.Scan(&it.Recipient, &it.Seq, &it.CreatedAt); err != nil {
				rows.Close()
				return nil, fmt.Errorf("pick inbox items: %w", err)
			}
			picked = append(picked, it)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("pick inbox items: %w", err)
		}
	}
	return p.Oldest(picked), nil
}

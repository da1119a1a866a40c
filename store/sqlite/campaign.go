package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

var _ store.Campaigns = (*Store)(nil)

// Campaigns (store.Campaigns). The single writer orders every write of a
// campaign: a page, a start, a fan-out batch and a cancel each run whole
// in one of its transactions.
const (
	qCampaignInsert = `INSERT INTO campaigns (id, tenant, kind, lane, channels, params, send_at, state, idempotency_key, request_hash, created_at,
                       draft_expires_at, scope)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'DRAFT', ?8, ?9, ?10, ?10 + ?11, ?12) ON CONFLICT (tenant, idempotency_key) DO NOTHING`
	qCampaignByKey = `SELECT id, request_hash FROM campaigns WHERE tenant = ? AND idempotency_key = ?`
	// qCampaignState reads a campaign's state and whether it is a draft
	// past its deadline by ?3 (now): then a start or a page is refused, as
	// after its expiry.
	qCampaignState = `SELECT state, coalesce(state = 'DRAFT' AND draft_expires_at <= ?3, 0) FROM campaigns WHERE tenant = ?1 AND id = ?2`
	// qCampaignRecipientAdd adds one recipient of a page; the page's rows
	// run in its order in one transaction, so seq keeps that order.
	qCampaignRecipientAdd = `INSERT INTO campaign_recipients (campaign_id, recipient, notification_id, params) VALUES (?, ?, ?, ?)
ON CONFLICT (campaign_id, recipient) DO NOTHING`
	qCampaignTotal = `UPDATE campaigns SET total = total + ? WHERE id = ? RETURNING total`
	qCampaignStart = `UPDATE campaigns SET state = 'RUNNING', started_at = ? WHERE tenant = ? AND id = ? AND state = 'DRAFT'`
	// qCampaignGet reads a campaign with its send counts, kept by the
	// triggers of migration 27 (store.CampaignCounts).
	qCampaignGet = `SELECT c.id, c.tenant, c.kind, c.lane, c.scope, c.state, c.params, c.total, c.enqueued, c.send_at, c.created_at, c.started_at, c.ended_at,
       c.draft_expires_at, coalesce(c.ended_reason, ''), coalesce(k.sent, 0), coalesce(k.suppressed, 0), coalesce(k.failed, 0), coalesce(k.unknown, 0)
FROM campaigns c LEFT JOIN campaign_counts k ON k.campaign_id = c.id
WHERE c.tenant = ? AND c.id = ?`
	// qCampaignList reads a page of a tenant's campaigns, newest first,
	// each with its counts as qCampaignGet reads them, walking
	// campaigns_tenant_created (migration 34) backwards from the cursor:
	// the row value (created_at, id) bounds the index scan, as the
	// notifications' listing's does, the largest time on the first page
	// (an "?2 IS NULL OR" would make it a filter, every page walking from
	// the newest). qCampaignListState is the page of one state's, on
	// campaigns_tenant_state_created (migration 35), so that a page of the
	// few running campaigns does not walk the many ended ones. ?1 tenant,
	// ?2 and ?3 the previous page's last created_at and id, ?4 limit, ?5
	// the state (qCampaignListState).
	qCampaignList        = qCampaignListColumns + `WHERE c.tenant = ?1 AND (c.created_at, c.id) < (?2, ?3)` + qCampaignListOrder
	qCampaignListState   = qCampaignListColumns + `WHERE c.tenant = ?1 AND c.state = ?5 AND (c.created_at, c.id) < (?2, ?3)` + qCampaignListOrder
	qCampaignListColumns = `SELECT c.id, c.tenant, c.kind, c.lane, c.scope, c.state, c.params, c.total, c.enqueued, c.send_at, c.created_at, c.started_at, c.ended_at,
       c.draft_expires_at, coalesce(c.ended_reason, ''), coalesce(k.sent, 0), coalesce(k.suppressed, 0), coalesce(k.failed, 0), coalesce(k.unknown, 0)
FROM campaigns c LEFT JOIN campaign_counts k ON k.campaign_id = c.id
`
	qCampaignListOrder = `
ORDER BY c.created_at DESC, c.id DESC
LIMIT ?4`
	// qCampaignsRunning pages through the RUNNING campaigns after (?2, ?3)
	// (NULLs: from the first).
	qCampaignsRunning = `SELECT tenant, id, lane, started_at FROM campaigns
WHERE state = 'RUNNING' AND (?2 IS NULL OR (started_at, id) > (?2, ?3))
ORDER BY started_at, id LIMIT ?1`
	qCampaignFanOutHead = `SELECT kind, lane, channels, params, send_at, state, fanout_seq, scope FROM campaigns WHERE tenant = ? AND id = ?`
	// qCampaignBatch bounds the next batch: how many recipients follow the
	// cursor ?2 (at most ?3) and the last one's seq.
	qCampaignBatch = `SELECT count(*), coalesce(max(seq), ?2) FROM (
    SELECT seq FROM campaign_recipients WHERE campaign_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3)`
	// qCampaignNotifications writes the batch's notifications (seq in
	// (?2, ?3]; ?10 their scope); an id that exists fails the batch, as on
	// PostgreSQL.
	qCampaignNotifications = `INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, send_at, created_at, campaign_id, scope)
SELECT notification_id, ?4, recipient, ?1, ?5, ?6, coalesce(params, ?7), ?8, ?9, ?1, ?10
FROM campaign_recipients WHERE campaign_id = ?1 AND seq > ?2 AND seq <= ?3 ORDER BY seq`
	// qCampaignOutbox writes their outbox rows as intake does (insertPlanned):
	// one per channel of ?7 (a JSON array of [channel, step]), per active
	// device for push, a chain's first step PENDING and the later ones
	// WAITING, ?9 their scope, ?10 whether the PENDING ones are deferred
	// (deferredAt; a campaign sent tomorrow); a message id that exists
	// writes nothing.
	qCampaignOutbox = `INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, expires_at, created_at, updated_at,
                    fallback_step, scope, deferred)
SELECT r.notification_id, r.notification_id || '.' || json_extract(c.value, '$[0]') || coalesce('.' || dv.device_id, ''), ?4, ?5,
       json_extract(c.value, '$[0]') || coalesce('.' || dv.device_id, ''),
       CASE WHEN json_extract(c.value, '$[1]') > 1 THEN 'WAITING' ELSE 'PENDING' END, ?6, NULL, ?8, ?8, nullif(json_extract(c.value, '$[1]'), 0), ?9,
       CASE WHEN json_extract(c.value, '$[1]') > 1 THEN 0 ELSE ?10 END
FROM campaign_recipients r CROSS JOIN json_each(?7) c
LEFT JOIN devices dv ON json_extract(c.value, '$[0]') = 'push' AND dv.tenant = ?4 AND dv.recipient = r.recipient AND dv.active = 1
WHERE r.campaign_id = ?1 AND r.seq > ?2 AND r.seq <= ?3
ORDER BY r.seq, c.key, dv.device_id
ON CONFLICT DO NOTHING`
	// qCampaignBatches: PostgreSQL's, the recipients read once for both
	// the ends and the last.
	// ?1 tenant, ?2 id, ?3 size, ?4 count, ?5 the seq to read after (NULL:
	// the cursor).
	qCampaignBatches = `SELECT c.state, coalesce(?5, c.fanout_seq), b.ends, b.last
FROM campaigns c, (
    SELECT json_group_array(x.seq) FILTER (WHERE x.rn % ?3 = 0) AS ends, max(x.seq) AS last
    FROM (SELECT seq, row_number() OVER (ORDER BY seq) AS rn FROM campaign_recipients
          WHERE campaign_id = ?2 AND seq > coalesce(?5, (SELECT fanout_seq FROM campaigns WHERE id = ?2)) ORDER BY seq LIMIT ?3 * ?4) x
) b
WHERE c.tenant = ?1 AND c.id = ?2`
	// qCampaignLeft: whether any recipient follows ?2.
	qCampaignLeft    = `SELECT EXISTS (SELECT 1 FROM campaign_recipients WHERE campaign_id = ?1 AND seq > ?2)`
	qCampaignAdvance = `UPDATE campaigns SET fanout_seq = ?2, enqueued = enqueued + ?3,
    state = CASE WHEN ?4 THEN 'DONE' ELSE state END, ended_at = CASE WHEN ?4 THEN ?5 ELSE ended_at END
WHERE id = ?1`
	// qCampaignsExpireDrafts ends CANCELLED (DRAFT_EXPIRED) up to ?1 DRAFT
	// campaigns whose deadline ?2 has reached, the earliest first
	// (campaigns_draft); the single writer puts it before or after any
	// page, start or cancel.
	qCampaignsExpireDrafts = `UPDATE campaigns SET state = 'CANCELLED', ended_reason = 'DRAFT_EXPIRED', ended_at = ?2
WHERE id IN (SELECT id FROM campaigns WHERE state = 'DRAFT' AND draft_expires_at <= ?2 ORDER BY draft_expires_at, id LIMIT ?1)
RETURNING tenant, id, lane`
	qCampaignCancelMark = `UPDATE campaigns SET state = 'CANCELLED', ended_at = ? WHERE id = ?`
	// The cancel's writes: PostgreSQL's qCampaignCancelSends, one
	// statement each. ?1 campaign id, ?2 tenant, ?3 now.
	// qCampaignBegun counts the sends under way at the cancel: those in
	// flight (SENDING), and those waiting to be tried again (RETRY_WAIT,
	// PARKED), which qCampaignCancelSends turns SUPPRESSED where it
	// inserts a decision for the others.
	qCampaignBegun = `SELECT count(CASE WHEN d.state = 'SENDING' THEN 1 END), count(CASE WHEN d.state IN ('RETRY_WAIT', 'PARKED') THEN 1 END)
FROM campaign_recipients cr JOIN outbox o ON o.notification_id = cr.notification_id
JOIN deliveries d ON d.message_id = o.message_id
WHERE cr.campaign_id = ?1 AND cr.seq <= (SELECT fanout_seq FROM campaigns WHERE id = ?1) AND o.state NOT IN ('EXPIRED', 'FAILED', 'SKIPPED', 'WAITING')
  AND d.state IN ('SENDING', 'RETRY_WAIT', 'PARKED')`
	// qCampaignCountPause pauses (1) or resumes (0) the count of inserted
	// deliveries (migration 32), and qCampaignCountSuppressed adds the
	// decisions the cancel inserted meanwhile, each one SUPPRESSED over an
	// outbox row that had not ended (the trigger's own count for them).
	qCampaignCountPause      = `UPDATE campaign_count_pause SET paused = ?1 WHERE id = 1`
	qCampaignCountSuppressed = `INSERT INTO campaign_counts (campaign_id, sent, suppressed, failed, unknown) VALUES (?1, 0, ?2, 0, 0)
ON CONFLICT (campaign_id) DO UPDATE SET suppressed = suppressed + excluded.suppressed`
	qCampaignCancelSends = `INSERT INTO deliveries (message_id, notification_id, tenant, channel, state, reason, created_at, updated_at)
SELECT o.message_id, o.notification_id, ?2, o.channel, 'SUPPRESSED', 'CANCELLED', ?3, ?3
FROM campaign_recipients cr JOIN outbox o ON o.notification_id = cr.notification_id
WHERE cr.campaign_id = ?1 AND cr.seq <= (SELECT fanout_seq FROM campaigns WHERE id = ?1) AND o.state NOT IN ('EXPIRED', 'FAILED', 'SKIPPED', 'WAITING')
ON CONFLICT (message_id) DO UPDATE SET state = excluded.state, reason = excluded.reason, next_attempt_at = NULL, updated_at = excluded.updated_at
WHERE deliveries.state IN ('RETRY_WAIT', 'PARKED')`
	qCampaignCancelWaiting = `UPDATE outbox SET state = 'SKIPPED', last_reason = 'FALLBACK_NOT_NEEDED', fallback_after = 'CANCELLED', updated_at = ?3
WHERE state = 'WAITING' AND tenant = ?2 AND notification_id IN (SELECT notification_id FROM campaign_recipients WHERE campaign_id = ?1)`
)

// CampaignCreate writes a DRAFT campaign and its first page in one
// transaction.
func (s *Store) CampaignCreate(ctx context.Context, p store.CampaignCreateParams) (store.CampaignCreateResult, error) {
	channels, err := campaignChannels(p.Channels, p.Fallback)
	if err != nil {
		return store.CampaignCreateResult{}, err
	}
	var res store.CampaignCreateResult
	var full error
	err = s.w.do(ctx, func(tx wtx) (err error) {
		res, full = store.CampaignCreateResult{}, nil
		full, err = undoIfFull(tx, func() error { return s.campaignCreate(tx, p, channels, &res) })
		return err
	})
	if err == nil {
		err = full
	}
	if err != nil {
		return store.CampaignCreateResult{}, campaignErr("create campaign", err)
	}
	return res, nil
}

// campaignCreate is CampaignCreate's writes, res its answer.
func (s *Store) campaignCreate(tx wtx, p store.CampaignCreateParams, channels string, res *store.CampaignCreateResult) error {
	r, err := tx.Exec(qCampaignInsert, p.ID, p.Tenant, p.Kind, string(p.Lane), channels, string(paramsOrEmpty(p.Params)),
		msPtr(p.SendAt), p.IdempotencyKey, p.RequestHash, s.now(), p.DraftTTLOrDefault().Milliseconds(), p.Scope)
	if err != nil {
		return fmt.Errorf("insert campaign: %w", err)
	}
	if n, _ := r.RowsAffected(); n == 0 {
		var id, hash string
		if err := tx.QueryRow(qCampaignByKey, p.Tenant, p.IdempotencyKey).Scan(&id, &hash); err != nil {
			return fmt.Errorf("read campaign by key: %w", err)
		}
		*res = store.CampaignCreateResult{Outcome: store.Conflict}
		if hash == p.RequestHash {
			*res = store.CampaignCreateResult{Outcome: store.Replayed, ID: id}
		}
		return nil
	}
	if _, err := addRecipients(tx, p.ID, p.Recipients, p.MaxRecipients); err != nil {
		return err
	}
	*res = store.CampaignCreateResult{Outcome: store.Created, ID: p.ID}
	return nil
}

// undoIfFull runs fn under a savepoint. When fn finds a page past the
// campaign's cap (store.ErrCampaignFull) it undoes fn's writes and returns
// that as full, with a nil err for the writer: the refusal is the page's
// answer, not a failed write, so the other writes of the writer's group
// commit as they are instead of being rerun one by one (a client sending
// pages over the cap slows nobody else's writes).
func undoIfFull(tx wtx, fn func() error) (full, err error) {
	if _, err := tx.Exec(`SAVEPOINT campaign_page`); err != nil {
		return nil, fmt.Errorf("savepoint: %w", err)
	}
	err = fn()
	if errors.Is(err, store.ErrCampaignFull) {
		if _, rerr := tx.Exec(`ROLLBACK TO campaign_page`); rerr != nil {
			return nil, fmt.Errorf("roll back the page: %w", rerr)
		}
		full, err = err, nil
	}
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(`RELEASE campaign_page`); err != nil {
		return nil, fmt.Errorf("release savepoint: %w", err)
	}
	return full, nil
}

// campaignChannels returns the channels with their fallback steps as the
// fan-out's JSON array of [channel, step].
func campaignChannels(chs []heraldtype.Channel, chain bool) (string, error) {
	pairs := make([][2]any, len(chs))
	for i, n := range store.FallbackSteps(chs, chain) {
		pairs[i] = [2]any{string(chs[i]), n}
	}
	b, err := json.Marshal(pairs)
	if err != nil {
		return "", fmt.Errorf("encode campaign channels: %w", err)
	}
	return string(b), nil
}

// addRecipients adds a page in its order and counts the new ones into
// the campaign's total; store.ErrCampaignFull when that total passes max
// (0: no cap), and the caller's transaction, rolled back, writes nothing.
func addRecipients(tx wtx, id string, rs []store.CampaignRecipient, max int64) (int, error) {
	added := 0
	for _, r := range rs {
		var params any
		if r.Params != nil {
			params = string(r.Params)
		}
		res, err := tx.Exec(qCampaignRecipientAdd, id, r.Recipient, r.NotificationID, params)
		if err != nil {
			return 0, fmt.Errorf("add recipient: %w", err)
		}
		n, _ := res.RowsAffected()
		added += int(n)
	}
	var total int64
	if err := tx.QueryRow(qCampaignTotal, added, id).Scan(&total); err != nil {
		return 0, fmt.Errorf("count recipients: %w", err)
	}
	if max > 0 && total > max {
		return 0, store.ErrCampaignFull
	}
	return added, nil
}

// campaignState reads a campaign's state, and whether it is a draft past
// its deadline (not started nor added to from then on, though the runner
// may not have ended it yet), or store.ErrNotFound.
func (s *Store) campaignState(tx wtx, tenant, id string) (state string, due bool, err error) {
	err = tx.QueryRow(qCampaignState, tenant, id, s.now()).Scan(&state, &due)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, store.ErrNotFound
	}
	if err != nil {
		return "", false, fmt.Errorf("read campaign state: %w", err)
	}
	return state, due, nil
}

// campaignErr wraps err, leaving the sentinel errors as they are.
func campaignErr(what string, err error) error {
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrCampaignState) || errors.Is(err, store.ErrCampaignFull) {
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}

// CampaignAddRecipients adds a page to a DRAFT campaign.
func (s *Store) CampaignAddRecipients(ctx context.Context, p store.CampaignAddParams) (int, error) {
	var n int
	var full error
	err := s.w.do(ctx, func(tx wtx) error {
		n, full = 0, nil
		state, due, err := s.campaignState(tx, p.Tenant, p.ID)
		if err != nil {
			return err
		}
		if state != store.CampaignDraft || due {
			return store.ErrCampaignState
		}
		full, err = undoIfFull(tx, func() (err error) {
			n, err = addRecipients(tx, p.ID, p.Recipients, p.MaxRecipients)
			return err
		})
		return err
	})
	if err == nil {
		err = full
	}
	if err != nil {
		return 0, campaignErr("add campaign recipients", err)
	}
	return n, nil
}

// CampaignStart moves a DRAFT campaign to RUNNING.
func (s *Store) CampaignStart(ctx context.Context, tenant, id string) (store.Campaign, error) {
	err := s.w.do(ctx, func(tx wtx) error {
		state, due, err := s.campaignState(tx, tenant, id)
		switch {
		case err != nil:
			return err
		case state == store.CampaignCancelled || due:
			return store.ErrCampaignState
		}
		if _, err := tx.Exec(qCampaignStart, s.now(), tenant, id); err != nil {
			return fmt.Errorf("start campaign: %w", err)
		}
		return nil
	})
	if err != nil {
		return store.Campaign{}, campaignErr("start campaign", err)
	}
	return s.CampaignGet(ctx, tenant, id)
}

// rowQuerier is what a campaign read runs on: the read pool or the
// writer's transaction.
type rowQuerier func(q string, args ...any) *sql.Row

// CampaignGet returns a campaign with its counts.
func (s *Store) CampaignGet(ctx context.Context, tenant, id string) (store.Campaign, error) {
	c, err := readCampaign(func(q string, args ...any) *sql.Row { return s.queryRow(ctx, q, args...) }, tenant, id)
	if err != nil {
		return c, campaignErr("read campaign", err)
	}
	return c, nil
}

func readCampaign(q rowQuerier, tenant, id string) (store.Campaign, error) {
	c, err := scanCampaign(q(qCampaignGet, tenant, id).Scan)
	if errors.Is(err, sql.ErrNoRows) {
		return c, store.ErrNotFound
	}
	if err != nil {
		return c, fmt.Errorf("read campaign: %w", err)
	}
	return c, nil
}

// scanCampaign reads a row of qCampaignGet's (or qCampaignList's)
// columns with scan.
func scanCampaign(scan func(dest ...any) error) (store.Campaign, error) {
	var c store.Campaign
	var lane, params string
	var sendAt, started, ended, expires sql.NullInt64
	var created int64
	k := &c.Counts
	if err := scan(&c.ID, &c.Tenant, &c.Kind, &lane, &c.Scope, &c.State, &params, &c.Total, &c.Enqueued, &sendAt, &created, &started, &ended,
		&expires, &c.Reason, &k.Sent, &k.Suppressed, &k.Failed, &k.Unknown); err != nil {
		return c, err
	}
	c.Lane, c.Params, c.CreatedAt = heraldtype.Lane(lane), json.RawMessage(params), fromMs(created)
	c.SendAt, c.StartedAt, c.EndedAt, c.DraftExpiresAt = fromNullMs(sendAt), fromNullMs(started), fromNullMs(ended), fromNullMs(expires)
	return c, nil
}

// CampaignList reads a page of a tenant's campaigns (qCampaignList).
func (s *Store) CampaignList(ctx context.Context, p store.CampaignListParams) ([]store.Campaign, error) {
	at, id := int64(math.MaxInt64), ""
	if p.Before != nil {
		at, id = ms(p.Before.CreatedAt), p.Before.ID
	}
	q, args := qCampaignList, []any{p.Tenant, at, id, p.Limit}
	if p.State != "" {
		q, args = qCampaignListState, append(args, p.State)
	}
	rows, err := s.rdb.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, campaignErr("list campaigns", err)
	}
	defer rows.Close()
	var out []store.Campaign
	for rows.Next() {
		c, err := scanCampaign(rows.Scan)
		if err != nil {
			return nil, campaignErr("list campaigns", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, campaignErr("list campaigns", err)
	}
	return out, nil
}

// CampaignsRunning lists RUNNING campaigns.
func (s *Store) CampaignsRunning(ctx context.Context, after *store.CampaignRef, limit int) ([]store.CampaignRef, error) {
	var at any
	var id string
	if after != nil {
		at, id = ms(after.Started), after.ID
	}
	rows, err := s.rdb.QueryContext(ctx, qCampaignsRunning, limit, at, id)
	if err != nil {
		return nil, fmt.Errorf("list running campaigns: %w", err)
	}
	defer rows.Close()
	var out []store.CampaignRef
	for rows.Next() {
		var c store.CampaignRef
		var started int64
		if err := rows.Scan(&c.Tenant, &c.ID, &c.Lane, &started); err != nil {
			return nil, fmt.Errorf("list running campaigns: %w", err)
		}
		c.Started = fromMs(started)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list running campaigns: %w", err)
	}
	return out, nil
}

// CampaignFanOut writes one batch and moves the cursor in one of the
// writer's transactions.
func (s *Store) CampaignFanOut(ctx context.Context, p store.CampaignFanOutParams) (store.CampaignFanOutResult, error) {
	if p.Range != nil && p.Turn != nil {
		// Before the writer: inside its transaction the batch before
		// this one could never be written.
		if err := p.Turn(ctx); err != nil {
			return store.CampaignFanOutResult{}, campaignErr("fan out campaign", fmt.Errorf("wait for the batch before: %w", err))
		}
	}
	var res store.CampaignFanOutResult
	err := s.w.do(ctx, func(tx wtx) error {
		res = store.CampaignFanOutResult{}
		var kind, lane, channels, params, state, scope string
		var sendAt sql.NullInt64
		var cursor int64
		err := tx.QueryRow(qCampaignFanOutHead, p.Tenant, p.ID).Scan(&kind, &lane, &channels, &params, &sendAt, &state, &cursor, &scope)
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("read campaign: %w", err)
		}
		res.Lane = heraldtype.Lane(lane)
		if state != store.CampaignRunning {
			res.Done = true
			return nil
		}
		var last int64
		if p.Range != nil {
			// A ranged batch: on the single writer the batch before it
			// has committed or failed by now.
			if cursor != p.Range.After {
				return store.ErrCampaignBehind
			}
			last = p.Range.Upto
		} else if err := tx.QueryRow(qCampaignBatch, p.ID, cursor, p.Limit).Scan(&res.Recipients, &last); err != nil {
			return fmt.Errorf("bound batch: %w", err)
		}
		now := s.now()
		available := now
		if sendAt.Valid && sendAt.Int64 > now {
			available = sendAt.Int64
		}
		if p.Range != nil || res.Recipients > 0 {
			r, err := tx.Exec(qCampaignNotifications, p.ID, cursor, last, p.Tenant, kind, lane, params, sendAt, now, scope)
			if err != nil {
				return fmt.Errorf("write notifications: %w", err)
			}
			n, _ := r.RowsAffected()
			res.Notifications = int(n)
			if r, err = tx.Exec(qCampaignOutbox, p.ID, cursor, last, p.Tenant, lane, available, channels, now, scope, deferredAt(available, now)); err != nil {
				return fmt.Errorf("write outbox rows: %w", err)
			}
			n, _ = r.RowsAffected()
			res.Outbox = int(n)
		}
		if p.Range != nil {
			// One notification a recipient (an id written twice fails
			// the batch): the insert counted the range's recipients.
			res.Recipients = res.Notifications
			var left bool
			if err := tx.QueryRow(qCampaignLeft, p.ID, last).Scan(&left); err != nil {
				return fmt.Errorf("read what is left: %w", err)
			}
			res.Done = !left
		} else {
			res.Done = res.Recipients < p.Limit
		}
		if _, err := tx.Exec(qCampaignAdvance, p.ID, last, res.Recipients, res.Done, now); err != nil {
			return fmt.Errorf("advance cursor: %w", err)
		}
		if p.BeforeCommit != nil {
			return p.BeforeCommit()
		}
		return nil
	})
	if err != nil {
		return store.CampaignFanOutResult{}, campaignErr("fan out campaign", err)
	}
	if res.Outbox > 0 {
		s.wakeups.Notify(res.Lane)
	}
	return res, nil
}

// CampaignBatches reads the bounds of the next count batches
// (qCampaignBatches).
func (s *Store) CampaignBatches(ctx context.Context, tenant, id string, after *int64, size, count int) ([]store.CampaignRange, error) {
	var state, endsJSON string
	var cursor int64
	var last sql.NullInt64
	err := s.queryRow(ctx, qCampaignBatches, tenant, id, size, count, after).Scan(&state, &cursor, &endsJSON, &last)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read campaign batches: %w", err)
	}
	if state != store.CampaignRunning {
		return nil, nil
	}
	var ends []int64
	if err := json.Unmarshal([]byte(endsJSON), &ends); err != nil {
		return nil, fmt.Errorf("read campaign batches: %w", err)
	}
	slices.Sort(ends) // json_group_array keeps no promised order
	var lastp *int64
	if last.Valid {
		lastp = &last.Int64
	}
	return store.CampaignRanges(cursor, ends, lastp), nil
}

// CampaignCancel ends a campaign CANCELLED and its sends that have not
// begun, reporting what had gone before.
func (s *Store) CampaignCancel(ctx context.Context, tenant, id string) (store.CampaignCancelResult, error) {
	var res store.CampaignCancelResult
	err := s.w.do(ctx, func(tx wtx) error {
		res = store.CampaignCancelResult{}
		c, err := readCampaign(tx.QueryRow, tenant, id)
		if err != nil {
			return err
		}
		res.Campaign = c
		if c.State == store.CampaignCancelled {
			res.Already = true
			return nil
		}
		now := s.now()
		if _, err := tx.Exec(qCampaignCancelMark, now, id); err != nil {
			return fmt.Errorf("mark campaign cancelled: %w", err)
		}
		ended := fromMs(now)
		res.Campaign.State, res.Campaign.EndedAt = store.CampaignCancelled, &ended
		var waiting int64
		if err := tx.QueryRow(qCampaignBegun, id).Scan(&res.InFlight, &waiting); err != nil {
			return fmt.Errorf("count sends in flight: %w", err)
		}
		// The decisions it inserts are counted once, after the insert,
		// not by the row trigger one by one (migration 32); the waiting
		// sends it turns SUPPRESSED are counted by the update trigger.
		if _, err := tx.Exec(qCampaignCountPause, 1); err != nil {
			return fmt.Errorf("pause the campaign counts: %w", err)
		}
		r, err := tx.Exec(qCampaignCancelSends, id, tenant, now)
		if err != nil {
			return fmt.Errorf("cancel campaign sends: %w", err)
		}
		n, err := r.RowsAffected()
		if err != nil {
			return fmt.Errorf("cancel campaign sends: %w", err)
		}
		if _, err := tx.Exec(qCampaignCountPause, 0); err != nil {
			return fmt.Errorf("resume the campaign counts: %w", err)
		}
		if inserted := n - waiting; inserted > 0 {
			if _, err := tx.Exec(qCampaignCountSuppressed, id, inserted); err != nil {
				return fmt.Errorf("count the cancelled sends: %w", err)
			}
		}
		if r, err = tx.Exec(qCampaignCancelWaiting, id, tenant, now); err != nil {
			return fmt.Errorf("skip waiting steps: %w", err)
		}
		m, _ := r.RowsAffected()
		res.Cancelled = n + m
		return nil
	})
	if err != nil {
		return store.CampaignCancelResult{}, campaignErr("cancel campaign", err)
	}
	return res, nil
}

// CampaignsExpireDrafts ends DRAFT campaigns past their time CANCELLED.
func (s *Store) CampaignsExpireDrafts(ctx context.Context, limit int) ([]store.CampaignRef, error) {
	var out []store.CampaignRef
	err := s.w.do(ctx, func(tx wtx) error {
		out = nil
		rows, err := tx.Query(qCampaignsExpireDrafts, limit, s.now())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var c store.CampaignRef
			if err := rows.Scan(&c.Tenant, &c.ID, &c.Lane); err != nil {
				return err
			}
			out = append(out, c)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("expire campaign drafts: %w", err)
	}
	return out, nil
}

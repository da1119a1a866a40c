package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

var _ store.Campaigns = (*Store)(nil)

// Campaigns (store.Campaigns). Every write locks the campaign's row first
// (FOR UPDATE), so a page, a start, a fan-out batch and a cancel of one
// campaign take turns: a cancel sees exactly the batches that committed
// before it, and no batch commits after it.
const (
	// $1 id, $2 tenant, $3 kind, $4 lane, $5 channels, $6 steps, $7 params,
	// $8 send_at, $9 idempotency key, $10 request hash, $11 now, $12 the
	// draft's time to live in ms, $13 scope.
	qCampaignInsert = `INSERT INTO campaigns (id, tenant, kind, lane, channels, steps, params, send_at, state, idempotency_key, request_hash, created_at,
                       draft_expires_at, scope)
VALUES ($1::text, $2::text, $3::text, $4::text, $5::text[], $6::integer[], $7::json, $8::timestamptz, 'DRAFT', $9::text, $10::text,
        coalesce($11::timestamptz, now()), coalesce($11::timestamptz, now()) + $12::bigint * interval '1 millisecond', $13::text)
ON CONFLICT (tenant, idempotency_key) DO NOTHING
RETURNING id`
	qCampaignByKey = `SELECT id, request_hash FROM campaigns WHERE tenant = $1::text AND idempotency_key = $2::text`
	// The statements that name one campaign find it by its id alone
	// (tenant || '' only checks the tenant): on the tenant, a plan made
	// while the table was empty took campaigns_key, the tenant's
	// idempotency keys, and filtered every campaign of the tenant by id.
	// The third column says whether the campaign is a draft past its
	// deadline by $3 (now): then a start or a page is refused, as after its
	// expiry.
	qCampaignLock = `SELECT state, fanout_seq, coalesce(state = 'DRAFT' AND draft_expires_at <= coalesce($3::timestamptz, now()), false), total
FROM campaigns WHERE id = $2::text AND tenant || '' = $1::text FOR UPDATE`

	// qCampaignRecipientsAdd adds a page ($2 recipients, $3 notification
	// ids, $4 params, NULL for the campaign's) in the page's order, counts
	// the new ones into total in the same statement and returns how many
	// were new and the total they make (checked against the cap before the
	// commit).
	qCampaignRecipientsAdd = `WITH i AS (
    INSERT INTO campaign_recipients (campaign_id, recipient, notification_id, params)
    SELECT $1::text, x.recipient, x.nid, x.params::json
    FROM unnest($2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS x (recipient, nid, params, ord)
    ORDER BY x.ord
    ON CONFLICT (campaign_id, recipient) DO NOTHING
    RETURNING 1
),
u AS (UPDATE campaigns SET total = total + (SELECT count(*) FROM i) WHERE id = $1::text RETURNING total)
SELECT (SELECT count(*) FROM i), (SELECT total FROM u)`

	// The state is checked as an expression (state || ''), as the tenant
	// is, so that no plan takes campaigns_draft, whose predicate it would
	// match, and walks every draft for the id.
	qCampaignStart = `UPDATE campaigns SET state = 'RUNNING', started_at = coalesce($3::timestamptz, now())
WHERE id = $2::text AND tenant || '' = $1::text AND state || '' = 'DRAFT'`

	qCampaignAnalyze = `ANALYZE campaign_recipients`

	// qCampaignGet reads a campaign with its send counts, kept per
	// campaign and backend by the triggers of migrations 27 and 28 (store.CampaignCounts).
	qCampaignGet = `SELECT c.id, c.tenant, c.kind, c.lane, c.scope, c.state, c.params::text, c.total, c.enqueued, c.send_at, c.created_at, c.started_at, c.ended_at,
       c.draft_expires_at, coalesce(c.ended_reason, ''), k.sent, k.suppressed, k.failed, k.unknown
FROM campaigns c, LATERAL (` + qCampaignCounts + `) k
WHERE c.id = $2::text AND c.tenant || '' = $1::text`

	// qCampaignList reads a page of a tenant's campaigns, newest first,
	// each with its counts as qCampaignGet reads them, walking
	// campaigns_tenant_created (migration 38) backwards from the cursor:
	// the row value (created_at, id) bounds the index scan, as the
	// notifications' listing's does, an 'infinity' on the first page (an
	// "$2 IS NULL OR" would make it a filter, every page walking from the
	// newest). qCampaignListState is the page of one state's, on
	// campaigns_tenant_state_created (migration 39), so that a page of the
	// few running campaigns does not walk the many ended ones. $1 tenant,
	// $2 and $3 the previous page's last created_at and id (NULL and '':
	// from the newest), $4 limit, $5 the state (qCampaignListState).
	qCampaignList = qCampaignListColumns + `WHERE c.tenant = $1::text
  AND (c.created_at, c.id) < (coalesce($2::timestamptz, 'infinity'), $3::text)` + qCampaignListOrder
	qCampaignListState = qCampaignListColumns + `WHERE c.tenant = $1::text AND c.state = $5::text
  AND (c.created_at, c.id) < (coalesce($2::timestamptz, 'infinity'), $3::text)` + qCampaignListOrder
	qCampaignListColumns = `SELECT c.id, c.tenant, c.kind, c.lane, c.scope, c.state, c.params::text, c.total, c.enqueued, c.send_at, c.created_at, c.started_at, c.ended_at,
       c.draft_expires_at, coalesce(c.ended_reason, ''), k.sent, k.suppressed, k.failed, k.unknown
FROM campaigns c, LATERAL (` + qCampaignCounts + `) k
`
	qCampaignListOrder = `
ORDER BY c.created_at DESC, c.id DESC
LIMIT $4`

	// qCampaignCounts sums the counter rows of the campaign c.
	qCampaignCounts = `SELECT coalesce(sum(sent), 0)::bigint AS sent, coalesce(sum(suppressed), 0)::bigint AS suppressed,
    coalesce(sum(failed), 0)::bigint AS failed, coalesce(sum(unknown), 0)::bigint AS unknown
FROM campaign_counts WHERE campaign_id = c.id`

	// qCampaignsRunning pages through the RUNNING campaigns on
	// campaigns_running, after ($2, $3) (NULLs: from the first).
	qCampaignsRunning = `SELECT tenant, id, lane, started_at FROM campaigns
WHERE state = 'RUNNING' AND ($2::timestamptz IS NULL OR (started_at, id) > ($2::timestamptz, $3::text))
ORDER BY started_at, id LIMIT $1`

	// qCampaignFanOutHead reads what a batch needs of its campaign and
	// locks its row; qCampaignFanOutPeek reads it without the lock: a
	// ranged batch takes the lock later (fanOutRange), so it is written
	// while the batch before it still holds the lock.
	qCampaignFanOutHead = qCampaignFanOutPeek + ` FOR UPDATE`
	qCampaignFanOutPeek = `SELECT kind, lane, channels, steps, params::text, send_at, state, fanout_seq, scope, total
FROM campaigns WHERE id = $2::text AND tenant || '' = $1::text`

	// qCampaignFanOut writes the notifications and outbox rows of the next
	// $3 recipients after the cursor $2, as intake's statement writes one
	// notification's (qNotificationCreateMany): one outbox row per channel
	// ($10 channels, $11 their fallback steps), per active device for push,
	// a chain's first step PENDING and the later ones WAITING. A
	// notification id that exists already fails the batch (the primary
	// key): the cursor says no batch wrote it, so something is wrong, and
	// an ON CONFLICT DO NOTHING that would hide it cost 10–25% of a
	// million recipients' fan-out (its speculative insertion: a probe of
	// the key and one more WAL record a row). It returns the recipients
	// taken, the last one's seq (the new cursor) and the rows written. qCampaignFanOutRange writes those of a
	// ranged batch instead: seq in ($2, $3].
	//
	// The notifications are inserted as r holds them, in seq order, as the
	// recipients' key read them: nothing needs that order, and an ORDER BY
	// there sorted each batch's 10,000 rows again, which PostgreSQL does
	// not know r to be in (10 ms of a 180 ms batch; 1,000,000 recipients
	// fanned out in 10.7–13.7 s without it against 12.6–15.9 s with it,
	// five alternated pairs).
	//
	// $1 campaign id, $4 tenant, $5 kind, $6 lane, $7 params, $8 send_at,
	// $9 now, $12 scope.
	qCampaignFanOut      = qFanOutRecipients + `ORDER BY seq LIMIT $3` + qFanOutWrite
	qCampaignFanOutRange = qFanOutRecipients + `AND seq <= $3::bigint ORDER BY seq` + qFanOutWrite
	qFanOutRecipients    = `WITH r AS MATERIALIZED (
    SELECT seq, recipient, notification_id, params FROM campaign_recipients
    WHERE campaign_id = $1::text AND seq > $2::bigint `
	qFanOutWrite = `
),
n AS (
    INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, send_at, created_at, campaign_id, scope)
    SELECT r.notification_id, $4::text, r.recipient, $1::text, $5::text, $6::text, coalesce(r.params, $7::json), $8::timestamptz,
           coalesce($9::timestamptz, now()), $1::text, $12::text
    FROM r
    RETURNING id, recipient, created_at
),
o AS (
    INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, last_reason, available_at, expires_at, created_at, updated_at,
                        fallback_step, scope, deferred)
    SELECT n.id, n.id || '.' || c.channel || coalesce('.' || dv.device_id, ''), $4::text, $6::text, c.channel || coalesce('.' || dv.device_id, ''),
           CASE WHEN c.step > 1 THEN 'WAITING' ELSE 'PENDING' END, '', greatest(n.created_at, $8::timestamptz), NULL, n.created_at, n.created_at,
           nullif(c.step, 0), $12::text, coalesce(c.step <= 1 AND $8::timestamptz > n.created_at + ` + qDeferHorizon + `, false)
    FROM n CROSS JOIN unnest($10::text[], $11::integer[]) AS c (channel, step)
    LEFT JOIN devices dv ON c.channel = 'push' AND dv.tenant = $4::text AND dv.recipient = n.recipient AND dv.active
    RETURNING 1
)
SELECT (SELECT count(*) FROM r), coalesce((SELECT max(seq) FROM r), $2::bigint), (SELECT count(*) FROM n), (SELECT count(*) FROM o)`

	// qCampaignAdvanceTo moves a ranged batch's cursor to $2, once
	// qCampaignLock found it at the batch's start, and ends the campaign
	// DONE when no recipient follows $2. $3 recipients taken, $4 now.
	qCampaignAdvanceTo = `UPDATE campaigns SET fanout_seq = $2::bigint, enqueued = enqueued + $3::bigint,
    state = CASE WHEN d.done THEN 'DONE' ELSE state END,
    ended_at = CASE WHEN d.done THEN coalesce($4::timestamptz, now()) ELSE ended_at END
FROM (SELECT NOT EXISTS (SELECT 1 FROM campaign_recipients WHERE campaign_id = $1::text AND seq > $2::bigint) AS done) d
WHERE id = $1::text
RETURNING d.done`

	// qCampaignBatches reads the cursor of a campaign (or $5 in its place,
	// when set) and the seqs that end each of the next $4 batches of $3
	// recipients after it (ends), with the last of those recipients (last:
	// the end of a shorter final batch), on the primary key's order.
	qCampaignBatches = `SELECT c.state, coalesce($5::bigint, c.fanout_seq), coalesce(b.ends, '{}'), b.last FROM campaigns c
LEFT JOIN LATERAL (
    SELECT array_agg(x.seq ORDER BY x.seq) FILTER (WHERE x.rn % $3::bigint = 0) AS ends, max(x.seq) AS last
    FROM (SELECT seq, row_number() OVER (ORDER BY seq) AS rn FROM campaign_recipients
          WHERE campaign_id = c.id AND seq > coalesce($5::bigint, c.fanout_seq) ORDER BY seq LIMIT $3::bigint * $4::bigint) x
) b ON true
WHERE c.id = $2::text AND c.tenant || '' = $1::text`

	// $1 id, $2 new cursor, $3 recipients taken, $4 done, $5 now.
	qCampaignAdvance = `UPDATE campaigns SET fanout_seq = $2::bigint, enqueued = enqueued + $3::bigint,
    state = CASE WHEN $4::boolean THEN 'DONE' ELSE state END,
    ended_at = CASE WHEN $4::boolean THEN coalesce($5::timestamptz, now()) ELSE ended_at END
WHERE id = $1::text`

	// qCampaignsExpireDrafts ends CANCELLED (DRAFT_EXPIRED) up to $1 DRAFT
	// campaigns whose deadline has come, the earliest first, on
	// campaigns_draft. One whose row a page, a start or a cancel holds is
	// skipped (SKIP LOCKED), and the lock re-reads the state of the
	// others, so a campaign started or cancelled meanwhile is not taken.
	// $1 limit, $2 now.
	qCampaignsExpireDrafts = `UPDATE campaigns c SET state = 'CANCELLED', ended_reason = 'DRAFT_EXPIRED', ended_at = coalesce($2::timestamptz, now())
FROM (SELECT id FROM campaigns WHERE state = 'DRAFT' AND draft_expires_at <= coalesce($2::timestamptz, now())
      ORDER BY draft_expires_at, id LIMIT $1 FOR UPDATE SKIP LOCKED) x
WHERE c.id = x.id
RETURNING c.tenant, c.id, c.lane`

	qCampaignCancelMark = `UPDATE campaigns SET state = 'CANCELLED', ended_at = coalesce($2::timestamptz, now()) WHERE id = $1::text
RETURNING ended_at`

	// qCampaignCancelSends ends every send of the campaign that has not
	// begun with the single cancel's guarded write (qDeliveryDecide),
	// set-based: SUPPRESSED(CANCELLED) where there is no delivery row or
	// one waiting (RETRY_WAIT, PARKED); never over SENDING or a result.
	// A fallback step still WAITING is skipped (SKIPPED,
	// FALLBACK_NOT_NEEDED, after CANCELLED), the write a cancelled earlier
	// step's end makes (qFallbackMove), so a chain whose step is in flight
	// now releases nothing later.
	//
	// It returns, all as of its one snapshot: the counts of the sends that
	// had ended (read before its own writes count theirs: the counting
	// triggers, row and statement, fire at the statement's end), the sends
	// it ended, and those in flight: every other send it found under way.
	// A send a sender claims or ends while the statement runs is one it
	// found under way (its guarded write meets the newer row and leaves
	// it): counted in flight, so the counts, the cancelled and the in
	// flight always add up to the campaign's sends.
	//
	// The decisions are inserted in the order of their rows' keys: each
	// locks its outbox row while a relay holds it (migration 36: CLAIMED,
	// PUBLISHING), as the relay's mark locks its rows, in that order, and
	// shares a PENDING one (migration 41: a held claim's rows read so).
	//
	// $1 campaign id, $2 tenant, $3 now.
	qCampaignCancelSends = `WITH m AS MATERIALIZED (
    SELECT o.message_id, o.notification_id, o.channel, o.state FROM campaign_recipients cr JOIN outbox o ON o.notification_id = cr.notification_id
    WHERE cr.campaign_id = $1::text AND cr.seq <= (SELECT fanout_seq FROM campaigns WHERE id = $1::text) AND o.state NOT IN ('EXPIRED', 'FAILED', 'SKIPPED')
),
s AS (
    INSERT INTO deliveries AS d (message_id, notification_id, tenant, channel, state, reason, created_at, updated_at, campaign_id)
    SELECT m.message_id, m.notification_id, $2::text, m.channel, 'SUPPRESSED', 'CANCELLED', coalesce($3::timestamptz, now()), coalesce($3::timestamptz, now()),
           $1::text
    FROM m WHERE m.state <> 'WAITING'
    ORDER BY m.notification_id, m.channel
    ON CONFLICT (message_id) WHERE message_id IS NOT NULL DO UPDATE
    SET state = excluded.state, reason = excluded.reason, next_attempt_at = NULL, updated_at = excluded.updated_at
    WHERE d.state IN ('RETRY_WAIT', 'PARKED')
    RETURNING 1
),
w AS (
    UPDATE outbox o SET state = 'SKIPPED', last_reason = 'FALLBACK_NOT_NEEDED', fallback_after = 'CANCELLED',
        updated_at = coalesce($3::timestamptz, clock_timestamp())
    FROM m WHERE m.state = 'WAITING' AND o.notification_id = m.notification_id AND o.channel = m.channel AND o.state = 'WAITING'
    RETURNING 1
),
x AS (SELECT (SELECT count(*) FROM s) + (SELECT count(*) FROM w) AS cancelled,
             (SELECT count(*) FROM m) - (SELECT count(*) FROM m JOIN deliveries d ON d.message_id = m.message_id
                                         WHERE campaign_outcome(NULL, d.state) IS NOT NULL) AS open)
SELECT x.cancelled, x.open - x.cancelled, k.sent, k.suppressed, k.failed, k.unknown
FROM x, (SELECT $1::text AS id) c, LATERAL (` + qCampaignCounts + `) k`
)

// CampaignCreate writes a DRAFT campaign and its first page in one
// transaction.
func (s *Store) CampaignCreate(ctx context.Context, p store.CampaignCreateParams) (store.CampaignCreateResult, error) {
	res, err := s.campaignCreate(ctx, p)
	if err != nil {
		return res, s.campaignFail("create campaign", err)
	}
	return res, nil
}

func (s *Store) campaignCreate(ctx context.Context, p store.CampaignCreateParams) (store.CampaignCreateResult, error) {
	channels, steps := campaignChannels(p.Channels, p.Fallback)
	params := p.Params
	if len(params) == 0 {
		params = json.RawMessage("{}")
	}
	res := store.CampaignCreateResult{Outcome: store.Created, ID: p.ID}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var id string
		err := tx.QueryRow(ctx, qCampaignInsert, p.ID, p.Tenant, p.Kind, string(p.Lane), channels, steps, string(params), p.SendAt,
			p.IdempotencyKey, p.RequestHash, s.now(), p.DraftTTLOrDefault().Milliseconds(), p.Scope).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			var hash string
			if err := tx.QueryRow(ctx, qCampaignByKey, p.Tenant, p.IdempotencyKey).Scan(&id, &hash); err != nil {
				return fmt.Errorf("read campaign by key: %w", err)
			}
			res = store.CampaignCreateResult{Outcome: store.Conflict}
			if hash == p.RequestHash {
				res = store.CampaignCreateResult{Outcome: store.Replayed, ID: id}
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("insert campaign: %w", err)
		}
		_, err = addRecipients(ctx, tx, p.ID, p.Recipients, p.MaxRecipients)
		return err
	})
	if err != nil {
		return store.CampaignCreateResult{}, err
	}
	return res, nil
}

// campaignChannels returns the channels and their fallback steps as the
// campaign row keeps them.
func campaignChannels(chs []heraldtype.Channel, chain bool) ([]string, []int32) {
	names, steps := make([]string, len(chs)), make([]int32, len(chs))
	for i, n := range store.FallbackSteps(chs, chain) {
		names[i], steps[i] = string(chs[i]), int32(n)
	}
	return names, steps
}

// addRecipients adds a page and counts the new ones into the campaign's
// total; store.ErrCampaignFull when that total passes max (0: no cap), and
// the caller's transaction, rolled back, writes nothing. The caller holds
// the campaign row's lock (a create's row is its own until the commit), so
// the total read here is not moved by another page before the commit.
func addRecipients(ctx context.Context, tx pgx.Tx, id string, rs []store.CampaignRecipient, max int64) (int, error) {
	if len(rs) == 0 {
		return 0, nil
	}
	recipients, nids, params := make([]string, len(rs)), make([]string, len(rs)), make([]*string, len(rs))
	for i, r := range rs {
		recipients[i], nids[i] = r.Recipient, r.NotificationID
		if r.Params != nil {
			p := string(r.Params)
			params[i] = &p
		}
	}
	var n int
	var total int64
	if err := tx.QueryRow(ctx, qCampaignRecipientsAdd, id, recipients, nids, params).Scan(&n, &total); err != nil {
		return 0, fmt.Errorf("add recipients: %w", err)
	}
	if max > 0 && total > max {
		return 0, store.ErrCampaignFull
	}
	return n, nil
}

// lockedCampaign is what lockCampaign read of the row it locked.
type lockedCampaign struct {
	state  string
	cursor int64 // the fan-out's
	// due: a DRAFT past its deadline, not started nor added to from then
	// on, though the runner may not have ended it yet.
	due   bool
	total int64
}

// lockCampaign locks the campaign's row for tx and returns what it holds
// as of now (nil: the database's clock), or store.ErrNotFound.
func lockCampaign(ctx context.Context, tx pgx.Tx, tenant, id string, now any) (lockedCampaign, error) {
	var c lockedCampaign
	err := tx.QueryRow(ctx, qCampaignLock, tenant, id, now).Scan(&c.state, &c.cursor, &c.due, &c.total)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, store.ErrNotFound
	}
	if err != nil {
		return c, fmt.Errorf("lock campaign: %w", err)
	}
	return c, nil
}

// CampaignAddRecipients adds a page to a DRAFT campaign.
func (s *Store) CampaignAddRecipients(ctx context.Context, p store.CampaignAddParams) (int, error) {
	var n int
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		c, err := lockCampaign(ctx, tx, p.Tenant, p.ID, s.now())
		if err != nil {
			return err
		}
		if c.state != store.CampaignDraft || c.due {
			return store.ErrCampaignState
		}
		n, err = addRecipients(ctx, tx, p.ID, p.Recipients, p.MaxRecipients)
		return err
	})
	if err != nil {
		return 0, s.campaignFail("add campaign recipients", err)
	}
	return n, nil
}

// campaignFail wraps err, leaving the sentinel errors as they are.
func (s *Store) campaignFail(what string, err error) error {
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrCampaignState) || errors.Is(err, store.ErrCampaignFull) ||
		errors.Is(err, store.ErrCampaignBehind) {
		return err
	}
	return s.fail(what, err)
}

func (s *Store) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// CampaignStart moves a DRAFT campaign to RUNNING.
func (s *Store) CampaignStart(ctx context.Context, tenant, id string) (store.Campaign, error) {
	started := false
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		c, err := lockCampaign(ctx, tx, tenant, id, s.now())
		switch {
		case err != nil:
			return err
		case c.state == store.CampaignCancelled || c.due:
			return store.ErrCampaignState
		case c.state != store.CampaignDraft:
			return nil
		}
		if _, err := tx.Exec(ctx, qCampaignStart, tenant, id, s.now()); err != nil {
			return fmt.Errorf("start campaign: %w", err)
		}
		started = true
		return nil
	})
	if err != nil {
		return store.Campaign{}, s.campaignFail("start campaign", err)
	}
	// The pages were just written, likely after autovacuum's last look:
	// without fresh statistics the planner takes a campaign's recipients
	// for a handful and reads all of them for each batch (a bitmap scan and
	// a sort) instead of walking the primary key to the batch's end. A
	// start sent again (the campaign RUNNING or DONE) added no pages.
	if started {
		if _, err := s.pool.Exec(ctx, qCampaignAnalyze); err != nil {
			return store.Campaign{}, s.fail("analyze campaign recipients", err)
		}
	}
	return s.CampaignGet(ctx, tenant, id)
}

// querier is what a campaign read runs on: the pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// CampaignGet returns a campaign with its counts.
func (s *Store) CampaignGet(ctx context.Context, tenant, id string) (store.Campaign, error) {
	c, err := readCampaign(ctx, s.pool, tenant, id)
	if err != nil {
		return c, s.campaignFail("read campaign", err)
	}
	return c, nil
}

func readCampaign(ctx context.Context, q querier, tenant, id string) (store.Campaign, error) {
	c, err := scanCampaign(q.QueryRow(ctx, qCampaignGet, tenant, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return c, store.ErrNotFound
	}
	if err != nil {
		return c, fmt.Errorf("read campaign: %w", err)
	}
	return c, nil
}

// scanCampaign reads a row of qCampaignGet's (or qCampaignList's) columns.
func scanCampaign(row pgx.Row) (store.Campaign, error) {
	var c store.Campaign
	var lane, params string
	k := &c.Counts
	if err := row.Scan(&c.ID, &c.Tenant, &c.Kind, &lane, &c.Scope, &c.State, &params, &c.Total, &c.Enqueued,
		&c.SendAt, &c.CreatedAt, &c.StartedAt, &c.EndedAt, &c.DraftExpiresAt, &c.Reason, &k.Sent, &k.Suppressed, &k.Failed, &k.Unknown); err != nil {
		return c, err
	}
	c.Lane, c.Params = heraldtype.Lane(lane), json.RawMessage(params)
	c.SendAt, c.StartedAt, c.EndedAt, c.DraftExpiresAt = utcPtr(c.SendAt), utcPtr(c.StartedAt), utcPtr(c.EndedAt), utcPtr(c.DraftExpiresAt)
	c.CreatedAt = utc(c.CreatedAt)
	return c, nil
}

// CampaignList reads a page of a tenant's campaigns (qCampaignList).
func (s *Store) CampaignList(ctx context.Context, p store.CampaignListParams) ([]store.Campaign, error) {
	var at *time.Time
	var id string
	if p.Before != nil {
		at, id = &p.Before.CreatedAt, p.Before.ID
	}
	q, args := qCampaignList, []any{p.Tenant, at, id, p.Limit}
	if p.State != "" {
		q, args = qCampaignListState, append(args, p.State)
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, s.campaignFail("list campaigns", err)
	}
	defer rows.Close()
	var out []store.Campaign
	for rows.Next() {
		c, err := scanCampaign(rows)
		if err != nil {
			return nil, s.campaignFail("list campaigns", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, s.campaignFail("list campaigns", err)
	}
	return out, nil
}

// CampaignsRunning lists RUNNING campaigns.
func (s *Store) CampaignsRunning(ctx context.Context, after *store.CampaignRef, limit int) ([]store.CampaignRef, error) {
	var at *time.Time
	var id string
	if after != nil {
		at, id = &after.Started, after.ID
	}
	rows, err := s.pool.Query(ctx, qCampaignsRunning, limit, at, id)
	if err != nil {
		return nil, s.fail("list running campaigns", err)
	}
	refs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.CampaignRef, error) {
		var c store.CampaignRef
		err := r.Scan(&c.Tenant, &c.ID, &c.Lane, &c.Started)
		c.Started = c.Started.UTC()
		return c, err
	})
	if err != nil {
		return nil, s.fail("list running campaigns", err)
	}
	return refs, nil
}

// fanOutLockTimeout bounds every lock wait of a fan-out batch's
// transaction (SET LOCAL lock_timeout): a batch that waits longer for a
// lock fails with nothing written (store.ErrCampaignBusy), releases the
// campaign row's lock if it held it, and the next round starts again at
// the cursor.
//
// It is there for waits that end only through something PostgreSQL cannot
// see, so its deadlock check never fires: two runners on one campaign (a
// leader that lost its lock without knowing) whose batches were cut at
// other bounds, where one runner's batch holds the campaign row's lock
// and waits for the other's uncommitted notification rows, whose batch
// waits in Go (Turn) for its own batch before it, which waits for the
// campaign row's lock. Without a timeout that holds the campaign's lock
// until a restart: nothing fans out and a cancel hangs.
//
// It cannot make one runner livelock under load. lock_timeout counts only
// the wait for a lock, never a slow statement or commit (I/O, a
// checkpoint's stall). A single runner's batches never wait for each
// other's locks: they take the campaign row's lock in seq order, each
// only once the batch before it has ended (Turn), and write distinct rows.
// What is left to wait for is a cancel (the campaign then ends anyway), a
// page refused because the campaign runs (it holds the lock for a moment),
// DDL, or a second writer. And a batch that times out costs only itself:
// the first batch of the next round stands at the cursor and waits for no
// turn, so every round moves the campaign on. 5 s is 25 times a batch of
// 10,000 (0.2 s) and well past a commit held up by a checkpoint (about
// 1 s on the development machine), and a stuck pair of runners unwinds
// within a round or two.
const fanOutLockTimeout = 5 * time.Second

// CampaignFanOut writes one batch and moves the cursor in one
// transaction: the next p.Limit recipients after the cursor
// (qCampaignFanOut), the campaign row locked from the start, or a ranged
// batch (fanOutRange). A lock wait past fanOutLockTimeout fails it with
// store.ErrCampaignBusy, as does a Turn that returns it.
func (s *Store) CampaignFanOut(ctx context.Context, p store.CampaignFanOutParams) (store.CampaignFanOutResult, error) {
	var res store.CampaignFanOutResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		res = store.CampaignFanOutResult{}
		if _, err := tx.Exec(ctx, qLockTimeout, fmt.Sprint(fanOutLockTimeout.Milliseconds())); err != nil {
			return fmt.Errorf("set lock timeout: %w", err)
		}
		q := qCampaignFanOutHead
		if p.Range != nil {
			q = qCampaignFanOutPeek
		}
		var h fanOutHead
		err := tx.QueryRow(ctx, q, p.Tenant, p.ID).Scan(&h.kind, &h.lane, &h.channels, &h.steps, &h.params, &h.sendAt, &h.state, &h.cursor, &h.scope, &h.total)
		if errors.Is(err, pgx.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("read campaign: %w", err)
		}
		res.Lane = heraldtype.Lane(h.lane)
		if h.state != store.CampaignRunning {
			res.Done = true
			return nil
		}
		now := s.now()
		if p.Range != nil {
			err = fanOutRange(ctx, tx, p, h, now, &res)
		} else {
			var last int64
			if last, err = h.write(ctx, tx, qCampaignFanOut, p, h.cursor, p.Limit, now, &res); err != nil {
				return err
			}
			res.Done = res.Recipients < p.Limit
			if _, err = tx.Exec(ctx, qCampaignAdvance, p.ID, last, res.Recipients, res.Done, now); err != nil {
				err = fmt.Errorf("advance cursor: %w", err)
			}
		}
		if err == nil && p.BeforeCommit != nil {
			err = p.BeforeCommit()
		}
		return err
	})
	if errors.Is(err, errCampaignStopped) {
		// Cancelled (or ended) while the batch was written: it wrote nothing.
		return store.CampaignFanOutResult{Lane: res.Lane, Done: true}, nil
	}
	if code := sqlState(err); errors.Is(err, errCampaignErased) || code == pgLockNotAvailable || code == pgDeadlockDetected {
		// Waited past fanOutLockTimeout, or was the one PostgreSQL chose to
		// end a deadlock it saw: a retry from the cursor, not a failure.
		err = fmt.Errorf("%w: %w", store.ErrCampaignBusy, err)
	}
	if err != nil {
		return store.CampaignFanOutResult{}, s.campaignFail("fan out campaign", err)
	}
	if res.Outbox > 0 {
		s.wakeups.Notify(res.Lane)
		s.notify.committed(res.Lane)
	}
	return res, nil
}

// fanOutHead is what a batch reads of its campaign (qCampaignFanOutPeek).
type fanOutHead struct {
	kind, lane, state, params string
	scope                     string
	channels                  []string
	steps                     []int32
	sendAt                    *time.Time
	cursor                    int64
	// total is the campaign's recipients as the batch began: an erasure
	// takes a recipient not yet fanned out off it (qEraseCampaignRecipients).
	total int64
}

// write runs q, qCampaignFanOut (bound: the limit) or qCampaignFanOutRange
// (bound: the range's end), for the recipients after after, counts what it
// wrote into res and returns the last recipient's seq.
func (h fanOutHead) write(ctx context.Context, tx pgx.Tx, q string, p store.CampaignFanOutParams, after int64, bound any, now any,
	res *store.CampaignFanOutResult) (int64, error) {
	var last int64
	err := tx.QueryRow(ctx, q, p.ID, after, bound, p.Tenant, h.kind, h.lane, h.params, h.sendAt, now, h.channels, h.steps, h.scope).
		Scan(&res.Recipients, &last, &res.Notifications, &res.Outbox)
	if err != nil {
		return 0, fmt.Errorf("write batch: %w", err)
	}
	return last, nil
}

// fanOutRange writes a ranged batch (qCampaignFanOutRange) and moves the
// cursor from its start to its end (qCampaignAdvanceTo).
//
// The campaign row's lock orders the batches. The batch the cursor stands
// at takes it before its writes and holds it to its commit; a batch after
// it takes it once its own rows are written, so it waits there for the one
// before it to end and then reads the cursor that one left. (An UPDATE …
// WHERE fanout_seq = start would not wait: the version it sees before the
// wait does not match, so it skips the row.) Were a later batch to take
// the lock before the one before it (which had not yet begun: only two
// side by side, as the runner writes them, make that rare), it finds the
// cursor short of its start and writes nothing.
func fanOutRange(ctx context.Context, tx pgx.Tx, p store.CampaignFanOutParams, h fanOutHead, now any, res *store.CampaignFanOutResult) error {
	if h.cursor > p.Range.After {
		return store.ErrCampaignBehind // written already
	}
	lock := func() error {
		c, err := lockCampaign(ctx, tx, p.Tenant, p.ID, now)
		switch {
		case err != nil:
			return err
		case c.state != store.CampaignRunning:
			return errCampaignStopped
		case c.cursor != p.Range.After:
			return store.ErrCampaignBehind
		case c.total != h.total:
			// A recipient was erased since the batch's rows were read
			// (qEraseCampaignRecipients): written again from a fresh
			// read, without it.
			return errCampaignErased
		}
		return nil
	}
	first := h.cursor == p.Range.After
	if first {
		if err := lock(); err != nil {
			return err
		}
	}
	if _, err := h.write(ctx, tx, qCampaignFanOutRange, p, p.Range.After, p.Range.Upto, now, res); err != nil {
		return err
	}
	if !first {
		if p.Turn != nil {
			if err := p.Turn(ctx); err != nil {
				return fmt.Errorf("wait for the batch before: %w", err)
			}
		}
		if err := lock(); err != nil {
			return err
		}
	}
	if err := tx.QueryRow(ctx, qCampaignAdvanceTo, p.ID, p.Range.Upto, res.Recipients, now).Scan(&res.Done); err != nil {
		return fmt.Errorf("advance cursor: %w", err)
	}
	return nil
}

// errCampaignErased rolls back a ranged batch whose campaign lost a
// recipient to an erasure after the batch read its recipients: a retry
// (store.ErrCampaignBusy) writes it again without them.
var errCampaignErased = errors.New("a recipient of the batch was erased meanwhile")

// errCampaignStopped rolls back a ranged batch whose campaign is no longer
// RUNNING once the batch before it has ended.
var errCampaignStopped = errors.New("the campaign is no longer running")

// CampaignBatches reads the bounds of the next count batches
// (qCampaignBatches).
func (s *Store) CampaignBatches(ctx context.Context, tenant, id string, after *int64, size, count int) ([]store.CampaignRange, error) {
	var state string
	var cursor int64
	var ends []int64
	var last *int64
	err := s.pool.QueryRow(ctx, qCampaignBatches, tenant, id, size, count, after).Scan(&state, &cursor, &ends, &last)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, s.fail("read campaign batches", err)
	}
	if state != store.CampaignRunning {
		return nil, nil
	}
	return store.CampaignRanges(cursor, ends, last), nil
}

// CampaignCancel ends a campaign CANCELLED and its sends that have not
// begun, reporting what had gone before.
//
// A cancel that PostgreSQL ends to break a deadlock is run again, up to
// cancelAttempts in all: its decisions lock their rows in the order of the
// rows' keys, a pipeline batch of several decisions in the batch's order,
// and the two can wait for each other in a cycle
// (TestACancelThatADeadlockEndsIsRunAgain). The cancel wrote nothing, and
// run again it reads the sends as the other transaction left them.
func (s *Store) CampaignCancel(ctx context.Context, tenant, id string) (store.CampaignCancelResult, error) {
	var (
		res store.CampaignCancelResult
		err error
	)
	for attempt := 1; ; attempt++ {
		res, err = s.campaignCancel(ctx, tenant, id)
		if err == nil || attempt == cancelAttempts || sqlState(err) != pgDeadlockDetected || ctx.Err() != nil {
			break
		}
		s.logger.LogAttrs(ctx, slog.LevelWarn, "campaign: cancel ended by a deadlock, running it again",
			slog.String("tenant", tenant), slog.String("campaign", id), slog.Int("attempt", attempt))
	}
	if err != nil {
		return store.CampaignCancelResult{}, s.campaignFail("cancel campaign", err)
	}
	return res, nil
}

// cancelAttempts is how many times CampaignCancel runs a cancel that
// deadlocks.
const cancelAttempts = 3

func (s *Store) campaignCancel(ctx context.Context, tenant, id string) (store.CampaignCancelResult, error) {
	var res store.CampaignCancelResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		res = store.CampaignCancelResult{}
		c, err := lockCampaign(ctx, tx, tenant, id, s.now())
		if err != nil {
			return err
		}
		if res.Campaign, err = readCampaign(ctx, tx, tenant, id); err != nil {
			return err
		}
		if c.state == store.CampaignCancelled {
			res.Already = true
			return nil
		}
		now := s.now()
		var ended time.Time
		if err := tx.QueryRow(ctx, qCampaignCancelMark, id, now).Scan(&ended); err != nil {
			return fmt.Errorf("mark campaign cancelled: %w", err)
		}
		ended = ended.UTC()
		res.Campaign.State, res.Campaign.EndedAt = store.CampaignCancelled, &ended
		k := &res.Campaign.Counts
		if err := tx.QueryRow(ctx, qCampaignCancelSends, id, tenant, now).Scan(&res.Cancelled, &res.InFlight,
			&k.Sent, &k.Suppressed, &k.Failed, &k.Unknown); err != nil {
			return fmt.Errorf("cancel campaign sends: %w", err)
		}
		return nil
	})
	return res, err
}

// CampaignsExpireDrafts ends DRAFT campaigns past their time CANCELLED.
func (s *Store) CampaignsExpireDrafts(ctx context.Context, limit int) ([]store.CampaignRef, error) {
	rows, err := s.pool.Query(ctx, qCampaignsExpireDrafts, limit, s.now())
	if err != nil {
		return nil, s.fail("expire campaign drafts", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.CampaignRef, error) {
		var c store.CampaignRef
		var lane string
		err := r.Scan(&c.Tenant, &c.ID, &lane)
		c.Lane = heraldtype.Lane(lane)
		return c, err
	})
	if err != nil {
		return nil, s.fail("expire campaign drafts", err)
	}
	return out, nil
}

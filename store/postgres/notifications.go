package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// createAttempts bounds how often NotificationCreate starts over when the
// key that blocked it is gone by the time it reads it (swept, or replaced
// after expiring, in between).
const createAttempts = 3

// createRow is what qNotificationCreate reports.
type createRow struct {
	keyTaken  bool
	createdID *string
	due       bool // an outbox row is due now
	notified  bool // the statement sent the lane's NOTIFY
	// languageOK is false when the profile language changed after the
	// inbox text was chosen: nothing was written; choose again.
	languageOK bool
	// The row written claimed (store.NotificationCreateParams.Claim):
	// its id and token (nil: none), and the recipient's profile read
	// with it (nil data: none).
	handID, handToken *int64
	profile           []byte
	profileAt         *time.Time
}

// NotificationCreate writes the idempotency key, the notification and its
// outbox rows in one transaction, or reports why it wrote nothing.
//
// A new request is one autocommitted statement (qNotificationCreate), which
// the pipeline may merge with the other creates of its batch; a replay or a
// dedup hit reads what blocked it with one more statement. A request with
// both an idempotency key and a dedup key runs the statement in an explicit
// transaction, so that a dedup hit can roll the key back: Deduplicated
// writes nothing.
func (s *Store) NotificationCreate(ctx context.Context, p store.NotificationCreateParams) (store.NotificationCreateResult, error) {
	res, err := s.notificationCreate(ctx, p)
	if err != nil {
		return store.NotificationCreateResult{}, s.fail("create notification", err)
	}
	if res.Outcome == store.Created && res.Claimed == nil {
		s.wakeups.Notify(p.Lane)
	}
	return res, nil
}

func (s *Store) notificationCreate(ctx context.Context, p store.NotificationCreateParams) (store.NotificationCreateResult, error) {
	c := newChainArgs(p) // a lazy chain's later steps get no rows (fallback.go)
	response := p.Response
	if response == nil {
		response = []byte{}
	}
	params := p.Params
	if len(params) == 0 {
		params = json.RawMessage("{}")
	}
	for range createAttempts {
		// The inbox text: the only one, or the one for the profile
		// language read now; the statement writes it only if that is still
		// the language (else it writes nothing, and this chooses again).
		var inbox inboxArgs
		var lang *string
		if p.InboxWanted() {
			l, err := "", error(nil)
			if inbox, l, err = inboxForLanguage(ctx, s.pool, p); err != nil {
				return store.NotificationCreateResult{}, err
			}
			if p.InboxNeedsLanguage() {
				lang = &l
				if s.languageRead != nil {
					s.languageRead()
				}
			}
		}
		a := &createArgs{now: s.now(), tenant: p.Tenant, key: p.IdempotencyKey, hash: p.RequestHash, ttl: p.IdempotencyTTL,
			response: response, id: p.ID, recipient: p.Recipient, event: p.EventID, kind: p.Kind, lane: string(p.Lane),
			params: string(params), dedup: nullString(p.DedupKey), sendAt: p.SendAt, expiresAt: p.ExpiresAt,
			channels: c.channels, messageIDs: c.messageIDs, steps: c.steps, plan: c.plan, inbox: inbox, lang: lang,
			inboxAt: int16(p.InboxAt()), scope: p.Scope}
		if p.Claim != nil && p.Handable() {
			// Written claimed: nothing due to NOTIFY, and the lane's turn
			// to NOTIFY is left to the next create that writes a due row.
			state := string(p.Claim.State())
			a.owner, a.lease, a.state = &p.Claim.Owner, p.Claim.Lease, &state
		} else {
			a.wake = s.notify.inStatement(p.Lane)
		}
		var row createRow
		var err error
		if p.IdempotencyKey != "" && p.DedupKey != "" {
			row, err = s.createInTx(ctx, a.list())
		} else {
			row, err = scanCreate(s.pipe.QueryRowMerged(ctx, createMerge, a, qNotificationCreate, a.list()...))
		}
		if err != nil {
			return store.NotificationCreateResult{}, err
		}
		if !row.languageOK {
			continue // the profile language changed: choose again
		}
		res, done, err := s.createOutcome(ctx, p, row)
		if res.Outcome == store.Created && row.handID != nil {
			res.Claimed = handed(p, row)
		}
		if res.Outcome == store.Created && row.due && !row.notified {
			s.notify.committed(p.Lane)
		}
		if res.Outcome == store.Created && p.InboxWanted() {
			s.inboxChanged(store.InboxKey{Tenant: p.Tenant, Recipient: p.Recipient})
		}
		if err != nil || done {
			return res, err
		}
	}
	return store.NotificationCreateResult{}, fmt.Errorf("the idempotency key or the recipient's language changed under each of %d attempts", createAttempts)
}

// handed is the row a create wrote claimed, with the profile the
// statement read.
func handed(p store.NotificationCreateParams, row createRow) *store.Claimed {
	known := &heraldtype.Known{ProfileRead: true, Profile: row.profile}
	if row.profileAt != nil {
		known.ProfileUpdatedAt = *row.profileAt
	}
	return p.Handed(*row.handID, *row.handToken, utcPtr(truncMicro(p.ExpiresAt)), known)
}

// truncMicro is t as PostgreSQL keeps it, to the microsecond.
func truncMicro(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.Truncate(time.Microsecond)
	return &u
}

func scanCreate(r pgx.Row) (createRow, error) {
	var c createRow
	var notified int64
	err := r.Scan(&c.keyTaken, &c.createdID, &c.due, &notified, &c.languageOK, &c.handID, &c.handToken, &c.profile, &c.profileAt)
	if err != nil {
		return c, fmt.Errorf("write notification: %w", err)
	}
	c.notified = notified > 0
	return c, nil
}

// createArgs are one create's arguments: qNotificationCreate's, in order
// (list), and one row of qNotificationCreateMany's arrays.
type createArgs struct {
	now                                            any // nil: the server's clock
	tenant, key, hash                              string
	ttl                                            time.Duration
	response                                       []byte
	id, recipient, event, kind, lane, params, wake string
	scope                                          string
	dedup                                          *string
	sendAt, expiresAt                              *time.Time
	channels, messageIDs                           []string
	steps                                          []int32 // fallback steps (chainArgs)
	plan                                           string  // a lazy chain's later channels, comma-joined ('' for none)
	inbox                                          inboxArgs
	inboxAt                                        int16 // the inbox's place among the channels (store.InboxAt)
	lang                                           *string
	owner                                          *string // the claim's owner (store.CreateClaim); nil: none
	lease                                          time.Duration
	state                                          *string // the claim's state (CreateClaim.State)
}

func (a *createArgs) list() []any {
	return []any{a.now, a.tenant, a.key, a.hash, a.ttl, a.response, a.id, a.recipient, a.event, a.kind, a.lane,
		a.params, a.dedup, a.sendAt, a.expiresAt, a.channels, a.messageIDs, a.wake,
		a.inbox.title, a.inbox.body, a.inbox.locale, a.inbox.messageID, a.lang, a.steps, a.plan, a.inboxAt, a.scope,
		a.owner, a.lease, a.state}
}

// inboxArgs are a create's inbox item: all nil when it writes none.
type inboxArgs struct {
	title, body, locale, messageID *string
}

func newInboxArgs(p store.NotificationCreateParams, t store.InboxText) inboxArgs {
	mid := store.MessageID(p.ID, heraldtype.ChannelInbox)
	return inboxArgs{title: &t.Title, body: &t.Body, locale: &t.Locale, messageID: &mid}
}

// createMerge runs the creates waiting in one pipeline batch as one
// qNotificationCreateMany. Each op's input is its *createArgs; each op gets
// the row qNotificationCreate would have returned.
var createMerge = &merge{
	sql: qNotificationCreateMany,
	args: func(ops []*pipeOp) []any {
		n := len(ops)
		tenant, key, hash, id := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		recipient, event, kind, lane := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		params, wake, dedup := make([]string, n), make([]string, n), make([]*string, n)
		ititle, ibody, ilocale, imessage, lang := make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n)
		iat, scope := make([]int16, n), make([]string, n)
		owner, lease, state := make([]*string, n), make([]time.Duration, n), make([]*string, n)
		ttl, response := make([]time.Duration, n), make([][]byte, n)
		sendAt, expiresAt := make([]*time.Time, n), make([]*time.Time, n)
		var chReq, chStep []int32
		var chName, chMsg, chPlan []string
		for i, op := range ops {
			a := op.in.(*createArgs)
			tenant[i], key[i], hash[i], ttl[i], response[i] = a.tenant, a.key, a.hash, a.ttl, a.response
			id[i], recipient[i], event[i], kind[i], lane[i] = a.id, a.recipient, a.event, a.kind, a.lane
			params[i], dedup[i], sendAt[i], expiresAt[i], wake[i] = a.params, a.dedup, a.sendAt, a.expiresAt, a.wake
			ititle[i], ibody[i], ilocale[i], imessage[i], lang[i] = a.inbox.title, a.inbox.body, a.inbox.locale, a.inbox.messageID, a.lang
			iat[i], scope[i], owner[i], lease[i], state[i] = a.inboxAt, a.scope, a.owner, a.lease, a.state
			for j, ch := range a.channels {
				chReq, chName, chMsg = append(chReq, int32(i+1)), append(chName, ch), append(chMsg, a.messageIDs[j])
				chStep, chPlan = append(chStep, a.steps[j]), append(chPlan, a.plan)
			}
		}
		return []any{ops[0].in.(*createArgs).now, tenant, key, hash, ttl, response, id, recipient, event, kind, lane,
			params, dedup, sendAt, expiresAt, wake, chReq, chName, chMsg, ititle, ibody, ilocale, imessage, lang, chStep, chPlan, iat, scope,
			owner, lease, state}
	},
	scan: scanInOrder("create", func(op *pipeOp) string { return op.in.(*createArgs).id }),
}

// createInTx runs qNotificationCreate in a transaction it commits only if
// the notification was written.
func (s *Store) createInTx(ctx context.Context, args []any) (createRow, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return createRow{}, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	row, err := scanCreate(tx.QueryRow(ctx, qNotificationCreate, args...))
	if err != nil {
		return row, err
	}
	if row.createdID == nil {
		// A live key (Replayed/Conflict) or a dedup hit after taking the key
		// (Deduplicated): either way nothing may stay written.
		if err := tx.Rollback(ctx); err != nil {
			return row, fmt.Errorf("roll back: %w", err)
		}
		return row, nil
	}
	if err := tx.Commit(ctx); err != nil {
		return row, fmt.Errorf("commit: %w", err)
	}
	return row, nil
}

// createOutcome turns the statement's report into a result. done is false
// when the row that blocked the write vanished before it could be read, and
// the caller should start over.
func (s *Store) createOutcome(ctx context.Context, p store.NotificationCreateParams, row createRow) (res store.NotificationCreateResult, done bool, err error) {
	if p.IdempotencyKey != "" && !row.keyTaken {
		found, hash, resp, live, err := s.readKey(ctx, p)
		if err != nil || !found || !live {
			// Gone or expired by now (swept, or replaced after expiring):
			// start over.
			return res, false, err
		}
		if hash != p.RequestHash {
			return store.NotificationCreateResult{Outcome: store.Conflict}, true, nil
		}
		return store.NotificationCreateResult{Outcome: store.Replayed, Response: resp}, true, nil
	}
	if row.createdID != nil {
		return store.NotificationCreateResult{Outcome: store.Created, ID: p.ID, Response: p.Response}, true, nil
	}
	if p.DedupKey == "" {
		return res, true, errors.New("write notification: no row written and no reason why")
	}
	var id string
	err = s.pool.QueryRow(ctx, qNotificationByDedup, p.Tenant, p.DedupKey).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return res, false, nil
	}
	if err != nil {
		return res, true, fmt.Errorf("read deduplicated notification: %w", err)
	}
	return store.NotificationCreateResult{Outcome: store.Deduplicated, ID: id}, true, nil
}

func (s *Store) readKey(ctx context.Context, p store.NotificationCreateParams) (found bool, hash string, resp []byte, live bool, err error) {
	err = s.pool.QueryRow(ctx, qIdemGet, p.Tenant, p.IdempotencyKey, s.now()).Scan(&hash, &resp, &live)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, "", nil, false, nil
	}
	if err != nil {
		return false, "", nil, false, fmt.Errorf("read idempotency key: %w", err)
	}
	return true, hash, resp, live, nil
}

// NotificationGet reads a tenant's notification with its planned sends, in
// one statement.
func (s *Store) NotificationGet(ctx context.Context, tenant, id string) (store.NotificationView, error) {
	v, err := viewWith(ctx, s.pool, s.now(), tenant, id)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return store.NotificationView{}, s.fail("read notification", err)
	}
	return v, err
}

// RowsQuerier runs a statement that returns rows: a pgx.Tx, a
// *pgxpool.Pool or a *pgx.Conn.
type RowsQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// ViewTx reads tenant's notification id with q, as NotificationGet does:
// the library's read (herald.Client.Get), on the caller's pool,
// connection or transaction, which sees its own uncommitted enqueues.
func ViewTx(ctx context.Context, q RowsQuerier, tenant, id string) (store.NotificationView, error) {
	return viewWith(ctx, q, nil, tenant, id)
}

// viewWith reads the notification's view with q; now nil is the
// database's clock. store.ErrNotFound when there is none.
func viewWith(ctx context.Context, q RowsQuerier, now any, tenant, id string) (store.NotificationView, error) {
	rows, err := q.Query(ctx, qNotificationGet, id, tenant, now)
	if err != nil {
		return store.NotificationView{}, err
	}
	defer rows.Close()
	var v store.NotificationView
	var inboxAt int
	found := false
	for rows.Next() {
		dv, ok, err := scanViewRow(rows, &v, &inboxAt)
		if err != nil {
			return store.NotificationView{}, fmt.Errorf("scan: %w", err)
		}
		found = true
		if ok {
			v.Deliveries = append(v.Deliveries, dv)
		}
	}
	if err := rows.Err(); err != nil {
		return store.NotificationView{}, err
	}
	if !found {
		return store.NotificationView{}, store.ErrNotFound
	}
	v.Deliveries = store.WithInboxSend(v, inboxAt)
	v.Deliveries = store.WithPlannedSteps(v.ID, v.Deliveries) // a lazy chain's later steps (fallback.go)
	return v, nil
}

// NotificationCancelMark marks a tenant's notification cancelled, for its
// sends' claims (qNotificationCancelMark; qDeliveryClaim and the other
// claim statements, qDeliveryClaimRetry).
func (s *Store) NotificationCancelMark(ctx context.Context, tenant, id string) error {
	var found bool
	if err := s.pool.QueryRow(ctx, qNotificationCancelMark, id, tenant, s.now()).Scan(&found); err != nil {
		return s.fail("mark notification cancelled", err)
	}
	if !found {
		return store.ErrNotFound
	}
	return nil
}

// IdempotencyKeysSweep deletes expired keys.
func (s *Store) IdempotencyKeysSweep(ctx context.Context) (int, error) {
	tag, err := s.pool.Exec(ctx, qIdemSweep, s.now())
	if err != nil {
		return 0, s.fail("sweep idempotency keys", err)
	}
	return int(tag.RowsAffected()), nil
}

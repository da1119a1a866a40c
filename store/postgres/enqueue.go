package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// Querier runs one statement and returns its row: a pgx.Tx, a *pgx.Conn or
// a *pgxpool.Pool. The root package herald adapts a database/sql *sql.Tx to it.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// CreateTx writes a notification and its PENDING outbox rows with q, which
// is normally the caller's own transaction: they commit or roll back with
// the caller's work. It is the library twin of Store.NotificationCreate for
// requests without an idempotency key (p.IdempotencyKey must be empty);
// p.DedupKey makes the business event unique per tenant, so creating it
// again (in this transaction or after another committed it) writes nothing
// and reports Deduplicated with the existing notification's id.
//
// If a row is due now, the statement also NOTIFYs the lane's wake-up
// channel of this database and schema. PostgreSQL delivers a NOTIFY only
// when its transaction commits, so herald's claimers (in every process) are
// woken for a committed row and never for a rolled-back one. (PostgreSQL
// serialises the commits of transactions that sent a NOTIFY: at thousands
// of enqueueing commits a second they queue on one lock, which is why
// herald.Client sends at most one wake-up per lane per moment and calls
// CreateTxNoWake in between.)
//
// Times come from the database server's clock (statement_timestamp()). The
// herald schema must be the first schema of q's search_path, as it is for
// the herald store itself.
//
// A concurrent transaction that holds the same dedup key makes the insert
// wait for it: if it commits, the result is Deduplicated; if it rolls back,
// this one creates the notification. Under REPEATABLE READ or SERIALIZABLE
// a dedup key committed after this transaction's snapshot is a
// serialization failure instead: retry the transaction.
func CreateTx(ctx context.Context, q Querier, p store.NotificationCreateParams) (store.NotificationCreateResult, error) {
	res, _, err := createTx(ctx, q, p, true)
	return res, err
}

// CreateTxNoWake is CreateTx without the lane's wake-up NOTIFY (the inbox
// item's signal, if any, is still sent). The rows are claimed at the next
// wake-up of their lane or the claimers' next poll: it is for a caller that
// throttles its wake-ups, as herald.Client does, knowing another enqueue
// woke the lane a moment ago.
func CreateTxNoWake(ctx context.Context, q Querier, p store.NotificationCreateParams) (store.NotificationCreateResult, error) {
	res, _, err := createTx(ctx, q, p, false)
	return res, err
}

// CreateTxWake is CreateTx that also reports whether the statement sent
// the lane's wake-up: only a create that wrote a row due now sends one
// (not a deduplicated create, nor one of scheduled rows). It is for a
// caller that throttles its wake-ups, as herald.Client does: a turn this
// create did not use is the caller's to give to the next.
func CreateTxWake(ctx context.Context, q Querier, p store.NotificationCreateParams) (store.NotificationCreateResult, bool, error) {
	return createTx(ctx, q, p, true)
}

func createTx(ctx context.Context, q Querier, p store.NotificationCreateParams, wake bool) (res store.NotificationCreateResult, woke bool, err error) {
	if p.IdempotencyKey != "" {
		return store.NotificationCreateResult{}, false, errors.New("create notification: idempotency keys belong to intake; use a dedup key")
	}
	if len(p.Channels) == 0 {
		return store.NotificationCreateResult{}, false, errors.New("create notification: no channels")
	}
	c := newChainArgs(p) // a lazy chain's later steps get no rows (fallback.go)
	channels, messageIDs := c.channels, c.messageIDs
	for i, ch := range channels {
		if strings.Contains(ch, ",") || strings.Contains(messageIDs[i], ",") {
			return store.NotificationCreateResult{}, false, fmt.Errorf("create notification: %q is not a channel", ch)
		}
	}
	params := p.Params
	if len(params) == 0 {
		params = json.RawMessage("{}")
	}
	var dedup *string
	if p.DedupKey != "" {
		dedup = &p.DedupKey
	}
	var inbox inboxArgs
	if p.InboxWanted() {
		var err error
		// Read in the caller's transaction, as the statement after it.
		if inbox, _, err = inboxForLanguage(ctx, q, p); err != nil {
			return store.NotificationCreateResult{}, false, fmt.Errorf("create notification: %w", err)
		}
	}
	var (
		createdID, dupID *string
		due              bool
		notified, told   int64
	)
	// Lists travel as comma-joined text, not arrays, so that any
	// database/sql driver for PostgreSQL can pass them.
	steps := make([]string, len(c.steps))
	for i, n := range c.steps {
		steps[i] = strconv.Itoa(int(n))
	}
	// Both statements take the same first twelve arguments (room for
	// qEnqueue's twenty-one, so the appends below do not copy them).
	args := append(make([]any, 0, 21), p.Tenant, p.ID, p.Recipient, p.EventID, p.Kind, string(p.Lane), string(params),
		dedup, p.SendAt, p.ExpiresAt, strings.Join(channels, ","), strings.Join(messageIDs, ","))
	stmt, dest := qEnqueuePlain, []any{&createdID, &due, &notified}
	if plain := inbox.title == nil && !slices.Contains(channels, string(heraldtype.ChannelPush)); plain {
		args = append(args, strings.Join(steps, ","), wake, c.plan, p.Scope)
	} else {
		stmt, dest = qEnqueue, append(dest, &dupID, &told)
		args = append(args, inbox.title, inbox.body, inbox.locale, inbox.messageID, strings.Join(steps, ","), wake, c.plan, int16(p.InboxAt()), p.Scope)
	}
	err = q.QueryRow(ctx, stmt, args...).Scan(dest...)
	if err != nil {
		return store.NotificationCreateResult{}, false, fmt.Errorf("create notification: %w", err)
	}
	if createdID != nil {
		return store.NotificationCreateResult{Outcome: store.Created, ID: *createdID}, notified > 0, nil
	}
	if dedup == nil {
		return store.NotificationCreateResult{}, false, errors.New("create notification: no row written and no reason why")
	}
	if dupID == nil {
		// Committed by a transaction this statement waited for: not in the
		// statement's snapshot, but a new statement sees it (READ COMMITTED);
		// or qEnqueuePlain, which leaves every duplicate to this read.
		if err := q.QueryRow(ctx, qNotificationByDedup, p.Tenant, p.DedupKey).Scan(&dupID); err != nil {
			return store.NotificationCreateResult{}, false, fmt.Errorf("create notification: read deduplicated notification: %w", err)
		}
	}
	return store.NotificationCreateResult{Outcome: store.Deduplicated, ID: *dupID}, false, nil
}

// qWakeHash names, in SQL, the wake-up channels wakeChannels names in Go:
// the first 8 hex digits of md5("database.schema"). The listener LISTENs on
// the channel named in Go; CreateTx runs on the caller's connection and
// names it in SQL, so the caller need not know where the store lives.
const qWakeHash = `wake AS (SELECT 'herald_wake_' || left(md5(current_database() || '.' || current_schema()), 8) || '_' AS prefix)`

// qEnqueue is CreateTx's statement: qNotificationCreate without the
// idempotency key, on the caller's connection.
//
//	n  inserts the notification; an existing dedup key makes it return nothing.
//	ic bumps the recipient's inbox counter if $13 carries an inbox text.
//	ii inserts the inbox item with that seq; the notification's inbox_at
//	   records its send, STORED (store, inboxsend.go).
//	o  inserts one outbox row per channel (the inbox is not in $11), in
//	   channel order; push one per active device (as qNotificationCreate).
//	w  NOTIFYs the lane's channel if a row is due now and $18 asks for it
//	   (delivered at commit).
//	wi NOTIFYs the inbox channel for the item (delivered at commit; a
//	   payload too long for NOTIFY becomes the empty "any inbox" one).
//
// $1 tenant, $2 id, $3 recipient, $4 event id, $5 kind, $6 lane, $7 params,
// $8 dedup key (NULL for none), $9 send_at, $10 expires_at, $11 channels and
// $12 message ids (comma-joined, parallel), $13 inbox title (NULL: no
// item), $14 inbox body, $15 its locale, $16 the inbox item's message id,
// $17 each channel's fallback step (comma-joined, parallel to $11; 0 off a
// chain), a later step's rows WAITING (as qNotificationCreate), $18 whether
// to wake the lane, $19 a lazy chain's later channels, comma-joined, the
// first step's rows' fallback_plan (empty for none; as qNotificationCreate's
// $25), $20 the inbox's place among the kind's channels (0: none; as
// qNotificationCreate's $26), $21 the scope (empty for none).
const qEnqueue = `WITH t AS (SELECT statement_timestamp() AS now),
` + qWakeHash + `,
n AS (
    INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, dedup_key, send_at, expires_at, created_at, inbox_at, scope)
    SELECT $2::text, $1::text, $3::text, $4::text, $5::text, $6::text, $7::json, $8::text, $9::timestamptz, $10::timestamptz, t.now,
           $20::smallint, $21::text
    FROM t
    ON CONFLICT (tenant, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
    RETURNING id, created_at
),
ic AS (
    INSERT INTO inbox_counters AS ic (tenant, recipient, seq, unread)
    SELECT $1::text, $3::text, 1, 1 FROM n WHERE $13::text IS NOT NULL
    ON CONFLICT (tenant, recipient) DO UPDATE SET seq = ic.seq + 1, unread = ic.unread + 1
    RETURNING seq
),
ii AS (
    INSERT INTO inbox_items (tenant, recipient, seq, message_id, notification_id, kind, title, body, locale, created_at)
    SELECT $1::text, $3::text, ic.seq, $16::text, n.id, $5::text, $13::text, $14::text, $15::text, n.created_at
    FROM n, ic
    RETURNING $1::text || chr(31) || $3::text AS payload
),
o AS (
    INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, last_reason, available_at, expires_at, created_at, updated_at,
                        fallback_step, fallback_plan, scope, deferred)
    SELECT n.id, c.message_id || coalesce('.' || dv.device_id, ''), $1::text, $6::text, c.channel || coalesce('.' || dv.device_id, ''),
           CASE WHEN c.step > 1 THEN 'WAITING' ELSE 'PENDING' END, '',
           greatest(n.created_at, $9::timestamptz), $10::timestamptz, n.created_at, n.created_at, nullif(c.step, 0),
           CASE WHEN c.step = 1 THEN string_to_array(nullif($19::text, ''), ',') END, $21::text,
           coalesce(c.step <= 1 AND $9::timestamptz > n.created_at + ` + qDeferHorizon + `, false)
    FROM n, unnest(string_to_array($11::text, ','), string_to_array($12::text, ','), string_to_array($17::text, ',')::integer[])
        WITH ORDINALITY AS c (channel, message_id, step, ord)
        LEFT JOIN devices dv ON c.channel = 'push' AND dv.tenant = $1::text AND dv.recipient = $3::text AND dv.active
    ORDER BY c.ord, dv.device_id
    RETURNING state = 'PENDING' AND available_at <= created_at AS due
),
w AS (SELECT pg_notify(wake.prefix || $6::text, '') FROM wake WHERE $18::boolean AND EXISTS (SELECT 1 FROM o WHERE o.due)),
wi AS (SELECT pg_notify(` + qInboxChannel + `, CASE WHEN octet_length(payload) <= 7999 THEN payload ELSE '' END) FROM ii)
SELECT (SELECT id FROM n), coalesce((SELECT bool_or(due) FROM o), false), (SELECT count(*) FROM w), dup.id, (SELECT count(*) FROM wi)
FROM t LEFT JOIN notifications dup ON dup.tenant = $1::text AND dup.dedup_key = $8::text`

// qEnqueuePlain is qEnqueue for the common send: no inbox item and no push
// (so no device fan-out). It leaves out what those need, because a
// statement's every CTE is set up at each execution whether it runs or not,
// and the Go API runs this once per notification: its statement time fell
// from 245 to 186 µs a notification, and BenchmarkGoAPIHerald ran more
// notifications a second in each of four pairs alternated with qEnqueue
// (docs/benchmarks.md).
// It does not read a duplicate's id either: a conflict returns no id, and
// createTx reads it with qNotificationByDedup.
//
// The outbox rows are inserted in channel order without an ORDER BY: the
// only join is with n's one row, so every plan is a nested loop that keeps
// the order of the unnest.
//
// $1 tenant, $2 id, $3 recipient, $4 event id, $5 kind, $6 lane, $7 params,
// $8 dedup key (NULL for none), $9 send_at, $10 expires_at, $11 channels and
// $12 message ids (comma-joined, parallel), $13 each channel's fallback
// step (comma-joined, parallel to $11), $14 whether to wake the lane, $15 a
// lazy chain's later channels (as qEnqueue's $17, $18 and $19), $16 the
// scope.
const qEnqueuePlain = `WITH ` + qWakeHash + `,
n AS (
    INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, dedup_key, send_at, expires_at, created_at, inbox_at, scope)
    VALUES ($2::text, $1::text, $3::text, $4::text, $5::text, $6::text, $7::json, $8::text, $9::timestamptz, $10::timestamptz,
            statement_timestamp(), 0, $16::text)
    ON CONFLICT (tenant, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
    RETURNING id, created_at
),
o AS (
    INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, last_reason, available_at, expires_at, created_at, updated_at,
                        fallback_step, fallback_plan, scope, deferred)
    SELECT n.id, c.message_id, $1::text, $6::text, c.channel,
           CASE WHEN c.step > 1 THEN 'WAITING' ELSE 'PENDING' END, '',
           greatest(n.created_at, $9::timestamptz), $10::timestamptz, n.created_at, n.created_at, nullif(c.step, 0),
           CASE WHEN c.step = 1 THEN string_to_array(nullif($15::text, ''), ',') END, $16::text,
           coalesce(c.step <= 1 AND $9::timestamptz > n.created_at + ` + qDeferHorizon + `, false)
    FROM n, unnest(string_to_array($11::text, ','), string_to_array($12::text, ','), string_to_array($13::text, ',')::integer[])
        AS c (channel, message_id, step)
    RETURNING state = 'PENDING' AND available_at <= created_at AS due
),
w AS (SELECT pg_notify(wake.prefix || $6::text, '') FROM wake WHERE $14::boolean AND EXISTS (SELECT 1 FROM o WHERE o.due))
SELECT (SELECT id FROM n), coalesce((SELECT bool_or(due) FROM o), false), (SELECT count(*) FROM w)`

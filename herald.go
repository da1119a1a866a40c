package herald

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"database/sql/driver"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/lookup"
	"github.com/heraldhq/herald/seal"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/postgres"
	"github.com/heraldhq/herald/store/sqlite"
)

// Options configure a Client.
type Options struct {
	// KindsFile is the kinds file the herald server reads too (its config's
	// kinds_file): a YAML file whose one key, kinds, lists the notification
	// kinds, checked as herald checks them (config.LoadKinds). It holds no
	// API keys or other server settings. Either KindsFile or Kinds is
	// required.
	KindsFile string
	// Kinds are the notification kinds the application may enqueue, given
	// in code. Use the same list the herald server runs with, or it parks
	// what it does not know. Either KindsFile or Kinds is required.
	Kinds []config.Kind
	// Clock supplies the time notification ids are made from and that
	// ExpiresAt is checked against. Defaults to the system clock.
	Clock clock.Clock
	// PersonalData seals the params before they are stored (package
	// seal): build it with seal.New from the keys of the herald server's
	// personal_data.keys, in the same order. nil stores them plain, which
	// a server with keys still reads.
	PersonalData *seal.Keyring
	// WakeEvery is the least time between two wake-ups this client sends
	// one lane on PostgreSQL (default 10ms; negative: every enqueue sends
	// one). See Client.
	WakeEvery time.Duration
	// Limits are the herald server's caps on what one notification's
	// params may hold and render (its config's limits: params_max,
	// params_depth_max, rendered_max_bytes). Give the server's values when
	// they are not the defaults, so that an intent past them is refused
	// here (an *InvalidIntentError), as intake refuses it with 422,
	// rather than parked by the sender. Zero fields are herald's defaults.
	Limits Limits
	// SendAtHorizon is the server's send_at_horizon: how far ahead SendAt
	// may be (default catalog.DefaultSendAtHorizon, 366 days).
	SendAtHorizon time.Duration
}

// Limits are a herald server's caps on a notification's params (Options).
type Limits struct {
	ParamsMax        int // params_max: values counted at every depth
	ParamsDepthMax   int // params_depth_max: how deep params nest
	RenderedMaxBytes int // rendered_max_bytes: bytes of one rendered title or body
}

// DefaultWakeEvery is Options.WakeEvery's default.
const DefaultWakeEvery = 10 * time.Millisecond

// Client enqueues notifications in the application's own transactions. It
// holds no connection and is safe for concurrent use.
//
// On PostgreSQL an enqueue wakes herald's claimers with a NOTIFY its
// transaction sends at commit, and PostgreSQL serialises the commits of
// notifying transactions on one lock: at thousands of enqueues a second
// that lock, not the inserts, set the pace. So a Client sends a lane's
// wake-up at most once per Options.WakeEvery and writes the rows enqueued
// in between without one; the claimers, woken, look once more shortly
// after (dispatch.ClaimAgainAfterWake) and take them. A row whose
// transaction commits later than that, or whose window's wake-up rode in
// a transaction that rolled back or is still open when the row's commits,
// is taken at the claimers' next wake-up or poll (poll_interval). A client
// enqueueing less often than WakeEvery wakes the lane every time.
type Client struct {
	catalog *catalog.Catalog
	clock   clock.Clock
	seal    *seal.Keyring
	wake    wakeThrottle
}

// wakeThrottle decides which enqueues send their lane's wake-up: the first
// after every `every` (on the machine's monotonic clock, not Options.Clock).
type wakeThrottle struct {
	every time.Duration
	mu    sync.Mutex
	last  map[heraldtype.Lane]time.Time
}

// take reports whether an enqueue in lane now sends the wake-up, and the
// turn it took, for giveBack.
func (w *wakeThrottle) take(lane heraldtype.Lane) (wakeTurn, bool) {
	if w.every <= 0 {
		return wakeTurn{}, true
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	last, had := w.last[lane]
	if had && now.Sub(last) < w.every {
		return wakeTurn{}, false
	}
	w.last[lane] = now
	return wakeTurn{lane: lane, at: now, before: last}, true
}

// wakeTurn is a turn take gave: its lane, when, and the turn before it
// (zero for none).
type wakeTurn struct {
	lane       heraldtype.Lane
	at, before time.Time
}

// giveBack returns a turn whose enqueue sent no wake-up (it wrote nothing
// due: a duplicate), so the next enqueue sends it, unless a later turn was
// taken meanwhile.
func (w *wakeThrottle) giveBack(t wakeTurn) {
	if t.at.IsZero() {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case !w.last[t.lane].Equal(t.at):
	case !t.before.IsZero():
		w.last[t.lane] = t.before
	default:
		delete(w.last, t.lane)
	}
}

// NewClient reads, checks and compiles the kinds. An error names the kind
// and the field, as herald's configuration check does, and for a kinds file
// the file too.
func NewClient(opts Options) (*Client, error) {
	kinds := opts.Kinds
	switch {
	case opts.KindsFile != "" && len(opts.Kinds) > 0:
		return nil, errors.New("herald: Options: KindsFile and Kinds are both set; give one")
	case opts.KindsFile != "":
		var err error
		if kinds, err = config.LoadKinds(opts.KindsFile); err != nil {
			return nil, fmt.Errorf("herald: %w", err)
		}
	case len(opts.Kinds) == 0:
		return nil, errors.New("herald: Options: KindsFile or Kinds is required")
	default:
		if err := config.ValidateKinds(opts.Kinds, nil); err != nil {
			return nil, fmt.Errorf("herald: Options: %w", err)
		}
	}
	cat, err := catalog.New(kinds)
	if err != nil {
		return nil, fmt.Errorf("herald: %w", err)
	}
	l := opts.Limits
	if l.ParamsMax < 0 || l.ParamsDepthMax < 0 || l.RenderedMaxBytes < 0 || opts.SendAtHorizon < 0 {
		return nil, errors.New("herald: Options: Limits and SendAtHorizon must not be negative")
	}
	cat.Limit(catalog.Limits{ParamsMax: l.ParamsMax, DepthMax: l.ParamsDepthMax, RenderedMax: l.RenderedMaxBytes})
	cat.SendAtHorizon = opts.SendAtHorizon
	c := &Client{catalog: cat, clock: opts.Clock, seal: opts.PersonalData, wake: wakeThrottle{every: opts.WakeEvery, last: map[heraldtype.Lane]time.Time{}}}
	if opts.WakeEvery == 0 {
		c.wake.every = DefaultWakeEvery
	}
	if c.clock == nil {
		c.clock = clock.Real{}
	}
	return c, nil
}

// Intent is one notification to send: the minimal record of what to say to
// whom and when. Contact details and consent are not part of it; herald reads
// them when it sends.
type Intent struct {
	// Tenant owns the notification: the tenant of the API key that reads it
	// back over HTTP. Required.
	Tenant string
	// Recipient is the application's id of the person (not an address). Required.
	Recipient string
	// EventID names the business event (a booking id, an order id). Required.
	EventID string
	// Kind is one of Options.Kinds. Required.
	Kind string
	// Scope names the tenant's part the notification belongs to (a clinic,
	// a brand): inside the tenant, each scope's sends take their turn in a
	// lane with the others', so one clinic's backlog does not hold up
	// another's. Optional: at most 64 ASCII letters, digits and . _ : / -, as
	// over HTTP ("scope").
	Scope string
	// Params fill the kind's templates; every param they reference must be
	// present, exactly as herald's intake requires (422 there, an
	// *InvalidIntentError here). Values are stored as JSON.
	Params map[string]any
	// SendAt schedules the send; the zero time sends now.
	SendAt time.Time
	// ExpiresAt is a due-by: a send not made by then ends EXPIRED. The zero
	// time means none. It must be in the future and after SendAt.
	ExpiresAt time.Time
	// DedupKey identifies this notification of this business event, made
	// from the event and not from the moment ("booking-42:confirmed",
	// "booking-42:reminder-d1"). Enqueueing an intent whose key the tenant
	// already has writes nothing and returns the existing notification, so
	// running the same business step twice adds nothing. Required.
	DedupKey string
}

// Enqueued reports what an enqueue did.
type Enqueued struct {
	// ID is the notification's id: the new one, or the one that already
	// held the dedup key. GET /v1/notifications/{id} reads it.
	ID string
	// Created is true when this call wrote the notification, false when the
	// dedup key was taken (nothing was written).
	Created bool
}

// ErrNoTransaction is returned, wrapped, for an enqueue given a nil
// transaction or database. Nothing was written.
var ErrNoTransaction = errors.New("herald: enqueue: nil transaction or database")

// ErrNoClient is returned for a call on a nil Client or one not made by
// NewClient (a zero value). Nothing was written.
var ErrNoClient = errors.New("herald: the Client is nil or was not made by NewClient")

// ErrNotMigrated is returned, wrapped together with the database's own
// error, when the transaction does not see herald's tables: the database
// was not migrated (herald migrate), or herald's schema is not first on
// the transaction's search_path (PostgreSQL through pgx or its
// database/sql driver), or a table of that name is not herald's (an
// application's own notifications table, earlier on the search_path:
// give herald a schema of its own, docs/enqueue.md), or the SQLite file
// is not herald's. Nothing was written.
var ErrNotMigrated = errors.New("herald's tables are not there: run herald migrate on this database, or put herald's schema on the search_path")

// ErrUnavailable is returned, wrapped beside the driver's own error, for
// an enqueue whose database could not be reached or whose connection broke
// (PostgreSQL through pgx or its database/sql driver: a refused or timed
// out connect, a connection lost, the server shutting down). Whether the
// write happened may be unknown: run your transaction again, the enqueue
// with the same DedupKey, and the notification is written once (the
// transaction that failed is lost, your other writes in it too). An enqueue
// whose own context ended is not this error: context.Canceled or
// context.DeadlineExceeded, as returned.
var ErrUnavailable = errors.New("herald: the database is unavailable")

// ErrNotFound is returned, wrapped, by Get for a notification the tenant
// does not have (or that the reading transaction does not see yet).
var ErrNotFound = store.ErrNotFound

// Reader reads rows: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type Reader = postgres.RowsQuerier

// Get returns tenant's notification id as GET /v1/notifications/{id}
// shows it, each planned send with its state and reason (the README's
// table), without the attempt log: for the application that enqueued it
// to read how it went without an API key. db is a pool, a connection, or
// a transaction of yours, which sees its own enqueues before they commit.
// PostgreSQL only. ErrNotFound when there is no such notification; the
// errors of Enqueue otherwise (ErrNotMigrated, ErrUnavailable, the
// driver's).
func (c *Client) Get(ctx context.Context, db Reader, tenant, id string) (lookup.Notification, error) {
	if c == nil || c.catalog == nil {
		return lookup.Notification{}, ErrNoClient
	}
	if isNil(db) {
		return lookup.Notification{}, ErrNoTransaction
	}
	v, err := postgres.ViewTx(ctx, db, tenant, id)
	if err != nil {
		return lookup.Notification{}, dbError(ctx, "get "+id, err)
	}
	return lookup.View(v), nil
}

// InvalidIntentError is an intent herald would refuse: what intake answers
// with 422. Nothing was written.
type InvalidIntentError struct {
	// Param names the offending field as intake's problem does:
	// "recipient", "kind", "params.amount"…
	Param  string
	Detail string
	// MissingParams names every param the kind's templates need and the
	// intent lacks, as intake's missing_params does.
	MissingParams []string
}

func (e *InvalidIntentError) Error() string {
	return fmt.Sprintf("herald: invalid intent: %s", e.Detail)
}

// EnqueueTx writes the notification and one outbox row per channel of its
// kind in tx, a pgx transaction on herald's PostgreSQL database. They
// commit or roll back with the rest of tx. On commit herald's claimers, in
// every herald process on the database, are woken at once (a NOTIFY sent
// in tx, which PostgreSQL delivers only on commit), or, when another
// enqueue of this client woke the lane a moment ago, take the rows at
// their second look (see Client). tx must see herald's schema first on its
// search_path.
func (c *Client) EnqueueTx(ctx context.Context, tx pgx.Tx, in Intent) (Enqueued, error) {
	return c.enqueuePostgres(ctx, tx, in)
}

// EnqueueSQLTx is EnqueueTx for database/sql on PostgreSQL (for example the
// pgx driver, github.com/jackc/pgx/v5/stdlib). For herald's SQLite file use
// EnqueueSQLiteTx.
func (c *Client) EnqueueSQLTx(ctx context.Context, tx *sql.Tx, in Intent) (Enqueued, error) {
	if tx == nil {
		return Enqueued{}, ErrNoTransaction
	}
	return c.enqueuePostgres(ctx, sqlQuerier{tx}, in)
}

// EnqueueSQLiteTx is EnqueueSQLTx for herald's SQLite database. Open the
// file with sqlite.DSN(path) (driver "sqlite", modernc.org/sqlite) so the
// transaction waits for herald's writer instead of failing. SQLite has no
// wake-up across processes: herald sends the rows at its next poll.
func (c *Client) EnqueueSQLiteTx(ctx context.Context, tx *sql.Tx, in Intent) (Enqueued, error) {
	if tx == nil {
		return Enqueued{}, ErrNoTransaction
	}
	p, err := c.params(in)
	if err != nil {
		return Enqueued{}, err
	}
	res, err := sqlite.CreateTx(ctx, tx, c.clock.Now(), p)
	return enqueued(ctx, in, res, err)
}

// Beginner starts pgx transactions: a *pgxpool.Pool or a *pgx.Conn.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

var (
	_ Beginner = (*pgxpool.Pool)(nil)
	_ Beginner = (*pgx.Conn)(nil)
)

// Enqueue writes a notification that goes with no other write. On a pool
// or a connection (both run statements themselves) the write is one
// autocommitted statement, atomic on its own and committed before Enqueue
// returns: no BEGIN and COMMIT round trips around it. Given a pgx.Tx (which
// is a Beginner too), or a connection inside a BEGIN of yours, it writes in
// that transaction, as EnqueueTx does, and commits or rolls back with it. A
// Beginner that runs no statements itself gets a transaction of its own,
// committed before Enqueue returns.
func (c *Client) Enqueue(ctx context.Context, db Beginner, in Intent) (Enqueued, error) {
	if isNil(db) {
		return Enqueued{}, ErrNoTransaction
	}
	p, err := c.params(in)
	if err != nil {
		return Enqueued{}, err
	}
	if q, ok := db.(postgres.Querier); ok {
		res, err := c.createTx(ctx, q, p)
		return enqueued(ctx, in, res, err)
	}
	var res store.NotificationCreateResult
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var err error
		res, err = c.createTx(ctx, tx, p)
		return err
	})
	return enqueued(ctx, in, res, err)
}

func (c *Client) enqueuePostgres(ctx context.Context, q postgres.Querier, in Intent) (Enqueued, error) {
	if isNil(q) {
		return Enqueued{}, ErrNoTransaction
	}
	p, err := c.params(in)
	if err != nil {
		return Enqueued{}, err
	}
	res, err := c.createTx(ctx, q, p)
	return enqueued(ctx, in, res, err)
}

// createTx writes p with q, with the lane's wake-up when the throttle
// gives it. A scheduled notification sends none (its rows are not due) and
// so takes no turn from one that is; nor does a create that wrote nothing
// due (a duplicate): it gives its turn back.
func (c *Client) createTx(ctx context.Context, q postgres.Querier, p store.NotificationCreateParams) (store.NotificationCreateResult, error) {
	if p.SendAt != nil && p.SendAt.After(c.clock.Now()) {
		return postgres.CreateTx(ctx, q, p)
	}
	turn, ok := c.wake.take(p.Lane)
	if !ok {
		return postgres.CreateTxNoWake(ctx, q, p)
	}
	res, woke, err := postgres.CreateTxWake(ctx, q, p)
	if !woke {
		c.wake.giveBack(turn)
	}
	return res, err
}

func enqueued(ctx context.Context, in Intent, res store.NotificationCreateResult, err error) (Enqueued, error) {
	if err != nil {
		return Enqueued{}, dbError(ctx, fmt.Sprintf("enqueue %s for %s", in.Kind, in.DedupKey), err)
	}
	return Enqueued{ID: res.ID, Created: res.Outcome == store.Created}, nil
}

// dbError wraps the database's err of what (an enqueue, a read) with the
// herald error a caller branches on, beside it: ErrNotMigrated for tables
// that are not there, ErrUnavailable for a database out of reach while
// ctx is live (unavailable); the rest as it is.
func dbError(ctx context.Context, what string, err error) error {
	var pg *pgconn.PgError
	switch {
	case errors.As(err, &pg) && (pg.Code == "42P01" || pg.Code == "42703"), // undefined_table, undefined_column: another table of the name (pgx, and its database/sql driver)
		strings.Contains(err.Error(), "no such table"): // SQLite's
		return fmt.Errorf("herald: %s: %w: %w", what, ErrNotMigrated, err)
	case ctx.Err() == nil && unavailable(err):
		return fmt.Errorf("herald: %s: %w: %w", what, ErrUnavailable, err)
	}
	return fmt.Errorf("herald: %s: %w", what, err)
}

// unavailable reports whether err says the PostgreSQL server could not be
// reached or the connection to it broke (ErrUnavailable), not that a
// statement failed on a live connection (a PgError other than the
// connection's, a caller's misuse such as a connection still busy with
// unread rows), nor a TLS or authentication failure, which another try
// would meet again. The caller leaves out an enqueue whose own context
// ended: pgx's connect timeout is a context deadline too.
func unavailable(err error) bool {
	var pg *pgconn.PgError
	var connect *pgconn.ConnectError
	var nerr net.Error
	switch {
	case errors.As(err, &pg):
		// Class 08, connection exception, but a protocol violation (a
		// statement herald sent wrong); 57P01..57P03: the server is
		// shutting down, crashed, or not yet accepting connections.
		return (strings.HasPrefix(pg.Code, "08") && pg.Code != "08P01") || pg.Code == "57P01" || pg.Code == "57P02" || pg.Code == "57P03"
	case tlsFailure(err):
		return false
	case errors.As(err, &connect), errors.As(err, &nerr),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF), errors.Is(err, driver.ErrBadConn),
		errors.Is(err, net.ErrClosed), pgconn.Timeout(err):
		return true
	}
	return false
}

// tlsFailure reports whether err is a TLS handshake's or a certificate's:
// a configuration to fix, not an outage to wait out.
func tlsFailure(err error) bool {
	var verify *tls.CertificateVerificationError
	var record tls.RecordHeaderError
	var authority x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	return errors.As(err, &verify) || errors.As(err, &record) || errors.As(err, &authority) || errors.As(err, &host) || errors.As(err, &invalid)
}

// sqlQuerier runs CreateTx's statement on a database/sql transaction.
type sqlQuerier struct{ tx *sql.Tx }

func (q sqlQuerier) QueryRow(ctx context.Context, query string, args ...any) pgx.Row {
	return q.tx.QueryRowContext(ctx, query, args...)
}

var _ postgres.Querier = sqlQuerier{}

// Limits on the identifiers only the Go API takes; the rest are catalog's.
const (
	maxTenantLen   = 200
	maxDedupKeyLen = 255
)

// params checks the intent as intake checks a request (catalog.Validate)
// and turns it into the store's create parameters.
func (c *Client) params(in Intent) (store.NotificationCreateParams, error) {
	if c == nil || c.catalog == nil {
		return store.NotificationCreateParams{}, ErrNoClient
	}
	bad := func(param, format string, args ...any) (store.NotificationCreateParams, error) {
		return store.NotificationCreateParams{}, &InvalidIntentError{Param: param, Detail: fmt.Sprintf(format, args...)}
	}
	for _, f := range []struct {
		param, value string
		max          int
	}{{"tenant", in.Tenant, maxTenantLen}, {"dedup_key", in.DedupKey, maxDedupKeyLen}} {
		switch {
		case f.value == "":
			return bad(f.param, "%s is required", f.param)
		case len(f.value) > f.max || !catalog.Printable(f.value):
			return bad(f.param, "%s must be 1..%d printable characters", f.param, f.max)
		case f.param == "tenant" && strings.TrimSpace(f.value) != f.value:
			// " pay " is a tenant no API key reads: its notifications
			// would be sent and never seen.
			return bad(f.param, "tenant has spaces around it")
		}
	}
	var raw json.RawMessage
	if in.Params != nil {
		// encoding/json would store invalid UTF-8 as U+FFFD, silently;
		// intake refuses such a body (400).
		if at := invalidUTF8(reflect.ValueOf(in.Params), "params", 0, map[any]bool{}); at != "" {
			return bad(at, "%s is not valid UTF-8 text", at)
		}
		b, err := json.Marshal(in.Params)
		if err != nil {
			return bad("params", "params cannot be stored as JSON: %v", err)
		}
		raw = b
	}
	now := c.clock.Now()
	// The params are checked as stored and read back: what the sender renders.
	kind, stored, inbox, ferr := c.catalog.Validate(now, catalog.Request{
		Tenant: in.Tenant, Recipient: in.Recipient, EventID: in.EventID, Kind: in.Kind, Params: raw,
		SendAt: timePtr(in.SendAt), ExpiresAt: timePtr(in.ExpiresAt), Scope: in.Scope,
	})
	if ferr != nil {
		return store.NotificationCreateParams{}, &InvalidIntentError{Param: ferr.Param, Detail: ferr.Detail, MissingParams: ferr.Missing}
	}
	return store.NotificationCreateParams{
		Tenant: in.Tenant, DedupKey: in.DedupKey, ID: ids.New("ntf", now), Recipient: in.Recipient, EventID: in.EventID,
		Kind: in.Kind, Lane: kind.Lane, Scope: in.Scope, Params: c.seal.SealJSON(in.Tenant, stored), SendAt: timePtr(in.SendAt), ExpiresAt: timePtr(in.ExpiresAt),
		Channels: kind.Channels, Inbox: inbox, Fallback: kind.Fallback,
	}, nil
}

// isNil reports whether v is nil or a nil pointer (a *pgxpool.Pool that
// was never opened), which would panic at its first use.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	r := reflect.ValueOf(v)
	return r.Kind() == reflect.Pointer && r.IsNil()
}

// invalidUTF8 is the path of the first string in v (a param's value, a
// map's key, an exported struct field's value) that is not valid UTF-8,
// or "" when every one is. It looks through pointers, interfaces, maps,
// slices, arrays and structs as encoding/json would, but not into a value
// that marshals itself (json.Marshaler, encoding.TextMarshaler): that
// encoding is its own. A json.RawMessage is checked as the text it is.
// Each map, slice and pointer is looked into once (seen), so a value
// shared or referring to itself is not walked again, and past
// maxWalkDepth the walk stops: json.Marshal then refuses a cycle.
func invalidUTF8(v reflect.Value, path string, depth int, seen map[any]bool) string {
	if depth > maxWalkDepth || !v.IsValid() {
		return ""
	}
	if v.Type() == rawMessageType {
		if !utf8.Valid(v.Bytes()) {
			return path
		}
		return ""
	}
	if v.Kind() != reflect.Interface && (v.Type().Implements(marshalerType) || v.Type().Implements(textMarshalerType)) {
		return ""
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice:
		if v.IsNil() {
			return ""
		}
		key := any(v.Pointer())
		if v.Kind() == reflect.Slice {
			key = [2]uintptr{v.Pointer(), uintptr(v.Len())}
		}
		if seen[key] {
			return ""
		}
		seen[key] = true
	}
	switch v.Kind() {
	case reflect.String:
		if !utf8.ValidString(v.String()) {
			return path
		}
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			return invalidUTF8(v.Elem(), path, depth+1, seen)
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			k := it.Key()
			if k.Kind() == reflect.String && !utf8.ValidString(k.String()) {
				return path + " (a key)"
			}
			if at := invalidUTF8(it.Value(), path+"."+fmt.Sprint(k.Interface()), depth+1, seen); at != "" {
				return at
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return "" // []byte: JSON holds it as base64
		}
		for i := range v.Len() {
			if at := invalidUTF8(v.Index(i), path+"["+strconv.Itoa(i)+"]", depth+1, seen); at != "" {
				return at
			}
		}
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			if at := invalidUTF8(v.Field(i), path+"."+f.Name, depth+1, seen); at != "" {
				return at
			}
		}
	}
	return ""
}

// maxWalkDepth bounds invalidUTF8's walk, far past what any kind's
// params may nest (Limits.ParamsDepthMax).
const maxWalkDepth = 64

var (
	rawMessageType    = reflect.TypeFor[json.RawMessage]()
	marshalerType     = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

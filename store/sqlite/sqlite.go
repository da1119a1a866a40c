// Package sqlite is herald's embedded store: one SQLite file through
// modernc.org/sqlite (pure Go), WAL, synchronous=FULL, a busy timeout, and
// versioned migrations embedded in the binary.
//
// Every write goes through one writer goroutine that commits whatever is
// waiting in one transaction (see writer.go); reads use a separate pool of
// read-only connections, which WAL lets run beside the writer. Times are
// stored as Unix milliseconds taken from the store's clock.
package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// Options tune the store.
type Options struct {
	// Clock supplies "now". Defaults to the system clock.
	Clock clock.Clock
	// Logger receives the warning of a schema newer than this build's
	// (warnNewerSchema). Nil logs nothing.
	Logger *slog.Logger
	// MaxBatch caps the operations committed together. Defaults to 256.
	MaxBatch int
	// Readers is the size of the read pool. Defaults to 8.
	Readers int
	// MustExist makes Open create and migrate nothing: it fails with an
	// error wrapping fs.ErrNotExist when there is no file at path, and with
	// one wrapping ErrNotMigrated unless the file's schema is at this
	// build's version or later. For commands that only read or mend rows.
	// Defaults to false (Open creates the file and applies pending
	// migrations).
	MustExist bool
}

// Store is the SQLite driver.
type Store struct {
	w       *writer
	wdb     *sql.DB
	rdb     *sql.DB
	rst     *stmts
	clock   clock.Clock
	wakeups *store.Wakeups
	// inboxSignals announces inbox changes to this process (inboxsignal.go).
	inboxSignals store.InboxSignals
	// keyChanges counts this process's API key writes (apikeys.go).
	keyChanges store.APIKeyChanges
	// legacySeqs is the highest inbox seq handed out before migration 26
	// (inbox.go, inboxSeq); 0 when there was none.
	legacySeqs int64
	// promotions throttles the claims' promotions of deferred rows
	// (outbox.go, OutboxClaim).
	promotions store.Promotions
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the database at path and migrates it;
// with opts.MustExist it only opens an existing, migrated one.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 256
	}
	if opts.Readers <= 0 {
		opts.Readers = 8
	}
	wdsn, rdsn := dsn(path, false), dsn(path, true)
	if opts.MustExist {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("open sqlite %s: %w", path, err)
		}
		// Not even a file deleted since the Stat is created.
		wdsn, rdsn = wdsn+"&mode=rw", rdsn+"&mode=rw"
	}
	if err := setWAL(ctx, path, opts.MustExist); err != nil {
		return nil, err
	}
	wdb, err := sql.Open("sqlite", wdsn)
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	wdb.SetConnMaxLifetime(0)
	wdb.SetConnMaxIdleTime(0)
	var version int
	if opts.MustExist {
		version, err = checkSchema(ctx, wdb, path)
	} else {
		version, err = migrate(ctx, wdb)
	}
	if err == nil {
		err = warnNewerSchema(ctx, opts.Logger, version)
	}
	if err != nil {
		wdb.Close()
		return nil, err
	}
	var legacy int64
	if err := wdb.QueryRowContext(ctx, qInboxLegacyCeiling).Scan(&legacy); err != nil {
		wdb.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	rdb, err := sql.Open("sqlite", rdsn)
	if err != nil {
		wdb.Close()
		return nil, fmt.Errorf("open sqlite %s for reading: %w", path, err)
	}
	rdb.SetMaxOpenConns(opts.Readers)
	rdb.SetMaxIdleConns(opts.Readers)
	return &Store{
		w: newWriter(wdb, newWriterStmts(wdb, writeQueries...), opts.MaxBatch), wdb: wdb, rdb: rdb, rst: newStmts(rdb),
		clock: opts.Clock, wakeups: store.NewWakeups(), legacySeqs: legacy,
	}, nil
}

func dsn(path string, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(1)")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		// BEGIN IMMEDIATE: take the write lock at the start of a write
		// transaction, so a second process waits (busy_timeout) instead of
		// failing halfway.
		q.Set("_txlock", "immediate")
		// A deleted or rewritten row's old bytes are zeroed in the pages
		// the write touches anyway (no I/O added): an erased person's
		// words do not stay in those pages' free space. Pages freed whole
		// keep theirs until reused or VACUUM (docs/inbox.md, Erasure).
		q.Add("_pragma", "secure_delete(FAST)")
	}
	return fileURI(path, q)
}

// fileURI is the file: URI the driver opens for the database at path with
// the parameters q. The path is escaped where the URI would read it
// otherwise: '?' (the driver takes its parameters from the first one), '#'
// (SQLite ends the path at a fragment) and '%' (SQLite decodes escapes in
// the path). A database at "/data/herald#2.db" was opened as "/data/herald".
func fileURI(path string, q url.Values) string {
	return "file:" + uriPath.Replace(path) + "?" + q.Encode()
}

var uriPath = strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")

// Close stops the writer and closes the database.
func (s *Store) Close() error {
	s.w.close()
	s.rst.close()
	return errors.Join(s.rdb.Close(), s.wdb.Close())
}

// Wakeups returns the in-process wake-up signals.
func (s *Store) Wakeups() *store.Wakeups { return s.wakeups }

// Ping writes the probe row through the writer: a page written and
// committed, which fails as intake's writes do when the disk is full (an
// empty transaction writes nothing and commits even then).
func (s *Store) Ping(ctx context.Context) error {
	err := s.w.do(ctx, func(tx wtx) error {
		_, err := tx.Exec(qPing)
		return err
	})
	if err != nil {
		return fmt.Errorf("write probe row: %w", err)
	}
	return nil
}

func (s *Store) now() int64 { return s.clock.Now().UnixMilli() }

// after is the store's time d from now, in milliseconds rounded up: a
// wait (a deferral to the end of quiet hours, a retry's delay) never ends
// before its instant. Both terms rounded down made a send deferred to
// 08:00 due at 07:59:59.999.
func (s *Store) after(d time.Duration) int64 {
	t := s.clock.Now().Add(d)
	ms := t.UnixMilli()
	if t.After(time.UnixMilli(ms)) {
		ms++
	}
	return ms
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func msPtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixMilli()
}

func fromMs(v int64) time.Time { return time.UnixMilli(v).UTC() }

// msTime is t as the store keeps it, to the millisecond.
func msTime(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := fromMs(t.UnixMilli())
	return &u
}

func fromNullMs(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMs(v.Int64)
	return &t
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// NotificationCreate writes key, notification and outbox rows in one transaction.
func (s *Store) NotificationCreate(ctx context.Context, p store.NotificationCreateParams) (store.NotificationCreateResult, error) {
	var res store.NotificationCreateResult
	var pending bool
	err := s.w.do(ctx, func(tx wtx) error {
		res, pending = store.NotificationCreateResult{}, false
		now := s.now()
		if p.IdempotencyKey != "" {
			r, err := tx.Exec(qIdemInsert, p.Tenant, p.IdempotencyKey, p.RequestHash, p.ID, p.Response, now, now+p.IdempotencyTTL.Milliseconds())
			if err != nil {
				return fmt.Errorf("insert idempotency key: %w", err)
			}
			if n, _ := r.RowsAffected(); n == 0 {
				var hash string
				var resp []byte
				var expires int64
				if err := tx.QueryRow(qIdemGet, p.Tenant, p.IdempotencyKey).Scan(&hash, &resp, &expires); err != nil {
					return fmt.Errorf("read idempotency key: %w", err)
				}
				switch {
				case expires <= now:
					// Expired but not yet swept: the key is free again.
					if _, err := tx.Exec(qIdemReplace, p.RequestHash, p.ID, p.Response, now, now+p.IdempotencyTTL.Milliseconds(), p.Tenant, p.IdempotencyKey); err != nil {
						return fmt.Errorf("replace expired idempotency key: %w", err)
					}
				case hash == p.RequestHash:
					res = store.NotificationCreateResult{Outcome: store.Replayed, Response: resp}
					return nil
				default:
					res = store.NotificationCreateResult{Outcome: store.Conflict}
					return nil
				}
			}
		}
		q, args, err := notificationInsert(tx, p, now)
		if err != nil {
			return err
		}
		r, err := tx.Exec(q, args...)
		if err != nil {
			return fmt.Errorf("insert notification: %w", err)
		}
		if n, _ := r.RowsAffected(); n == 0 {
			var id string
			if err := tx.QueryRow(qNotificationByDedup, p.Tenant, p.DedupKey).Scan(&id); err != nil {
				return fmt.Errorf("read deduplicated notification: %w", err)
			}
			res = store.NotificationCreateResult{Outcome: store.Deduplicated, ID: id}
			// Deduplicated writes nothing: roll back the idempotency key
			// this request may have taken above.
			return errWroteNothing
		}
		available := now
		if p.SendAt != nil && p.SendAt.UnixMilli() > now {
			available = p.SendAt.UnixMilli()
		}
		res = store.NotificationCreateResult{Outcome: store.Created, ID: p.ID, Response: p.Response}
		if p.Claim != nil && p.Handable() {
			res.Claimed, err = insertHanded(tx, p, now)
			return err
		}
		pending, err = insertPlanned(tx, p, available, now)
		return err
	})
	if errors.Is(err, errWroteNothing) {
		err = nil
	}
	if err != nil {
		return store.NotificationCreateResult{}, fmt.Errorf("create notification: %w", err)
	}
	if res.Outcome == store.Created {
		if pending {
			s.wakeups.Notify(p.Lane)
		}
		if p.InboxWanted() {
			s.inboxChanged(store.InboxKey{Tenant: p.Tenant, Recipient: p.Recipient})
		}
	}
	return res, nil
}

// errWroteNothing makes the writer roll an operation back after it decided
// its outcome (the writer then reruns it alone, and it rolls back again).
var errWroteNothing = errors.New("rolled back: nothing to write")

func paramsOrEmpty(p json.RawMessage) json.RawMessage {
	if len(p) == 0 {
		return json.RawMessage("{}")
	}
	return p
}

// NotificationGet reads a notification of tenant with its planned sends.
func (s *Store) NotificationGet(ctx context.Context, tenant, id string) (store.NotificationView, error) {
	var v store.NotificationView
	var sendAt, expiresAt sql.NullInt64
	var created int64
	var lane string
	var inboxAt int
	err := s.queryRow(ctx, qNotificationGet, id, tenant).Scan(&v.ID, &v.Tenant, &v.Recipient, &v.EventID, &v.Kind, &lane, &sendAt, &expiresAt, &created, &inboxAt, &v.Scope)
	if errors.Is(err, sql.ErrNoRows) {
		return v, store.ErrNotFound
	}
	if err != nil {
		return v, fmt.Errorf("read notification: %w", err)
	}
	v.Lane, v.SendAt, v.ExpiresAt, v.CreatedAt = heraldtype.Lane(lane), fromNullMs(sendAt), fromNullMs(expiresAt), fromMs(created)
	v.Now = s.clock.Now()
	rows, err := s.query(ctx, qNotificationSends, id)
	if err != nil {
		return v, fmt.Errorf("read planned sends: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var send plannedSend
		if err := rows.Scan(send.dest()...); err != nil {
			return v, fmt.Errorf("scan planned send: %w", err)
		}
		if dv, ok := send.view(); ok {
			v.Deliveries = append(v.Deliveries, dv)
		}
	}
	v.Deliveries = store.WithInboxSend(v, inboxAt)
	v.Deliveries = store.WithPlannedSteps(v.ID, v.Deliveries) // a lazy chain's later steps (fallback.go)
	return v, rows.Err()
}

// NotificationCancelMark marks a tenant's notification cancelled, for its
// sends' claims (qNotificationCancelMark; qDeliveryClaimInsert,
// qDeliveryRetryCancelled).
func (s *Store) NotificationCancelMark(ctx context.Context, tenant, id string) error {
	var n int64
	err := s.w.do(ctx, func(tx wtx) error {
		r, err := tx.Exec(qNotificationCancelMark, s.now(), id, tenant)
		if err != nil {
			return err
		}
		n, _ = r.RowsAffected()
		return nil
	})
	if err != nil {
		return fmt.Errorf("mark notification cancelled: %w", err)
	}
	if n == 0 {
		return store.ErrNotFound
	}
	return nil
}

// IdempotencyKeysSweep deletes expired keys.
func (s *Store) IdempotencyKeysSweep(ctx context.Context) (int, error) {
	var n int64
	err := s.w.do(ctx, func(tx wtx) error {
		r, err := tx.Exec(qIdemSweep, s.now())
		if err != nil {
			return err
		}
		n, _ = r.RowsAffected()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("sweep idempotency keys: %w", err)
	}
	return int(n), nil
}

package consumer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/canonical"
	"github.com/heraldhq/herald/validate"
)

// Event is one delivery of an event to one consumer.
type Event struct {
	// Consumer names the reaction (a service, or a purpose inside one):
	// "points", "analytics". Each consumer processes an event once,
	// independently of the others. Required.
	Consumer string
	// ID is the event's stable identifier, the same on every copy the
	// producer or broker sends: the producer's event id, or one derived
	// from the producer's own key for the fact ("order-1042:paid") the same
	// way for every copy. Never a delivery tag, a time or a random value
	// made on arrival: those differ per copy, and every copy would apply.
	// Required: an event without one is refused with ErrNoEventID.
	ID string
	// Payload is the event body. Its hash is recorded with the event and
	// compared on every later delivery; see PayloadHash.
	Payload []byte
}

// ErrNoEventID is the error (under errors.Is) for an event with no usable
// ID: none, or one no database can record (MaxEventIDBytes and
// Event.ID's rules). Nothing was written. Such an event can never be
// processed, so delivering it again cannot help: reject it without
// requeueing (to a dead-letter queue), and fix the producer or derive the
// ID from its key for the fact. Requeued, it came back at once, for ever.
var ErrNoEventID = errors.New("event has no ID (Event.ID is required): it can never be processed; dead-letter it, do not requeue")

// MaxEventIDBytes bounds Event.ID: with the consumer's name it stays under
// the size PostgreSQL's index on the table of processed events takes.
const MaxEventIDBytes = 1000

// badEventIDError is an ID that can never be recorded; it is ErrNoEventID
// under errors.Is. It does not repeat the ID (a producer's bug may put
// anything there).
type badEventIDError struct{ consumer, why string }

func (e *badEventIDError) Error() string {
	return fmt.Sprintf("consumer %s: the event's ID %s: it can never be processed; dead-letter it, do not requeue", e.consumer, e.why)
}

func (e *badEventIDError) Is(target error) bool { return target == ErrNoEventID }

func (ev Event) validate() error {
	switch {
	case ev.Consumer == "" || !validate.Printable(ev.Consumer) || len(ev.Consumer) > 200:
		return errors.New("consumer: Event.Consumer is required: 1..200 bytes of UTF-8 text without control characters")
	case ev.ID == "":
		return fmt.Errorf("consumer %s: %w", ev.Consumer, ErrNoEventID)
	case !utf8.ValidString(ev.ID):
		return &badEventIDError{ev.Consumer, "is not UTF-8 text"}
	case !validate.Printable(ev.ID):
		return &badEventIDError{ev.Consumer, "holds a control character (NUL, a newline…)"}
	case strings.TrimSpace(ev.ID) == "":
		return &badEventIDError{ev.Consumer, "is only spaces"}
	case len(ev.ID) > MaxEventIDBytes:
		return &badEventIDError{ev.Consumer, fmt.Sprintf("is %d bytes long, over %d", len(ev.ID), MaxEventIDBytes)}
	}
	return nil
}

// errNoDB is a nil database or transaction given to the package.
var errNoDB = errors.New("consumer: nil database or transaction")

// noTx is the error for ev given with no transaction: what is wrong with
// ev first (an event without a usable ID is dead-lettered whatever else
// is wrong), else errNoDB.
func noTx(ev Event) error {
	if err := ev.validate(); err != nil {
		return err
	}
	return errNoDB
}

// Outcome says what a delivery did.
type Outcome int

const (
	// None: nothing was decided or recorded. Every error except a
	// *MismatchError comes with None.
	None Outcome = iota
	// Applied: this delivery recorded the event and ran the effect.
	Applied
	// Duplicate: a committed record with the same payload hash exists; the
	// effect did not run.
	Duplicate
	// Quarantined: a committed record with another payload hash exists; the
	// new payload was quarantined, the effect did not run, and the error is a
	// *MismatchError.
	Quarantined
)

func (o Outcome) String() string {
	switch o {
	case None:
		return "none"
	case Applied:
		return "applied"
	case Duplicate:
		return "duplicate"
	case Quarantined:
		return "quarantined"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// MismatchError reports an event id that was processed with one payload and
// delivered again with another. The new payload is in
// herald_quarantined_events; it is not in the error, which may be logged.
type MismatchError struct {
	Consumer string
	EventID  string
	// StoredHash is the hash recorded when the event was processed.
	StoredHash string
	// PayloadHash is the hash of the payload just delivered.
	PayloadHash string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("consumer %s: event %s was processed with payload sha256 %s and delivered again with %s; quarantined",
		e.Consumer, e.EventID, e.StoredHash, e.PayloadHash)
}

// PayloadHash returns the hex SHA-256 that identifies a payload: of its
// canonical JSON when it is JSON, so re-encodings of one value hash alike,
// and of the raw bytes otherwise. JSON whose canonical form would lose
// information (invalid UTF-8, escapes of lone surrogates: both decode to
// U+FFFD) is hashed raw too, so two such payloads are never taken for one.
func PayloadHash(payload []byte) string {
	b := payload
	if utf8.Valid(payload) && json.Valid(payload) {
		// A payload holding U+FFFD itself is hashed raw as well: a
		// re-encoding of it is then a mismatch, the safe side of the mistake.
		if c, err := canonical.JSON(payload); err == nil && !bytes.ContainsRune(c, utf8.RuneError) {
			b = c
		}
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// HandlePgx records ev in tx and runs effect, unless the event was processed
// before. effect does its work in tx (the caller closes over it) and must not
// end tx. The caller commits or rolls back tx afterwards:
//
//   - (Applied, nil), (Duplicate, nil): commit, then ack.
//   - (Quarantined, *MismatchError): tx holds the quarantine row and no
//     effect; commit to keep the row, then ack.
//   - (None, err) with errors.Is(err, ErrNoEventID): the event has no ID
//     and can never be processed; nothing was written. Reject it without
//     requeueing.
//   - (None, err) otherwise: the event was not processed, and nothing of it
//     is left in tx (its savepoint was rolled back). Roll back; or commit
//     the rest of tx's work, unless err says tx must be rolled back. Do not
//     ack.
func HandlePgx(ctx context.Context, tx pgx.Tx, ev Event, effect func(context.Context) error) (Outcome, error) {
	if tx == nil {
		return None, noTx(ev)
	}
	return handle(ctx, pgxTx{tx}, ev, effect)
}

// HandleSQL is HandlePgx for database/sql on PostgreSQL (the pgx driver,
// github.com/jackc/pgx/v5/stdlib).
func HandleSQL(ctx context.Context, tx *sql.Tx, ev Event, effect func(context.Context) error) (Outcome, error) {
	if tx == nil {
		return None, noTx(ev)
	}
	return handle(ctx, sqlTx{tx}, ev, effect)
}

// Beginner starts transactions: a *pgxpool.Pool or a *pgx.Conn, each
// beginning a transaction of its own. A pgx.Tx is a Beginner too: its Begin
// opens a savepoint inside it, so Process's commit only releases that
// savepoint, and the caller's own commit (or rollback) of the pgx.Tx
// decides.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

var (
	_ Beginner = (*pgxpool.Pool)(nil)
	_ Beginner = (*pgx.Conn)(nil)
)

// Process runs HandlePgx in a transaction of its own and commits it. A nil
// error means the outcome (Applied or Duplicate) is committed; a
// *MismatchError means the quarantine row is committed. Ack in both cases.
// An error that is ErrNoEventID means the event can never be processed:
// nothing was written; reject it without requeueing. Any other error means
// nothing was committed, or that the commit's outcome is unknown; do not
// ack, and the next delivery settles it.
//
// Given a pgx.Tx as db, Process works inside it (see Beginner): "committed"
// above then means kept in that transaction, which commits or rolls back
// with the caller's. Ack only after the caller's commit returned.
func Process(ctx context.Context, db Beginner, ev Event, effect func(context.Context, pgx.Tx) error) (Outcome, error) {
	if err := ev.validate(); err != nil {
		return None, err
	}
	if effect == nil {
		return None, errors.New("consumer: Process needs an effect")
	}
	if db == nil {
		return None, errNoDB
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return None, fmt.Errorf("consumer %s: event %s: begin: %w", ev.Consumer, ev.ID, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // after Commit, a no-op
	out, err := HandlePgx(ctx, tx, ev, func(ctx context.Context) error { return effect(ctx, tx) })
	return finish(ctx, ev, out, err, func(ctx context.Context) error { return tx.Commit(ctx) })
}

// ProcessSQL is Process for database/sql.
func ProcessSQL(ctx context.Context, db *sql.DB, ev Event, effect func(context.Context, *sql.Tx) error) (Outcome, error) {
	if err := ev.validate(); err != nil {
		return None, err
	}
	if effect == nil {
		return None, errors.New("consumer: ProcessSQL needs an effect")
	}
	if db == nil {
		return None, errNoDB
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return None, fmt.Errorf("consumer %s: event %s: begin: %w", ev.Consumer, ev.ID, err)
	}
	defer func() { _ = tx.Rollback() }() // after Commit, a no-op
	out, err := HandleSQL(ctx, tx, ev, func(ctx context.Context) error { return effect(ctx, tx) })
	return finish(ctx, ev, out, err, func(context.Context) error { return tx.Commit() })
}

// finish commits after an outcome worth keeping: Applied, Duplicate (nothing
// to keep, but the caller's transaction ends cleanly) and Quarantined.
func finish(ctx context.Context, ev Event, out Outcome, err error, commit func(context.Context) error) (Outcome, error) {
	var mismatch *MismatchError
	if err != nil && !errors.As(err, &mismatch) {
		return None, err
	}
	if cerr := commit(ctx); cerr != nil {
		// Not known to be committed: the quarantine too. The next delivery
		// finds the record, or finds nothing and applies the event.
		return None, fmt.Errorf("consumer %s: event %s: commit (%s): %w", ev.Consumer, ev.ID, out, cerr)
	}
	return out, err
}

// savepointRollbackTimeout bounds the clean-up after a failure, which runs
// even when the caller's context is done: a savepoint left in place would
// let a later commit keep a record without its effect.
const savepointRollbackTimeout = 10 * time.Second

func handle(ctx context.Context, q querier, ev Event, effect func(context.Context) error) (Outcome, error) {
	if err := ev.validate(); err != nil {
		return None, err
	}
	if effect == nil {
		return None, fmt.Errorf("consumer %s: event %s: no effect given", ev.Consumer, ev.ID)
	}
	if _, err := q.exec(ctx, qSavepoint); err != nil {
		return None, fmt.Errorf("consumer %s: event %s: savepoint: %w", ev.Consumer, ev.ID, err)
	}
	out, err := decide(ctx, q, ev, effect)
	var mismatch *MismatchError
	if err != nil && !errors.As(err, &mismatch) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), savepointRollbackTimeout)
		defer cancel()
		if _, rerr := q.exec(cctx, qSavepointRollback); rerr != nil {
			return None, errors.Join(err, fmt.Errorf("consumer %s: event %s: roll back to savepoint: %w; the transaction must be rolled back",
				ev.Consumer, ev.ID, rerr))
		}
		if _, rerr := q.exec(cctx, qSavepointRelease); rerr != nil {
			return None, errors.Join(err, fmt.Errorf("consumer %s: event %s: release savepoint: %w", ev.Consumer, ev.ID, rerr))
		}
		return None, err
	}
	if _, rerr := q.exec(ctx, qSavepointRelease); rerr != nil {
		// It fails on a broken connection or a cancelled context. The
		// outcome is then not reported, but record and effect still stand
		// or fall together with tx, so a commit cannot split them.
		return None, fmt.Errorf("consumer %s: event %s: release savepoint (%s): %w; the transaction must be rolled back",
			ev.Consumer, ev.ID, out, rerr)
	}
	return out, err
}

// decide is the algorithm; handle wraps it in a savepoint.
func decide(ctx context.Context, q querier, ev Event, effect func(context.Context) error) (Outcome, error) {
	hash := PayloadHash(ev.Payload)
	// The insert waits for a transaction that holds the same key; an error
	// here (a lock or statement timeout, a cancelled context) is an error,
	// never "already processed".
	n, err := q.exec(ctx, qRecord, ev.Consumer, ev.ID, hash)
	if err != nil {
		return None, fmt.Errorf("consumer %s: event %s: record: %w", ev.Consumer, ev.ID, err)
	}
	if n == 1 {
		if err := effect(ctx); err != nil {
			return None, fmt.Errorf("consumer %s: event %s: effect: %w", ev.Consumer, ev.ID, err)
		}
		return Applied, nil
	}
	// The conflicting row is committed (the insert waited for it otherwise),
	// or this transaction wrote it for an earlier copy of the event. Under
	// READ COMMITTED this new statement sees it.
	var stored string
	err = q.queryRow(ctx, qStoredHash, ev.Consumer, ev.ID).Scan(&stored)
	if errors.Is(err, pgx.ErrNoRows) || errors.Is(err, sql.ErrNoRows) {
		// Deleted between the two statements (Prune), or invisible to this
		// transaction's snapshot. Not proof of processing: retry.
		return None, fmt.Errorf("consumer %s: event %s: conflicting record not visible; retry the delivery", ev.Consumer, ev.ID)
	}
	if err != nil {
		return None, fmt.Errorf("consumer %s: event %s: read record: %w", ev.Consumer, ev.ID, err)
	}
	if stored == hash {
		return Duplicate, nil
	}
	payload := ev.Payload
	if payload == nil {
		payload = []byte{} // NOT NULL: an empty payload is still a payload
	}
	if _, err := q.exec(ctx, qQuarantine, ev.Consumer, ev.ID, hash, stored, payload); err != nil {
		return None, fmt.Errorf("consumer %s: event %s: quarantine mismatching payload: %w", ev.Consumer, ev.ID, err)
	}
	return Quarantined, &MismatchError{Consumer: ev.Consumer, EventID: ev.ID, StoredHash: stored, PayloadHash: hash}
}

// querier is what the algorithm needs from a transaction, over pgx and
// database/sql alike.
type querier interface {
	exec(ctx context.Context, sql string, args ...any) (rowsAffected int64, err error)
	queryRow(ctx context.Context, sql string, args ...any) scanner
}

type scanner interface{ Scan(dest ...any) error }

type pgxTx struct{ tx pgx.Tx }

func (t pgxTx) exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := t.tx.Exec(ctx, sql, args...)
	return tag.RowsAffected(), err
}

func (t pgxTx) queryRow(ctx context.Context, sql string, args ...any) scanner {
	return t.tx.QueryRow(ctx, sql, args...)
}

type sqlTx struct{ tx *sql.Tx }

func (t sqlTx) exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := t.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (t sqlTx) queryRow(ctx context.Context, query string, args ...any) scanner {
	return t.tx.QueryRowContext(ctx, query, args...)
}

var (
	_ querier = pgxTx{}
	_ querier = sqlTx{}
)

package consumer_test

// The example application of these tests: a points ledger. An event grants
// points to an account; the effect adds them to the balance (an atomic
// increment, since events are not ordered) and writes one ledger entry.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/heraldhq/herald/consumer"
	"github.com/heraldhq/herald/internal/testpg"
)

const ledgerSchema = `
CREATE TABLE accounts (
	id      text   PRIMARY KEY,
	balance bigint NOT NULL DEFAULT 0
);
CREATE TABLE ledger (
	id         bigserial PRIMARY KEY,
	account_id text      NOT NULL REFERENCES accounts (id),
	consumer   text      NOT NULL,
	event_id   text      NOT NULL,
	amount     bigint    NOT NULL
);
INSERT INTO accounts (id) VALUES ('acc-1'), ('acc-2');
`

// grant is the payload of a points event.
type grant struct {
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
}

func grantEvent(id, account string, amount int64) consumer.Event {
	payload, _ := json.Marshal(grant{Account: account, Amount: amount})
	return consumer.Event{Consumer: "points", ID: id, Payload: payload}
}

// execer runs one statement in the effect's transaction, whichever kind it is.
type execer func(ctx context.Context, sql string, args ...any) (rowsAffected int64, err error)

func pgxExec(tx pgx.Tx) execer {
	return func(ctx context.Context, sql string, args ...any) (int64, error) {
		tag, err := tx.Exec(ctx, sql, args...)
		return tag.RowsAffected(), err
	}
}

func sqlExec(tx *sql.Tx) execer {
	return func(ctx context.Context, query string, args ...any) (int64, error) {
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	}
}

// effect is the application's reaction to one event.
type effect func(ctx context.Context, exec execer, ev consumer.Event) error

// credit is the points ledger's effect.
func credit(ctx context.Context, exec execer, ev consumer.Event) error {
	var g grant
	if err := json.Unmarshal(ev.Payload, &g); err != nil {
		return fmt.Errorf("decode grant: %w", err)
	}
	n, err := exec(ctx, `UPDATE accounts SET balance = balance + $2 WHERE id = $1`, g.Account, g.Amount)
	if err != nil {
		return fmt.Errorf("credit %s: %w", g.Account, err)
	}
	if n != 1 {
		return fmt.Errorf("credit %s: no such account", g.Account)
	}
	if _, err := exec(ctx, `INSERT INTO ledger (account_id, consumer, event_id, amount) VALUES ($1, $2, $3, $4)`,
		g.Account, ev.Consumer, ev.ID, g.Amount); err != nil {
		return fmt.Errorf("ledger entry: %w", err)
	}
	return nil
}

// bundle is one test's database: a fresh schema with the ledger and the
// consumer tables, and both kinds of connection pool on it.
type bundle struct {
	url  string
	pool *pgxpool.Pool
	db   *sql.DB
}

// maxConns lets the 20 concurrent deliveries of a test each hold a connection.
const maxConns = 24

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{url: testpg.Schema(t)}
	b.open(t)
	if err := consumer.Migrate(t.Context(), b.pool); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(t.Context(), ledgerSchema); err != nil {
		t.Fatalf("ledger schema: %v", err)
	}
	return b
}

// open connects (again) to the bundle's schema.
func (b *bundle) open(t *testing.T) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(b.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", b.url)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(maxConns)
	b.pool, b.db = pool, db
	t.Cleanup(func() {
		pool.Close()
		_ = db.Close()
	})
}

// restart drops every connection, as a process that dies does, and opens
// new ones, as its replacement does.
func (b *bundle) restart(t *testing.T) {
	t.Helper()
	b.pool.Close()
	_ = b.db.Close()
	b.open(t)
}

func (b *bundle) balance(t *testing.T, account string) int64 {
	t.Helper()
	var n int64
	if err := b.pool.QueryRow(t.Context(), `SELECT balance FROM accounts WHERE id = $1`, account).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (b *bundle) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(t.Context(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func (b *bundle) ledgerEntries(t *testing.T) int {
	return b.count(t, `SELECT count(*) FROM ledger`)
}

func (b *bundle) records(t *testing.T) int {
	return b.count(t, `SELECT count(*) FROM herald_consumed_events`)
}

// path is one way an application drives the package: Process or ProcessSQL
// (the package owns the transaction), or HandlePgx or HandleSQL in the
// application's own transaction, committed as the package doc says.
type path struct {
	name    string
	deliver func(ctx context.Context, b *bundle, ev consumer.Event, eff effect) (consumer.Outcome, error)
}

var paths = []path{
	{"Process", func(ctx context.Context, b *bundle, ev consumer.Event, eff effect) (consumer.Outcome, error) {
		return consumer.Process(ctx, b.pool, ev, func(ctx context.Context, tx pgx.Tx) error {
			return eff(ctx, pgxExec(tx), ev)
		})
	}},
	{"ProcessSQL", func(ctx context.Context, b *bundle, ev consumer.Event, eff effect) (consumer.Outcome, error) {
		return consumer.ProcessSQL(ctx, b.db, ev, func(ctx context.Context, tx *sql.Tx) error {
			return eff(ctx, sqlExec(tx), ev)
		})
	}},
	{"HandlePgx", func(ctx context.Context, b *bundle, ev consumer.Event, eff effect) (consumer.Outcome, error) {
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			return consumer.None, err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		out, err := consumer.HandlePgx(ctx, tx, ev, func(ctx context.Context) error {
			return eff(ctx, pgxExec(tx), ev)
		})
		return commitUnlessFailed(out, err, func() error { return tx.Commit(ctx) })
	}},
	{"HandleSQL", func(ctx context.Context, b *bundle, ev consumer.Event, eff effect) (consumer.Outcome, error) {
		tx, err := b.db.BeginTx(ctx, nil)
		if err != nil {
			return consumer.None, err
		}
		defer func() { _ = tx.Rollback() }()
		out, err := consumer.HandleSQL(ctx, tx, ev, func(ctx context.Context) error {
			return eff(ctx, sqlExec(tx), ev)
		})
		return commitUnlessFailed(out, err, tx.Commit)
	}},
}

// commitUnlessFailed is the application's side of HandlePgx and HandleSQL:
// commit after an outcome and after a mismatch (to keep the quarantine row),
// roll back after any other error.
func commitUnlessFailed(out consumer.Outcome, err error, commit func() error) (consumer.Outcome, error) {
	var mismatch *consumer.MismatchError
	if err != nil && !errors.As(err, &mismatch) {
		return out, err
	}
	if cerr := commit(); cerr != nil {
		return consumer.None, cerr
	}
	return out, err
}

// forEachPath runs test once per path, each in a fresh schema.
func forEachPath(t *testing.T, test func(t *testing.T, b *bundle, p path)) {
	t.Helper()
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			test(t, setup(t), p)
		})
	}
}

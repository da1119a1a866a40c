// Package testdb opens a fresh, migrated store of either driver for a test,
// with a way to reach its database behind the store's back: to break a row
// on purpose, or to read what the tables hold afterwards.
package testdb

import (
	"context"
	"database/sql"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/internal/testsqlite"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/postgres"
	"github.com/heraldhq/herald/store/sqlite"
)

// Drivers are the drivers Open takes.
var Drivers = []string{"sqlite", "postgres"}

// DB is a store on a fresh database, closed when the test ends.
type DB struct {
	Store store.Store
	// Database names it as the config's database does: sqlite:PATH, or a
	// postgres URL (of a fresh schema).
	Database string
	// db is Exec's and Count's handle, of its own beside the store's:
	// sql.Open connects at the first query, and its idle connections are
	// kept for the test's next call (on PostgreSQL each new session costs
	// the server tens of milliseconds of CPU; package testpg says more).
	db *sql.DB
}

// Open opens a store of driver ("sqlite": a file in t.TempDir();
// "postgres": a fresh schema, skipping the test without a server) on clk
// (nil: the store's default).
func Open(t testing.TB, driver string, clk clock.Clock) *DB {
	t.Helper()
	ctx := context.Background()
	d := &DB{}
	var sqlDriver, dsn string
	switch driver {
	case "sqlite":
		path := testsqlite.Path(t)
		s, err := sqlite.Open(ctx, path, sqlite.Options{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		d.Store, d.Database, sqlDriver, dsn = s, "sqlite:"+path, "sqlite", sqlite.DSN(path)
	case "postgres":
		url := testpg.Schema(t)
		s, err := postgres.Open(ctx, url, postgres.Options{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		d.Store, d.Database, sqlDriver, dsn = s, url, "pgx", url
	default:
		t.Fatalf("testdb: no driver %q", driver)
	}
	t.Cleanup(func() { d.Store.Close() })
	db, err := sql.Open(sqlDriver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() }) // before the store's
	d.db = db
	return d
}

// Exec runs query (no parameters; SQL both drivers accept) on the
// database; an error fails the test.
func (d *DB) Exec(t testing.TB, query string) {
	t.Helper()
	if _, err := d.db.Exec(query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// Count runs a query that answers one number.
func (d *DB) Count(t testing.TB, query string) int {
	t.Helper()
	var n int
	if err := d.db.QueryRow(query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

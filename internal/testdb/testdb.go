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
	driver   string
	dsn      string
}

// Open opens a store of driver ("sqlite": a file in t.TempDir();
// "postgres": a fresh schema, skipping the test without a server) on clk
// (nil: the store's default).
func Open(t testing.TB, driver string, clk clock.Clock) *DB {
	t.Helper()
	ctx := context.Background()
	d := &DB{driver: driver}
	switch driver {
	case "sqlite":
		path := testsqlite.Path(t)
		s, err := sqlite.Open(ctx, path, sqlite.Options{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		d.Store, d.Database, d.dsn = s, "sqlite:"+path, sqlite.DSN(path)
	case "postgres":
		url := testpg.Schema(t)
		s, err := postgres.Open(ctx, url, postgres.Options{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		d.Store, d.Database, d.dsn, d.driver = s, url, url, "pgx"
	default:
		t.Fatalf("testdb: no driver %q", driver)
	}
	t.Cleanup(func() { d.Store.Close() })
	return d
}

// conn opens a database/sql connection of its own.
func (d *DB) conn(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open(d.driver, d.dsn)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// Exec runs query (no parameters; SQL both drivers accept) on the
// database; an error fails the test.
func (d *DB) Exec(t testing.TB, query string) {
	t.Helper()
	db := d.conn(t)
	defer db.Close()
	if _, err := db.Exec(query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// Count runs a query that answers one number.
func (d *DB) Count(t testing.TB, query string) int {
	t.Helper()
	db := d.conn(t)
	defer db.Close()
	var n int
	if err := db.QueryRow(query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

package sqlite_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/internal/testsqlite"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/sqlite"
	"github.com/heraldhq/herald/store/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	var paths sync.Map // store → its file, for Exec and Query
	// open opens a second connection pool on s's file.
	open := func(t *testing.T, s store.Store) *sql.DB {
		t.Helper()
		path, _ := paths.Load(s)
		db, err := sql.Open("sqlite", sqlite.DSN(path.(string)))
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	storetest.Run(t, storetest.Harness{Open: func(t *testing.T, clk clock.Clock) store.Store {
		path := testsqlite.Path(t)
		s, err := sqlite.Open(context.Background(), path, sqlite.Options{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		paths.Store(s, path)
		t.Cleanup(func() { s.Close(); paths.Delete(s) })
		return s
	}, Exec: func(t *testing.T, s store.Store, query string) {
		t.Helper()
		db := open(t, s)
		defer db.Close()
		if _, err := db.Exec(query); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
	}, Query: func(t *testing.T, s store.Store, query string) [][]string {
		t.Helper()
		db := open(t, s)
		defer db.Close()
		return storetest.TextRows(t, db, query)
	}, TryExec: func(t *testing.T, s store.Store, query string) error {
		t.Helper()
		db := open(t, s)
		defer db.Close()
		_, err := db.Exec(query)
		return err
	}, Reopen: func(t *testing.T, s store.Store, clk clock.Clock) store.Store {
		t.Helper()
		path, _ := paths.Load(s)
		s2, err := sqlite.Open(context.Background(), path.(string), sqlite.Options{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s2.Close() })
		return s2
	}})
}

package postgres_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for Query

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/postgres"
	"github.com/heraldhq/herald/store/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	testpg.Require(t)
	var urls sync.Map // store → its schema's URL, for Reopen
	var dbs sync.Map  // store → a connection pool of its own on the schema, for Exec and Query
	// db returns s's second pool, opened at its first use and closed with
	// s (before its schema is dropped). One pool a store, not one a
	// statement: a new session costs the server tens of milliseconds of
	// CPU (testpg's admin pool says more).
	db := func(t *testing.T, s store.Store) *sql.DB {
		t.Helper()
		if db, ok := dbs.Load(s); ok {
			return db.(*sql.DB)
		}
		url, _ := urls.Load(s)
		db, err := sql.Open("pgx", url.(string))
		if err != nil {
			t.Fatal(err)
		}
		dbs.Store(s, db)
		return db
	}
	storetest.Run(t, storetest.Harness{Open: func(t *testing.T, clk clock.Clock) store.Store {
		// A fresh schema per test; it is dropped after the store closes.
		url := testpg.Schema(t)
		s, err := postgres.Open(context.Background(), url, postgres.Options{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		urls.Store(s, url)
		t.Cleanup(func() {
			if db, ok := dbs.LoadAndDelete(s); ok {
				db.(*sql.DB).Close()
			}
			s.Close()
			urls.Delete(s)
		})
		return s
	}, Exec: func(t *testing.T, s store.Store, query string) {
		t.Helper()
		if _, err := db(t, s).Exec(query); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
	}, Query: func(t *testing.T, s store.Store, query string) [][]string {
		t.Helper()
		return storetest.TextRows(t, db(t, s), query)
	}, TryExec: func(t *testing.T, s store.Store, query string) error {
		t.Helper()
		_, err := db(t, s).Exec(query)
		return err
	}, Reopen: func(t *testing.T, s store.Store, clk clock.Clock) store.Store {
		t.Helper()
		url, _ := urls.Load(s)
		s2, err := postgres.Open(context.Background(), url.(string), postgres.Options{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s2.Close() })
		return s2
	}})
}

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
	var urls sync.Map // store → its schema's URL, for Exec and Query
	// open opens a second connection pool on s's schema.
	open := func(t *testing.T, s store.Store) *sql.DB {
		t.Helper()
		url, _ := urls.Load(s)
		db, err := sql.Open("pgx", url.(string))
		if err != nil {
			t.Fatal(err)
		}
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
		t.Cleanup(func() { s.Close(); urls.Delete(s) })
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
		url, _ := urls.Load(s)
		s2, err := postgres.Open(context.Background(), url.(string), postgres.Options{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s2.Close() })
		return s2
	}})
}

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
	// schemas: store → its schema's URL (for Reopen) and a database/sql
	// pool of its own on it (for Exec and Query), closed with the store,
	// before its schema is dropped: one pool a store, not one a statement,
	// since a new session costs the server tens of milliseconds of CPU
	// (testpg's admin pool says more).
	type schema struct {
		url string
		db  *sql.DB
	}
	var schemas sync.Map
	of := func(s store.Store) schema {
		sc, _ := schemas.Load(s)
		return sc.(schema)
	}
	storetest.Run(t, storetest.Harness{Open: func(t *testing.T, clk clock.Clock) store.Store {
		// A fresh schema per test; it is dropped after the store closes.
		url := testpg.Schema(t)
		s, err := postgres.Open(context.Background(), url, postgres.Options{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		db, err := sql.Open("pgx", url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close(); schemas.Delete(s) }) // before the store's
		schemas.Store(s, schema{url, db})
		return s
	}, Exec: func(t *testing.T, s store.Store, query string) {
		t.Helper()
		if _, err := of(s).db.Exec(query); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
	}, Query: func(t *testing.T, s store.Store, query string) [][]string {
		t.Helper()
		return storetest.TextRows(t, of(s).db, query)
	}, TryExec: func(t *testing.T, s store.Store, query string) error {
		t.Helper()
		_, err := of(s).db.Exec(query)
		return err
	}, Reopen: func(t *testing.T, s store.Store, clk clock.Clock) store.Store {
		t.Helper()
		s2, err := postgres.Open(context.Background(), of(s).url, postgres.Options{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s2.Close() })
		return s2
	}})
}

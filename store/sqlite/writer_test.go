package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/heraldhq/herald/store/storetest"
)

// kvDB is a writer's database of one connection, as Open's, with one
// table kv (k TEXT PRIMARY KEY, v TEXT).
func kvDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", dsn(filepath.Join(t.TempDir(), "w.db"), false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE kv (k TEXT PRIMARY KEY, v TEXT)`); err != nil {
		t.Fatal(err)
	}
	return db
}

func TestWriterIsolatesAFailingOperation(t *testing.T) {
	t.Parallel()
	db := kvDB(t)
	w := newWriter(db, newWriterStmts(db), 16)
	defer w.close()
	queued := make(chan struct{}, 64)
	w.queued = func() { queued <- struct{}{} }

	// Hold the writer busy so the next operations queue up and share a batch.
	busy, release := make(chan struct{}), make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	defer releaseOnce() // before w.close, which waits for the held operation
	first := make(chan error, 1)
	go func() {
		first <- w.do(context.Background(), func(tx wtx) error { close(busy); <-release; return nil })
	}()
	storetest.Receive(t, busy, "the first operation runs")
	storetest.Receive(t, queued, "the first operation was queued")
	put := func(k string) func(tx wtx) error {
		return func(tx wtx) error { _, err := tx.Exec(`INSERT INTO kv VALUES (?, 'x')`, k); return err }
	}
	boom := errors.New("boom")
	results := make([]chan error, 3)
	ops := []func(tx wtx) error{
		put("a"),
		func(tx wtx) error { // writes, then fails: its write must not survive
			if err := put("half")(tx); err != nil {
				return err
			}
			return boom
		},
		put("b"),
	}
	for i, fn := range ops {
		results[i] = make(chan error, 1)
		go func() { results[i] <- w.do(context.Background(), fn) }()
	}
	for i := range ops { // all three queued behind the busy op
		storetest.Receive(t, queued, fmt.Sprintf("operation %d of %d was queued", i+1, len(ops)))
	}
	releaseOnce()
	if err := storetest.Receive(t, first, "the first operation returned"); err != nil {
		t.Fatal(err)
	}
	if err := storetest.Receive(t, results[0], "a returned"); err != nil {
		t.Fatalf("a: %v", err)
	}
	if err := storetest.Receive(t, results[1], "the failing operation returned"); !errors.Is(err, boom) {
		t.Fatalf("failing op: %v, want boom", err)
	}
	if err := storetest.Receive(t, results[2], "b returned"); err != nil {
		t.Fatalf("b: %v", err)
	}
	rows, err := db.Query(`SELECT k FROM kv ORDER BY k`)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if len(keys) != 2 || keys[0] != "a" || keys[1] != "b" {
		t.Fatalf("committed %v, want [a b]", keys)
	}
}

// Every query the writer caches prepares on a migrated database: the
// writer prepares each only after its first run (stmts), so a query
// broken by a migration would otherwise show only when it first runs.
func TestTheWritersQueriesPrepare(t *testing.T) {
	t.Parallel()
	s := planStore(t)
	for _, q := range writeQueries {
		st, err := s.wdb.Prepare(q)
		if err != nil {
			t.Errorf("prepare %s: %v", q, err)
			continue
		}
		st.Close()
	}
}

// A writer's query runs unprepared the first time and prepared from the
// transaction after; a query the writer does not cache is never prepared.
func TestTheWriterPreparesAQueryAfterItsFirstRun(t *testing.T) {
	t.Parallel()
	db := kvDB(t)
	const cached, other = `INSERT INTO kv (k, v) VALUES (?, 'x')`, `INSERT INTO kv (k, v) VALUES (?, 'y')`
	st := newWriterStmts(db, cached)
	w := newWriter(db, st, 16)
	defer w.close()
	prepared := func(q string) bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.m[q] != nil
	}
	if prepared(cached) {
		t.Fatal("the cached query was prepared before its first run")
	}
	for i := range 3 {
		err := w.do(context.Background(), func(tx wtx) error {
			if _, err := tx.Exec(cached, fmt.Sprint("a", i)); err != nil {
				return err
			}
			_, err := tx.Exec(other, fmt.Sprint("b", i))
			return err
		})
		if err != nil {
			t.Fatalf("write %d: %v", i+1, err)
		}
		// The writer prepares it after the first write's commit, before
		// it begins the second (the first's caller may return sooner).
		if i > 0 && !prepared(cached) {
			t.Fatalf("after write %d the cached query is not prepared", i+1)
		}
	}
	if prepared(other) {
		t.Error("a query the writer does not cache was prepared")
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM kv`).Scan(&n); err != nil || n != 6 {
		t.Fatalf("%d rows (%v), want 6", n, err)
	}
}

// A writer's query that does not prepare (here its table is not there
// yet) is tried again after its next run, and cached once it prepares.
func TestTheWriterPreparesAgainAQueryThatDidNotPrepare(t *testing.T) {
	t.Parallel()
	db := kvDB(t)
	const q = `INSERT INTO later (k) VALUES (?)`
	st := newWriterStmts(db, q)
	w := newWriter(db, st, 16)
	defer w.close()
	write := func(k string) error {
		return w.do(context.Background(), func(tx wtx) error {
			_, err := tx.Exec(q, k)
			return err
		})
	}
	if err := write("a"); err == nil {
		t.Fatal("an insert into a missing table succeeded")
	}
	if err := write("b"); err == nil {
		t.Fatal("an insert into a missing table succeeded")
	}
	if _, err := db.Exec(`CREATE TABLE later (k TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"c", "d"} {
		if err := write(k); err != nil {
			t.Fatalf("write %s: %v", k, err)
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.m[q] == nil {
		t.Fatal("the query was not prepared once its table was there")
	}
}

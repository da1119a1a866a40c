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

func TestWriterIsolatesAFailingOperation(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("sqlite", dsn(filepath.Join(t.TempDir(), "w.db"), false))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE kv (k TEXT PRIMARY KEY, v TEXT)`); err != nil {
		t.Fatal(err)
	}
	st, err := newStmts(db, "SELECT 1")
	if err != nil {
		t.Fatal(err)
	}
	w := newWriter(db, st, 16)
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

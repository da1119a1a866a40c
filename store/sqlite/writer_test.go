package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"runtime"
	"testing"
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
	st, _ := newStmts(db, "SELECT 1")
	w := newWriter(db, st, 16)
	defer w.close()

	// Hold the writer busy so the next operations queue up and share a batch.
	busy, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- w.do(context.Background(), func(tx wtx) error { close(busy); <-release; return nil })
	}()
	<-busy
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
	for len(w.ops) < len(ops) { // all three queued behind the busy op
		runtime.Gosched()
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-results[0]; err != nil {
		t.Fatalf("a: %v", err)
	}
	if err := <-results[1]; !errors.Is(err, boom) {
		t.Fatalf("failing op: %v, want boom", err)
	}
	if err := <-results[2]; err != nil {
		t.Fatalf("b: %v", err)
	}
	var keys []string
	rows, _ := db.Query(`SELECT k FROM kv ORDER BY k`)
	for rows.Next() {
		var k string
		rows.Scan(&k)
		keys = append(keys, k)
	}
	rows.Close()
	if len(keys) != 2 || keys[0] != "a" || keys[1] != "b" {
		t.Fatalf("committed %v, want [a b]", keys)
	}
}

package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
)

// stmts prepares each query once per pool. Parsing SQL is a fifth of the CPU
// an uncached statement costs in modernc.org/sqlite.
//
// The writer's pool has a single connection that its transaction holds, so
// the writer's statements are prepared up front (newStmts with queries); a
// query missing from a fixed cache runs unprepared rather than wait for a
// connection it already holds. The read pool prepares lazily.
type stmts struct {
	db    *sql.DB
	fixed bool
	mu    sync.Mutex
	m     map[string]*sql.Stmt
}

func newStmts(db *sql.DB, queries ...string) (*stmts, error) {
	s := &stmts{db: db, fixed: len(queries) > 0, m: map[string]*sql.Stmt{}}
	for _, q := range queries {
		st, err := db.Prepare(q)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("prepare %q: %w", q, err)
		}
		s.m[q] = st
	}
	return s, nil
}

// get returns the prepared statement, or nil when q must run unprepared.
func (s *stmts) get(q string) (*sql.Stmt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.m[q]; ok || s.fixed {
		return st, nil
	}
	st, err := s.db.Prepare(q)
	if err != nil {
		return nil, err
	}
	s.m[q] = st
	return st, nil
}

func (s *stmts) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.m {
		st.Close()
	}
}

// wtx is a write transaction whose statements come from the writer's cache.
type wtx struct {
	tx *sql.Tx
	st *stmts
}

func (t wtx) Exec(q string, args ...any) (sql.Result, error) {
	if st, _ := t.st.get(q); st != nil {
		return t.tx.Stmt(st).Exec(args...)
	}
	return t.tx.Exec(q, args...)
}

func (t wtx) Query(q string, args ...any) (*sql.Rows, error) {
	if st, _ := t.st.get(q); st != nil {
		return t.tx.Stmt(st).Query(args...)
	}
	return t.tx.Query(q, args...)
}

func (t wtx) QueryRow(q string, args ...any) *sql.Row {
	if st, _ := t.st.get(q); st != nil {
		return t.tx.Stmt(st).QueryRow(args...)
	}
	return t.tx.QueryRow(q, args...)
}

// read runs a cached read statement on the read pool.
func (s *Store) queryRow(ctx context.Context, q string, args ...any) *sql.Row {
	if st, _ := s.rst.get(q); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return s.rdb.QueryRowContext(ctx, q, args...)
}

func (s *Store) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	st, err := s.rst.get(q)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

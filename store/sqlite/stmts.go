package sqlite

import (
	"context"
	"database/sql"
	"sync"
)

// stmts prepares each query once per pool. Parsing SQL is a fifth of the CPU
// an uncached statement costs in modernc.org/sqlite.
//
// The writer's pool has a single connection that its transaction holds, so
// a writer's statement cannot be prepared when a transaction first asks for
// it: it runs unprepared that once, and the writer prepares it after the
// transaction ended (prepareHeld), when the connection is free. Only the
// queries named at newWriterStmts are cached there (writeQueries); any other runs
// unprepared each time. The read pool prepares every query when first asked.
//
// The writer once prepared all of writeQueries at open. Under the race
// detector, which instruments the SQLite engine, that was about 110 ms of
// CPU an open, most of a test's store set-up, for statements most tests
// never run; TestTheWritersQueriesPrepare checks them all instead.
type stmts struct {
	db *sql.DB
	// known is set for the writer's cache only (newWriterStmts), which
	// prepares between transactions: the queries it takes, true until
	// first asked for; held: those asked for and not yet prepared.
	known map[string]bool
	mu    sync.Mutex
	m     map[string]*sql.Stmt
	held  []string
}

// newStmts is a read pool's cache: it prepares any query when first asked.
func newStmts(db *sql.DB) *stmts {
	return &stmts{db: db, m: map[string]*sql.Stmt{}}
}

// newWriterStmts is the writer's cache of queries.
func newWriterStmts(db *sql.DB, queries ...string) *stmts {
	s := &stmts{db: db, known: make(map[string]bool, len(queries)), m: map[string]*sql.Stmt{}}
	for _, q := range queries {
		s.known[q] = true
	}
	return s
}

// get returns the prepared statement, or nil when q must run unprepared.
func (s *stmts) get(q string) (*sql.Stmt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.m[q]; ok {
		return st, nil
	}
	if s.known != nil { // the writer's: never prepared inside its transaction
		if s.known[q] {
			s.known[q] = false // held once
			s.held = append(s.held, q)
		}
		return nil, nil
	}
	st, err := s.db.Prepare(q)
	if err != nil {
		return nil, err
	}
	s.m[q] = st
	return st, nil
}

// prepareHeld prepares the writer's statements that ran unprepared since
// the last call; the writer calls it between transactions. One that does
// not prepare runs unprepared again at its next use and is tried again
// after it (its failure, if it lasts, is that run's error too).
func (s *stmts) prepareHeld() {
	s.mu.Lock()
	held := s.held
	s.held = nil
	s.mu.Unlock()
	for _, q := range held {
		st, err := s.db.Prepare(q)
		s.mu.Lock()
		if err != nil {
			s.known[q] = true
		} else {
			s.m[q] = st
		}
		s.mu.Unlock()
	}
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

package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sync"

	"github.com/heraldhq/herald/store"
)

// writer is SQLite's single writer with group commit.
//
// SQLite admits one writer at a time, and with synchronous=FULL every commit
// is an fsync. So every write goes through one goroutine that owns the only
// write connection: it takes whatever operations are waiting (up to
// maxBatch), runs each inside its own SAVEPOINT in one transaction, and
// commits once. An operation that fails rolls back to its savepoint and
// fails alone; a failed commit fails them all. Nothing waits for a timer: an
// operation that arrives while the writer is idle is committed at once, and
// operations that arrive during a commit share the next one.
//
// A caller always waits for its operation's result, even if its context is
// cancelled after the operation was queued: it must know whether it committed.
// An operation whose context is already done when its turn comes is skipped.
type writer struct {
	db       *sql.DB
	ops      chan *writeOp
	maxBatch int

	closeOnce sync.Once
	quit      chan struct{}
	done      chan struct{}
}

type writeOp struct {
	ctx context.Context
	fn  func(tx *sql.Tx) error
	err chan error
}

func newWriter(db *sql.DB, maxBatch int) *writer {
	w := &writer{
		db: db, ops: make(chan *writeOp, 4*maxBatch), maxBatch: maxBatch,
		quit: make(chan struct{}), done: make(chan struct{}),
	}
	go w.loop()
	return w
}

// do runs fn in a write transaction shared with other operations and returns
// once that transaction committed or failed.
func (w *writer) do(ctx context.Context, fn func(tx *sql.Tx) error) error {
	op := &writeOp{ctx: ctx, fn: fn, err: make(chan error, 1)}
	select {
	case w.ops <- op:
	case <-w.quit:
		return store.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-op.err:
		return err
	case <-w.done:
		// The loop has exited; the op either ran before (its result is
		// waiting) or was queued too late to run.
		select {
		case err := <-op.err:
			return err
		default:
			return store.ErrClosed
		}
	}
}

func (w *writer) loop() {
	defer close(w.done)
	batch := make([]*writeOp, 0, w.maxBatch)
	for {
		select {
		case op := <-w.ops:
			batch = append(batch[:0], op)
		case <-w.quit:
			w.drain()
			return
		}
	fill:
		for len(batch) < w.maxBatch {
			select {
			case op := <-w.ops:
				batch = append(batch, op)
			default:
				break fill
			}
		}
		w.commit(batch)
	}
}

// drain fails whatever is still queued after close.
func (w *writer) drain() {
	for {
		select {
		case op := <-w.ops:
			op.err <- store.ErrClosed
		default:
			return
		}
	}
}

func (w *writer) commit(batch []*writeOp) {
	errs := make([]error, len(batch))
	tx, err := w.db.BeginTx(context.Background(), nil)
	if err != nil {
		for _, op := range batch {
			op.err <- fmt.Errorf("begin write transaction: %w", err)
		}
		return
	}
	ran := 0
	for i, op := range batch {
		if err := op.ctx.Err(); err != nil {
			errs[i] = err
			continue
		}
		errs[i] = runInSavepoint(tx, op.fn)
		ran++
	}
	if ran == 0 {
		_ = tx.Rollback()
	} else if err := tx.Commit(); err != nil {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = fmt.Errorf("commit write transaction: %w", err)
			}
		}
	}
	for i, op := range batch {
		op.err <- errs[i]
	}
}

func runInSavepoint(tx *sql.Tx, fn func(tx *sql.Tx) error) error {
	if _, err := tx.Exec("SAVEPOINT op"); err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	if err := fn(tx); err != nil {
		if _, rbErr := tx.Exec("ROLLBACK TO op"); rbErr != nil {
			return fmt.Errorf("%w (and rollback to savepoint: %v)", err, rbErr)
		}
		_, _ = tx.Exec("RELEASE op")
		return err
	}
	if _, err := tx.Exec("RELEASE op"); err != nil {
		return fmt.Errorf("release savepoint: %w", err)
	}
	return nil
}

func (w *writer) close() {
	w.closeOnce.Do(func() { close(w.quit) })
	<-w.done
}

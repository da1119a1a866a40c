package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/heraldhq/herald/store"
)

// writer is SQLite's single writer with group commit.
//
// SQLite admits one writer at a time, and with synchronous=FULL every commit
// is an fsync. So every write goes through one goroutine that owns the only
// write connection: it takes whatever operations are waiting (up to
// maxBatch), runs them in one transaction and commits once. If any operation
// fails, the whole batch is rolled back and each operation runs again alone,
// in its own transaction, so one failure cannot undo or half-apply another
// (operations therefore reset their outputs when they start). A failed
// commit fails the batch. Nothing waits for a timer: an operation that
// arrives while the writer is idle is committed at once, and operations that
// arrive during a commit share the next one.
//
// A caller always waits for its operation's result, even if its context is
// cancelled after the operation was queued: it must know whether it committed.
// An operation whose context is already done when its turn comes is skipped.
type writer struct {
	db       *sql.DB
	st       *stmts
	ops      chan *writeOp
	maxBatch int
	// queued, when set (tests), is called for each operation queued.
	queued func()

	closeOnce sync.Once
	quit      chan struct{}
	done      chan struct{}
}

type writeOp struct {
	ctx     context.Context
	fn      func(tx wtx) error
	err     chan error
	soloErr error
}

func newWriter(db *sql.DB, st *stmts, maxBatch int) *writer {
	w := &writer{
		db: db, st: st, ops: make(chan *writeOp, 4*maxBatch), maxBatch: maxBatch,
		quit: make(chan struct{}), done: make(chan struct{}),
	}
	go w.loop()
	return w
}

// do runs fn in a write transaction shared with other operations and returns
// once that transaction committed or failed.
func (w *writer) do(ctx context.Context, fn func(tx wtx) error) error {
	op := &writeOp{ctx: ctx, fn: fn, err: make(chan error, 1)}
	select {
	case w.ops <- op:
		if w.queued != nil {
			w.queued()
		}
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
		w.st.prepareHeld()
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
	live := batch[:0:0]
	for i, op := range batch {
		if err := op.ctx.Err(); err != nil {
			errs[i] = err
			continue
		}
		live = append(live, op)
	}
	if len(live) > 0 {
		if err := w.run(live); err != nil {
			if errors.Is(err, errOpFailed) {
				// Rerun each alone so the failure stays with its operation.
				for _, op := range live {
					op.soloErr = w.run([]*writeOp{op})
				}
			} else {
				for _, op := range live {
					op.soloErr = err
				}
			}
		}
	}
	for i, op := range batch {
		if errs[i] == nil {
			errs[i] = op.soloErr
		}
		op.err <- errs[i]
	}
}

var errOpFailed = errors.New("an operation failed")

// run executes ops in one transaction. For a single op it returns the op's
// own error; for several, errOpFailed if any op failed (nothing committed).
func (w *writer) run(ops []*writeOp) error {
	tx, err := w.db.BeginTx(context.Background(), nil)
	if err != nil {
		return fmt.Errorf("begin write transaction: %w", err)
	}
	t := wtx{tx: tx, st: w.st}
	for _, op := range ops {
		if err := op.fn(t); err != nil {
			_ = tx.Rollback()
			if len(ops) == 1 {
				return err
			}
			return errOpFailed
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit write transaction: %w", err)
	}
	return nil
}

func (w *writer) close() {
	w.closeOnce.Do(func() { close(w.quit) })
	<-w.done
	w.st.close()
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// pipeline is group commit for the hot single statements (intake creates,
// delivery claims and results, fenced outbox writes, the sender's reads).
//
// Each of those statements is autocommitted on its own, so one notification
// used to cost several commits, each a WAL flush. The pipeline instead
// collects the statements that goroutines are waiting to run and sends them
// as one pgx batch: one round trip, and — because PostgreSQL runs a pipeline
// up to its Sync in one implicit transaction — one commit (two when the
// batch holds result writes and other statements: splitLater). Nothing waits for
// a timer: a statement that arrives while a worker is free runs at once and
// alone; statements that arrive while the workers are busy share the next
// batch.
//
// Every statement sent this way is written to be correct in any company: it
// is conditional (ON CONFLICT, fenced WHERE clauses) and sees the writes of
// the statements before it in the batch, so two copies of one message in one
// batch behave as two concurrent transactions would — the second finds the
// first's row. If any statement fails on the server, the implicit
// transaction aborted and nothing in the batch committed: each statement is
// then run again alone, so the failure stays with its own caller; the same
// when the batch failed before anything reached the server (a statement
// whose arguments cannot be encoded, say). A lost
// connection is as ambiguous for a batch as for a single statement (it may
// or may not have committed) and is reported to every caller, as it would be
// to one.
//
// A caller always waits for its statement's outcome, even if its context is
// cancelled meanwhile: it must know whether it committed. A statement whose
// context is done before its batch is sent is skipped.
//
// Statements of one kind may also be merged: a caller that names a merge
// (QueryRowMerged) lets the worker run all such statements of a batch as one
// set-based statement, which PostgreSQL plans, starts and executes once for
// all of them, in the batch position of the first. The merged statement
// must be equivalent to running the single ones in order in one
// transaction, and must not depend on the statements queued between them
// (nor they on it); each caller keeps its single statement, which runs
// alone if the batch is rerun. Merged are intake's creates (createMerge),
// the sender's delivery claims (claimMerge; claimTakeMerge under an event
// key), its result writes of sends on no chain (recordMerge;
// recordNoChainMerge for jobs that came as messages) and its profile
// reads (profileMerge). The db transport's
// result writes are marked later: in a batch with other statements they
// run after those committed, in a transaction of their own (splitLater),
// so a send's delivery claim, which its slot waits for, never waits for
// them. So do the marketing lane's result and decision writes on either
// transport (laterRow): a campaign's can wait on a lock for a second.
type pipeline struct {
	pool     *pgxpool.Pool
	ops      chan *pipeOp
	maxBatch int
	timeout  time.Duration

	// queued, when set (tests), is called for each statement queued;
	// taken is told the size of each batch a worker takes; merged, the
	// number of statements each merged statement stands for; rerun, the size
	// of each batch rerun statement by statement.
	queued func()
	taken  func(n int)
	merged func(n int)
	rerun  func(n int)

	quitOnce sync.Once
	quit     chan struct{}
	stopped  chan struct{} // closed once every worker has exited
	wg       sync.WaitGroup
}

type pipeOp struct {
	ctx  context.Context
	sql  string
	args []any
	exec bool
	// merge, when set, may run this op together with the others of the
	// batch that name it; in is this op's input for it.
	merge *merge
	in    any
	// later, as a merge's later: run after the batch's other statements
	// committed (a campaign's writes, laterRow).
	later bool
	dest  []any             // QueryRow: where to scan
	tag   pgconn.CommandTag // Exec: the command tag
	err   error
	done  chan struct{}
}

func newPipeline(pool *pgxpool.Pool, workers, maxBatch int) *pipeline {
	p := &pipeline{
		pool: pool, ops: make(chan *pipeOp, workers*maxBatch), maxBatch: maxBatch, timeout: 30 * time.Second,
		quit: make(chan struct{}), stopped: make(chan struct{}),
	}
	for range workers {
		p.wg.Add(1)
		go p.work()
	}
	go func() { p.wg.Wait(); close(p.stopped) }()
	return p
}

// QueryRow returns a row whose Scan runs sql through the pipeline.
func (p *pipeline) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return &pipeRow{p: p, ctx: ctx, sql: sql, args: args}
}

// QueryRowMerged is QueryRow for a statement that m may run together with
// others of its kind; in is this statement's input for m. A nil m is
// QueryRow.
func (p *pipeline) QueryRowMerged(ctx context.Context, m *merge, in any, sql string, args ...any) pgx.Row {
	return &pipeRow{p: p, ctx: ctx, sql: sql, args: args, merge: m, in: in}
}

type pipeRow struct {
	p     *pipeline
	ctx   context.Context
	sql   string
	args  []any
	merge *merge
	in    any
	later bool
}

func (r *pipeRow) Scan(dest ...any) error {
	return r.p.do(&pipeOp{ctx: r.ctx, sql: r.sql, args: r.args, dest: dest, merge: r.merge, in: r.in, later: r.later})
}

// laterRow marks row, one of the pipeline's, to run after its batch's other
// statements committed when lane is marketing. A campaign's delivery
// writes lock their outbox rows still PUBLISHING (migration 36's triggers)
// and can meet the relay's mark of those rows in a cycle; PostgreSQL ends
// it after deadlock_timeout (a second), and every statement of the batch
// waited for it: a marketing campaign held a payment's delivery claim,
// and so its provider call, for up to a second (a shop's walk on
// RabbitMQ). Run after the others, such a wait holds only marketing's own
// writes.
func laterRow(row pgx.Row, lane heraldtype.Lane) pgx.Row {
	if r, ok := row.(*pipeRow); ok && lane == heraldtype.LaneMarketing {
		r.later = true
	}
	return row
}

// merge runs several single-row statements of one kind as one statement.
type merge struct {
	sql string
	// accept, when set, says whether ops (two or more, in batch order) may
	// share the merged statement; when it refuses, each runs its single
	// statement in the batch as any other statement does.
	accept func(ops []*pipeOp) bool
	// args builds the merged statement's arguments from the ops' inputs, in
	// the order of ops.
	args func(ops []*pipeOp) []any
	// scan reads the merged statement's rows and gives each op its row, as
	// Scan of its own statement would have.
	scan func(rows pgx.Rows, ops []*pipeOp) error
	// later marks statements whose callers hold no send's slot (the db
	// transport's result writes: the slot is free once the call returned;
	// the row still holds one of the claimer's places until its result is
	// written, of which there are the lane's concurrency again). In a batch
	// with others, they run in a transaction of their own after the others
	// committed (splitLater).
	later bool
}

// mergeArgs is one op's input to a merge: its store call's params and the
// statement's now ($1: nil for the server's clock), which the merged
// statement takes from the batch's first op.
type mergeArgs[P any] struct {
	now any
	p   P
}

// textColumns returns k text arrays of n elements each: a merged
// statement's parallel arrays, filled one op at a time (setRow).
func textColumns(k, n int) [][]string {
	cols := make([][]string, k)
	for j := range cols {
		cols[j] = make([]string, n)
	}
	return cols
}

// setRow sets element i of each of cols to the matching value.
func setRow(cols [][]string, i int, values ...string) {
	for j, v := range values {
		cols[j][i] = v
	}
}

// scanInOrder is a merge's scan for a statement that returns one row per
// op, in the ops' order, each led by the op's key, then the columns the
// op's single statement returns.
func scanInOrder(what string, key func(op *pipeOp) string) func(rows pgx.Rows, ops []*pipeOp) error {
	return func(rows pgx.Rows, ops []*pipeOp) error {
		i := 0
		for rows.Next() {
			if i == len(ops) {
				return fmt.Errorf("merged %s: more rows than statements", what)
			}
			var k string
			if err := rows.Scan(append([]any{&k}, ops[i].dest...)...); err != nil {
				return fmt.Errorf("merged %s: %w", what, err)
			}
			if want := key(ops[i]); k != want {
				return fmt.Errorf("merged %s: row %d is %s, want %s", what, i, k, want)
			}
			i++
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if i != len(ops) {
			return fmt.Errorf("merged %s: %d rows for %d statements", what, i, len(ops))
		}
		return nil
	}
}

// Exec runs sql through the pipeline.
func (p *pipeline) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	op := &pipeOp{ctx: ctx, sql: sql, args: args, exec: true}
	err := p.do(op)
	return op.tag, err
}

func (p *pipeline) do(op *pipeOp) error {
	op.done = make(chan struct{})
	select {
	case p.ops <- op:
		if p.queued != nil {
			p.queued()
		}
	case <-op.ctx.Done():
		return op.ctx.Err()
	case <-p.quit:
		return store.ErrClosed
	}
	select {
	case <-op.done:
		return op.err
	case <-p.stopped:
		// Queued as the workers exited: it ran in their drain, or not at all.
		select {
		case <-op.done:
			return op.err
		default:
			return store.ErrClosed
		}
	}
}

func (p *pipeline) work() {
	defer p.wg.Done()
	batch := make([]*pipeOp, 0, p.maxBatch)
	for {
		select {
		case op := <-p.ops:
			batch = append(batch[:0], op)
		case <-p.quit:
			p.drain()
			return
		}
	fill:
		for len(batch) < p.maxBatch {
			select {
			case op := <-p.ops:
				batch = append(batch, op)
			default:
				break fill
			}
		}
		p.run(batch)
	}
}

// drain runs what is still queued at close, one by one, so no caller is
// left waiting.
func (p *pipeline) drain() {
	for {
		select {
		case op := <-p.ops:
			p.alone(op)
			close(op.done)
		default:
			return
		}
	}
}

func (p *pipeline) run(batch []*pipeOp) {
	if p.taken != nil {
		p.taken(len(batch))
	}
	first, later := splitLater(batch)
	p.send(first)
	p.send(later)
}

// splitLater parts a batch into the statements to run first and the ones
// merges mark later, when it holds both; otherwise all run at once.
//
// A send holds one of its lane's slots from its claim until its provider
// call returns, and the call waits for its delivery claim (the fence
// against a second send) to commit. Run with the result writes of other
// sends in one transaction, the claim commits only after them: at a
// drain's pace a batch of about 29 claims and 29 results took 4.2 ms,
// most of a slot's hold. Committed first, the claims free their senders to
// call while the results run; two commits where there was one, and no
// statement waits for another that its caller does not need. Any order of
// one batch's statements is as correct as another: they come from callers
// that are each waiting, so none depends on another's write.
func splitLater(batch []*pipeOp) (first, later []*pipeOp) {
	isLater := func(op *pipeOp) bool { return op.later || (op.merge != nil && op.merge.later) }
	n := 0
	for _, op := range batch {
		if isLater(op) {
			n++
		}
	}
	if n == 0 || n == len(batch) {
		return batch, nil // most batches: nothing to part, nothing allocated
	}
	first, later = make([]*pipeOp, 0, len(batch)-n), make([]*pipeOp, 0, n)
	for _, op := range batch {
		if isLater(op) {
			later = append(later, op)
		} else {
			first = append(first, op)
		}
	}
	return first, later
}

// send runs ops as one batch, one round trip and one commit, but for those
// whose context is done by now: they are skipped.
func (p *pipeline) send(ops []*pipeOp) {
	live := ops[:0:0]
	for _, op := range ops {
		if err := op.ctx.Err(); err != nil {
			op.err = err
			close(op.done)
			continue
		}
		live = append(live, op)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		p.alone(live[0])
		close(live[0].done)
		return
	}
	b := &pgx.Batch{}
	groups := map[*merge][]*pipeOp{}
	for _, op := range live {
		if op.merge != nil {
			groups[op.merge] = append(groups[op.merge], op)
		}
	}
	for m, group := range groups {
		if len(group) > 1 && m.accept != nil && !m.accept(group) {
			delete(groups, m)
		}
	}
	for _, op := range live {
		if group := groups[op.merge]; len(group) > 1 {
			if op == group[0] {
				if p.merged != nil {
					p.merged(len(group))
				}
				queueMerged(b, op.merge, group)
			}
			continue
		}
		q := b.Queue(op.sql, op.args...)
		// Callbacks never return an error: pgx would stop reading the
		// results of statements that already ran. Each keeps its own.
		if op.exec {
			q.Fn = func(br pgx.BatchResults) error { op.tag, op.err = br.Exec(); return nil }
		} else {
			q.Fn = func(br pgx.BatchResults) error { op.err = br.QueryRow().Scan(op.dest...); return nil }
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	err := p.pool.SendBatch(ctx, b).Close()
	cancel()
	// Nothing committed if the server refused a statement (the implicit
	// transaction aborted) or if nothing ran at all: the batch failed while
	// preparing or encoding, or before anything was sent.
	var pre pgx.ErrPreprocessingBatch
	aborted := err != nil && (pgconn.SafeToRetry(err) || errors.As(err, &pre))
	for _, op := range live {
		if sqlState(op.err) != "" { // the server refused it
			aborted = true
			break
		}
	}
	if aborted && p.rerun != nil {
		p.rerun(len(live))
	}
	for _, op := range live {
		switch {
		case aborted:
			// Nothing in the batch committed: run each again alone.
			op.err = nil
			p.alone(op)
		case err != nil && op.err == nil:
			op.err = err
		}
		close(op.done)
	}
}

// queueMerged queues m's statement for ops, in the position of the first.
// If m.scan fails after the statement ran (a result that does not match the
// requests, which only a bug can cause), the batch still commits and the ops
// without a row get the error: as ambiguous for them as a lost connection.
func queueMerged(b *pgx.Batch, m *merge, ops []*pipeOp) {
	q := b.Queue(m.sql, m.args(ops)...)
	q.Fn = func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err == nil {
			err = m.scan(rows, ops)
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		if err != nil {
			for _, op := range ops {
				if op.err == nil {
					op.err = err
				}
			}
		}
		return nil
	}
}

// alone runs op as its own autocommitted statement.
func (p *pipeline) alone(op *pipeOp) {
	if op.exec {
		op.tag, op.err = p.pool.Exec(op.ctx, op.sql, op.args...)
		return
	}
	op.err = p.pool.QueryRow(op.ctx, op.sql, op.args...).Scan(op.dest...)
}

func (p *pipeline) close() {
	p.quitOnce.Do(func() { close(p.quit) })
	<-p.stopped
}

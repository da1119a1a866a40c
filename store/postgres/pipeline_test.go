package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/store/storetest"
)

// heldPipeline returns a one-worker pipeline whose worker is busy until
// release is called, so the statements queued meanwhile share one batch;
// queued reports each statement queued after the one that holds the worker.
func heldPipeline(t *testing.T) (p *pipeline, pool *pgxpool.Pool, queued <-chan struct{}, release func()) {
	t.Helper()
	url := testpg.Schema(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(context.Background(), `CREATE TABLE kv (k text PRIMARY KEY, v text)`); err != nil {
		t.Fatal(err)
	}
	p = newPipeline(pool, 1, 64)
	t.Cleanup(p.close)
	queued, release = hold(t, p, pool, 4242)
	return p, pool, queued, release
}

// hold makes p's only worker wait on an advisory lock (key) that the test
// holds on a connection of pool until release is called, so the statements
// queued meanwhile share its next batch. queued reports each statement
// queued after the one that holds the worker.
func hold(t *testing.T, p *pipeline, pool *pgxpool.Pool, key int64) (queued <-chan struct{}, release func()) {
	t.Helper()
	ctx := context.Background()
	q := make(chan struct{}, 1024)
	p.queued = func() { q <- struct{}{} }
	took := make(chan struct{}, 1)
	p.taken = func(int) {
		select {
		case took <- struct{}{}:
		default:
		}
	}
	holder, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock($1)`, key); err != nil {
		holder.Release()
		t.Fatal(err)
	}
	blocked := make(chan error, 1)
	var once sync.Once
	release = func() {
		once.Do(func() {
			_, err := holder.Exec(ctx, `SELECT pg_advisory_unlock($1)`, key)
			holder.Release()
			if err != nil {
				t.Errorf("release the advisory lock: %v", err)
			}
			if err := storetest.Receive(t, blocked, "the holding statement ended"); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(release) // before the pool closes, which waits for the holder
	go func() {
		_, err := p.Exec(ctx, `SELECT pg_advisory_lock($1), pg_advisory_unlock($1)`, key)
		blocked <- err
	}()
	storetest.Receive(t, q, "the holding statement was queued")
	storetest.Receive(t, took, "the worker took the holding statement")
	return q, release
}

// queue starts n statements and waits until all are queued behind the
// worker; the function it returns waits until they have all returned.
func queue(t *testing.T, queued <-chan struct{}, n int, run func(i int)) (wait func()) {
	t.Helper()
	done := make(chan struct{}, n)
	for i := range n {
		go func() { defer func() { done <- struct{}{} }(); run(i) }()
	}
	for i := range n { // the worker is blocked: they pile up
		storetest.Receive(t, queued, fmt.Sprintf("statement %d of %d was queued", i+1, n))
	}
	return func() {
		t.Helper()
		for i := range n {
			storetest.Receive(t, done, fmt.Sprintf("statement %d of %d returned", i+1, n))
		}
	}
}

func TestPipelineBatchIsOneTransaction(t *testing.T) {
	t.Parallel()
	p, _, queued, release := heldPipeline(t)
	xids := make([]int64, 5)
	errs := make([]error, 5)
	wait := queue(t, queued, 5, func(i int) {
		errs[i] = p.QueryRow(context.Background(), `INSERT INTO kv VALUES ('k' || $1::int, 'v') RETURNING txid_current()`, i).Scan(&xids[i])
	})
	release()
	wait()
	for i := range xids {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if xids[i] != xids[0] {
			t.Fatalf("statements ran in transactions %v, want one", xids)
		}
	}
}

func TestPipelineServerErrorStaysWithItsStatement(t *testing.T) {
	t.Parallel()
	p, pool, queued, release := heldPipeline(t)
	errs := make([]error, 3)
	wait := queue(t, queued, 3, func(i int) {
		q := `INSERT INTO kv VALUES ('k' || $1::int, 'v')`
		if i == 1 {
			q = `INSERT INTO kv VALUES ('bad' || $1::int, 1/0)` // fails on the server
		}
		_, errs[i] = p.Exec(context.Background(), q, i)
	})
	release()
	wait()
	var pgErr *pgconn.PgError
	if !errors.As(errs[1], &pgErr) {
		t.Fatalf("failing statement: %v, want its server error", errs[1])
	}
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("the others failed too: %v, %v", errs[0], errs[2])
	}
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM kv`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d rows committed (%v), want the 2 good ones", n, err)
	}
}

func TestPipelineUnsendableStatementStaysWithItsCaller(t *testing.T) {
	t.Parallel()
	p, pool, queued, release := heldPipeline(t)
	errs := make([]error, 3)
	wait := queue(t, queued, 3, func(i int) {
		var arg any = i
		if i == 1 {
			arg = struct{}{} // cannot be encoded: the batch fails before it is sent
		}
		_, errs[i] = p.Exec(context.Background(), `INSERT INTO kv VALUES ('k' || $1::int, 'v')`, arg)
	})
	release()
	wait()
	if errs[0] != nil || errs[2] != nil || errs[1] == nil {
		t.Fatalf("errs %v, want only the middle one to fail", errs)
	}
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM kv`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d rows (%v), want 2", n, err)
	}
}

func TestPipelineNoRowsIsAResultNotAFailure(t *testing.T) {
	t.Parallel()
	p, pool, queued, release := heldPipeline(t)
	errs := make([]error, 3)
	wait := queue(t, queued, 3, func(i int) {
		var v string
		q := `INSERT INTO kv VALUES ('k' || $1::int, 'v') RETURNING v`
		if i == 1 {
			q = `SELECT v FROM kv WHERE k = 'missing' || $1::int`
		}
		errs[i] = p.QueryRow(context.Background(), q, i).Scan(&v)
	})
	release()
	wait()
	if errs[0] != nil || errs[2] != nil || errs[1] == nil {
		t.Fatalf("errs %v", errs)
	}
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM kv`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d rows (%v), want 2: a statement after an empty result was lost", n, err)
	}
}

func TestPipelineCopiesOfOneClaimInOneBatch(t *testing.T) {
	t.Parallel()
	p, _, queued, release := heldPipeline(t)
	won := make([]bool, 4)
	errs := make([]error, 4)
	wait := queue(t, queued, 4, func(i int) {
		var tag pgconn.CommandTag
		tag, errs[i] = p.Exec(context.Background(), `INSERT INTO kv VALUES ('same', $1::int::text) ON CONFLICT DO NOTHING`, i)
		won[i] = tag.RowsAffected() == 1
	})
	release()
	wait()
	n := 0
	for i, w := range won {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if w {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d copies won the insert, want 1", n)
	}
}

// TestPipelineLaterStatementsCommitAfterTheOthers: in a batch of two
// statements and two of a merge marked later, the two commit on their
// own and their callers return before the later ones' statement has
// been read (its scan waits for them), which then runs in a transaction
// of its own.
func TestPipelineLaterStatementsCommitAfterTheOthers(t *testing.T) {
	t.Parallel()
	p, _, queued, release := heldPipeline(t)
	returned := make(chan int64, 2)
	later := txidsLater(func() error {
		for range 2 {
			select {
			case <-returned:
			case <-time.After(10 * time.Second):
				return errors.New("the batch's other statements had not returned when the later ones' rows were read")
			}
		}
		return nil
	})
	xids := make([]int64, 4)
	errs := make([]error, 4)
	wait := queue(t, queued, 4, func(i int) {
		ctx := context.Background()
		if i < 2 {
			errs[i] = p.QueryRow(ctx, `INSERT INTO kv VALUES ('k' || $1::int, 'v') RETURNING txid_current()`, i).Scan(&xids[i])
			returned <- xids[i]
			return
		}
		errs[i] = p.QueryRowMerged(ctx, later, fmt.Sprint("later-", i), `SELECT txid_current()`).Scan(&xids[i])
	})
	release()
	wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("statement %d: %v", i, err)
		}
	}
	if xids[0] != xids[1] || xids[2] != xids[3] || xids[2] <= xids[0] {
		t.Fatalf("transactions %v: want the first two in one, the later two in one after it", xids)
	}
}

// A marketing write that waits on a lock (a campaign's delivery write
// meeting the relay's mark of its outbox row) holds no other lane's
// statement of its batch: laterRow runs it after the others committed.
func TestPipelineAMarketingWriteWaitingOnALockHoldsNoOtherStatement(t *testing.T) {
	t.Parallel()
	p, pool, queued, release := heldPipeline(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO kv VALUES ('locked', 'v')`); err != nil {
		t.Fatal(err)
	}
	locker, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Rollback(ctx)
	if _, err := locker.Exec(ctx, `SELECT 1 FROM kv WHERE k = 'locked' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	other, marketing := make(chan error, 1), make(chan error, 1)
	queue(t, queued, 2, func(i int) {
		var x int64
		if i == 0 {
			other <- p.QueryRow(ctx, `INSERT INTO kv VALUES ('payment', 'v') RETURNING txid_current()`).Scan(&x)
			return
		}
		marketing <- laterRow(p.QueryRow(ctx, `UPDATE kv SET v = 'x' WHERE k = 'locked' RETURNING txid_current()`), heraldtype.LaneMarketing).Scan(&x)
	})
	release()
	if err := storetest.Receive(t, other, "the other lane's statement returned while the marketing write waited"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-marketing:
		t.Fatalf("the marketing write returned (%v) while the row was locked", err)
	default:
	}
	if err := locker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := storetest.Receive(t, marketing, "the marketing write returned once the lock was gone"); err != nil {
		t.Fatal(err)
	}
}

// TestPipelineAFailureInOnePartLeavesTheOther: a statement that fails on
// the server aborts only its own part of a split batch: the two beside it
// are run again alone and commit, and the later part commits as one
// transaction, not rerun.
func TestPipelineAFailureInOnePartLeavesTheOther(t *testing.T) {
	t.Parallel()
	p, pool, queued, release := heldPipeline(t)
	var mu sync.Mutex
	var reruns []int
	p.rerun = func(n int) { mu.Lock(); reruns = append(reruns, n); mu.Unlock() }
	later := txidsLater(nil)
	xids := make([]int64, 5)
	errs := make([]error, 5)
	wait := queue(t, queued, 5, func(i int) {
		ctx := context.Background()
		switch {
		case i < 2:
			_, errs[i] = p.Exec(ctx, `INSERT INTO kv VALUES ('k' || $1::int, 'v')`, i)
		case i == 2:
			_, errs[i] = p.Exec(ctx, `SELECT 1/0`)
		default:
			errs[i] = p.QueryRowMerged(ctx, later, fmt.Sprint("later-", i), `SELECT txid_current()`).Scan(&xids[i])
		}
	})
	release()
	wait()
	if errs[0] != nil || errs[1] != nil || errs[2] == nil || errs[3] != nil || errs[4] != nil {
		t.Fatalf("errors %v: want only the failing statement's", errs)
	}
	if xids[3] != xids[4] {
		t.Fatalf("the later part ran in transactions %d and %d, want one", xids[3], xids[4])
	}
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM kv`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d rows written beside the failure, %v; want 2", n, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(reruns) != "[3]" {
		t.Fatalf("batches of %v were rerun; want the first part's 3 alone", reruns)
	}
}

// txidsLater is a merge marked later whose statement gives each op (its
// input a key) the id of the transaction it ran in, the single statement's
// `SELECT txid_current()`; before, when set, runs before its rows are read
// and fails them all if it fails.
func txidsLater(before func() error) *merge {
	scan := scanInOrder("later", func(op *pipeOp) string { return op.in.(string) })
	return &merge{
		sql: `SELECT k, txid_current() FROM unnest($1::text[]) WITH ORDINALITY AS u(k, ord) ORDER BY ord`,
		args: func(ops []*pipeOp) []any {
			keys := make([]string, len(ops))
			for i, op := range ops {
				keys[i] = op.in.(string)
			}
			return []any{keys}
		},
		scan: func(rows pgx.Rows, ops []*pipeOp) error {
			if before != nil {
				if err := before(); err != nil {
					return err
				}
			}
			return scan(rows, ops)
		},
		later: true,
	}
}

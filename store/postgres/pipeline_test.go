package postgres

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/internal/testpg"
)

// heldPipeline returns a one-worker pipeline whose worker is busy until
// release is called, so the statements queued meanwhile share one batch.
func heldPipeline(t *testing.T) (p *pipeline, pool *pgxpool.Pool, release func()) {
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
	took := make(chan struct{}, 1)
	p = newPipeline(pool, 1, 64)
	p.taken = func(int) {
		select {
		case took <- struct{}{}:
		default:
		}
	}
	t.Cleanup(p.close)
	// The worker blocks on an advisory lock the test holds.
	holder, err := pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(context.Background(), `SELECT pg_advisory_lock(4242)`); err != nil {
		t.Fatal(err)
	}
	blocked := make(chan error, 1)
	go func() {
		_, err := p.Exec(context.Background(), `SELECT pg_advisory_lock(4242), pg_advisory_unlock(4242)`)
		blocked <- err
	}()
	<-took // the only worker now waits on the lock
	var once sync.Once
	release = func() {
		once.Do(func() {
			holder.Exec(context.Background(), `SELECT pg_advisory_unlock(4242)`)
			holder.Release()
			if err := <-blocked; err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(release)
	return p, pool, release
}

// queue starts n statements and waits until all are queued behind the worker.
func queue(p *pipeline, n int, run func(i int)) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); run(i) }()
	}
	for len(p.ops) < n { // the worker is blocked: they pile up
		runtime.Gosched()
	}
	return &wg
}

func TestPipelineBatchIsOneTransaction(t *testing.T) {
	t.Parallel()
	p, _, release := heldPipeline(t)
	xids := make([]int64, 5)
	errs := make([]error, 5)
	wg := queue(p, 5, func(i int) {
		errs[i] = p.QueryRow(context.Background(), `INSERT INTO kv VALUES ('k' || $1::int, 'v') RETURNING txid_current()`, i).Scan(&xids[i])
	})
	release()
	wg.Wait()
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
	p, pool, release := heldPipeline(t)
	errs := make([]error, 3)
	wg := queue(p, 3, func(i int) {
		q := `INSERT INTO kv VALUES ('k' || $1::int, 'v')`
		if i == 1 {
			q = `INSERT INTO kv VALUES ('bad' || $1::int, 1/0)` // fails on the server
		}
		_, errs[i] = p.Exec(context.Background(), q, i)
	})
	release()
	wg.Wait()
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
	p, pool, release := heldPipeline(t)
	errs := make([]error, 3)
	wg := queue(p, 3, func(i int) {
		var arg any = i
		if i == 1 {
			arg = struct{}{} // cannot be encoded: the batch fails before it is sent
		}
		_, errs[i] = p.Exec(context.Background(), `INSERT INTO kv VALUES ('k' || $1::int, 'v')`, arg)
	})
	release()
	wg.Wait()
	if errs[0] != nil || errs[2] != nil || errs[1] == nil {
		t.Fatalf("errs %v, want only the middle one to fail", errs)
	}
	var n int
	pool.QueryRow(context.Background(), `SELECT count(*) FROM kv`).Scan(&n)
	if n != 2 {
		t.Fatalf("%d rows, want 2", n)
	}
}

func TestPipelineNoRowsIsAResultNotAFailure(t *testing.T) {
	t.Parallel()
	p, pool, release := heldPipeline(t)
	errs := make([]error, 3)
	wg := queue(p, 3, func(i int) {
		var v string
		q := `INSERT INTO kv VALUES ('k' || $1::int, 'v') RETURNING v`
		if i == 1 {
			q = `SELECT v FROM kv WHERE k = 'missing' || $1::int`
		}
		errs[i] = p.QueryRow(context.Background(), q, i).Scan(&v)
	})
	release()
	wg.Wait()
	if errs[0] != nil || errs[2] != nil || errs[1] == nil {
		t.Fatalf("errs %v", errs)
	}
	var n int
	pool.QueryRow(context.Background(), `SELECT count(*) FROM kv`).Scan(&n)
	if n != 2 {
		t.Fatalf("%d rows, want 2: a statement after an empty result was lost", n)
	}
}

func TestPipelineCopiesOfOneClaimInOneBatch(t *testing.T) {
	t.Parallel()
	p, _, release := heldPipeline(t)
	won := make([]bool, 4)
	errs := make([]error, 4)
	wg := queue(p, 4, func(i int) {
		var tag pgconn.CommandTag
		tag, errs[i] = p.Exec(context.Background(), `INSERT INTO kv VALUES ('same', $1::int::text) ON CONFLICT DO NOTHING`, i)
		won[i] = tag.RowsAffected() == 1
	})
	release()
	wg.Wait()
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

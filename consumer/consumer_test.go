package consumer_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/heraldhq/herald/consumer"
)

type result struct {
	out consumer.Outcome
	err error
}

// deliverAtOnce delivers every event from its own goroutine, all released
// together by one barrier, and returns the results in no particular order.
func deliverAtOnce(t *testing.T, b *bundle, p path, evs []consumer.Event) []result {
	t.Helper()
	var ready sync.WaitGroup
	ready.Add(len(evs))
	start := make(chan struct{})
	results := make(chan result, len(evs))
	for _, ev := range evs {
		go func() {
			ready.Done()
			<-start
			out, err := p.deliver(t.Context(), b, ev, credit)
			results <- result{out, err}
		}()
	}
	ready.Wait()
	close(start)
	all := make([]result, 0, len(evs))
	for range evs {
		all = append(all, <-results)
	}
	return all
}

func TestConcurrentDuplicatesCreditOnce(t *testing.T) {
	t.Parallel()
	forEachPath(t, func(t *testing.T, b *bundle, p path) {
		const copies = 20
		evs := make([]consumer.Event, copies)
		for i := range evs {
			evs[i] = grantEvent("evt-1", "acc-1", 100)
		}
		outcomes := map[consumer.Outcome]int{}
		for _, r := range deliverAtOnce(t, b, p, evs) {
			if r.err != nil {
				t.Errorf("delivery failed: %v", r.err)
			}
			outcomes[r.out]++
		}
		if outcomes[consumer.Applied] != 1 || outcomes[consumer.Duplicate] != copies-1 {
			t.Errorf("outcomes = %v, want 1 applied and %d duplicates", outcomes, copies-1)
		}
		if got := b.balance(t, "acc-1"); got != 100 {
			t.Errorf("balance = %d, want 100 (credited once)", got)
		}
		if got := b.ledgerEntries(t); got != 1 {
			t.Errorf("ledger entries = %d, want 1", got)
		}
	})
}

func TestRedeliveryAfterCommitAndCrashBeforeAckIsDuplicate(t *testing.T) {
	t.Parallel()
	forEachPath(t, func(t *testing.T, b *bundle, p path) {
		ev := grantEvent("evt-1", "acc-1", 100)
		out, err := p.deliver(t.Context(), b, ev, credit)
		if err != nil || out != consumer.Applied {
			t.Fatalf("first delivery = %v, %v; want applied", out, err)
		}
		// The process dies after the commit, before its ack: its
		// connections go, the broker delivers the message again to the
		// process that replaces it.
		b.restart(t)
		out, err = p.deliver(t.Context(), b, ev, credit)
		if err != nil || out != consumer.Duplicate {
			t.Fatalf("redelivery = %v, %v; want duplicate", out, err)
		}
		if got := b.balance(t, "acc-1"); got != 100 {
			t.Errorf("balance = %d, want 100 (no second credit)", got)
		}
		if got := b.ledgerEntries(t); got != 1 {
			t.Errorf("ledger entries = %d, want 1", got)
		}
	})
}

func TestDifferentEventsForOneAccountAllApply(t *testing.T) {
	t.Parallel()
	forEachPath(t, func(t *testing.T, b *bundle, p path) {
		// At once, so lost updates would show: the effect must increment.
		evs := []consumer.Event{grantEvent("evt-1", "acc-1", 100), grantEvent("evt-2", "acc-1", 250)}
		for _, r := range deliverAtOnce(t, b, p, evs) {
			if r.err != nil || r.out != consumer.Applied {
				t.Errorf("delivery = %v, %v; want applied", r.out, r.err)
			}
		}
		if got := b.balance(t, "acc-1"); got != 350 {
			t.Errorf("balance = %d, want 350 (both grants)", got)
		}
		if got := b.ledgerEntries(t); got != 2 {
			t.Errorf("ledger entries = %d, want 2", got)
		}
	})
}

func TestSameIDDifferentPayloadIsQuarantined(t *testing.T) {
	t.Parallel()
	forEachPath(t, func(t *testing.T, b *bundle, p path) {
		first := grantEvent("evt-1", "acc-1", 100)
		if out, err := p.deliver(t.Context(), b, first, credit); err != nil || out != consumer.Applied {
			t.Fatalf("first delivery = %v, %v; want applied", out, err)
		}
		changed := grantEvent("evt-1", "acc-1", 500)
		for seen := 1; seen <= 2; seen++ {
			out, err := p.deliver(t.Context(), b, changed, credit)
			var mismatch *consumer.MismatchError
			if !errors.As(err, &mismatch) {
				t.Fatalf("changed payload = %v, %v; want a *MismatchError", out, err)
			}
			if out != consumer.Quarantined {
				t.Errorf("outcome = %v, want quarantined", out)
			}
			want := consumer.MismatchError{Consumer: "points", EventID: "evt-1",
				StoredHash: consumer.PayloadHash(first.Payload), PayloadHash: consumer.PayloadHash(changed.Payload)}
			if *mismatch != want {
				t.Errorf("error = %+v, want %+v", *mismatch, want)
			}

			var stored, got string
			var payload []byte
			var times int
			err = b.pool.QueryRow(t.Context(), `SELECT stored_hash, payload_hash, payload, times_seen
FROM herald_quarantined_events WHERE consumer = 'points' AND event_id = 'evt-1'`).Scan(&stored, &got, &payload, &times)
			if err != nil {
				t.Fatalf("quarantine row: %v", err)
			}
			if stored != want.StoredHash || got != want.PayloadHash || !bytes.Equal(payload, changed.Payload) || times != seen {
				t.Errorf("quarantine row = (%s, %s, %s, %d), want (%s, %s, %s, %d)",
					stored, got, payload, times, want.StoredHash, want.PayloadHash, changed.Payload, seen)
			}
		}
		if got := b.balance(t, "acc-1"); got != 100 {
			t.Errorf("balance = %d, want 100 (the changed payload applied nothing)", got)
		}
		if got := b.ledgerEntries(t); got != 1 {
			t.Errorf("ledger entries = %d, want 1", got)
		}
		// The record still holds the first payload's hash.
		if out, err := p.deliver(t.Context(), b, first, credit); err != nil || out != consumer.Duplicate {
			t.Errorf("first payload again = %v, %v; want duplicate", out, err)
		}
	})
}

func TestReencodedPayloadIsDuplicate(t *testing.T) {
	t.Parallel()
	forEachPath(t, func(t *testing.T, b *bundle, p path) {
		ev := consumer.Event{Consumer: "points", ID: "evt-1", Payload: []byte(`{"account":"acc-1","amount":100}`)}
		if out, err := p.deliver(t.Context(), b, ev, credit); err != nil || out != consumer.Applied {
			t.Fatalf("first delivery = %v, %v; want applied", out, err)
		}
		ev.Payload = []byte("{\n  \"amount\": 100,\n  \"account\": \"\\u0061cc-1\"\n}\n")
		if out, err := p.deliver(t.Context(), b, ev, credit); err != nil || out != consumer.Duplicate {
			t.Fatalf("re-encoded delivery = %v, %v; want duplicate", out, err)
		}
		if got := b.balance(t, "acc-1"); got != 100 {
			t.Errorf("balance = %d, want 100", got)
		}
	})
}

func TestDifferentConsumersAreIndependent(t *testing.T) {
	t.Parallel()
	forEachPath(t, func(t *testing.T, b *bundle, p path) {
		points := grantEvent("evt-1", "acc-1", 100)
		bonus := points
		bonus.Consumer = "bonus"
		for _, ev := range []consumer.Event{points, bonus} {
			if out, err := p.deliver(t.Context(), b, ev, credit); err != nil || out != consumer.Applied {
				t.Fatalf("%s: %v, %v; want applied", ev.Consumer, out, err)
			}
		}
		for _, ev := range []consumer.Event{points, bonus} {
			if out, err := p.deliver(t.Context(), b, ev, credit); err != nil || out != consumer.Duplicate {
				t.Fatalf("%s again: %v, %v; want duplicate", ev.Consumer, out, err)
			}
		}
		if got := b.balance(t, "acc-1"); got != 200 {
			t.Errorf("balance = %d, want 200 (once per consumer)", got)
		}
	})
}

var errBoom = errors.New("boom")

// failingEffects credit the account and then fail, in Go or in SQL (which
// aborts the transaction).
var failingEffects = []struct {
	name string
	eff  effect
	is   func(error) bool
}{
	{"GoError", func(ctx context.Context, exec execer, ev consumer.Event) error {
		if err := credit(ctx, exec, ev); err != nil {
			return err
		}
		return errBoom
	}, func(err error) bool { return errors.Is(err, errBoom) }},
	{"SQLError", func(ctx context.Context, exec execer, ev consumer.Event) error {
		if err := credit(ctx, exec, ev); err != nil {
			return err
		}
		_, err := exec(ctx, `SELECT 1 / 0`)
		return err
	}, func(err error) bool { var pg *pgconn.PgError; return errors.As(err, &pg) && pg.Code == "22012" }},
}

func TestEffectFailureRecordsNothing(t *testing.T) {
	t.Parallel()
	for _, fe := range failingEffects {
		t.Run(fe.name, func(t *testing.T) {
			t.Parallel()
			forEachPath(t, func(t *testing.T, b *bundle, p path) {
				ev := grantEvent("evt-1", "acc-1", 100)
				out, err := p.deliver(t.Context(), b, ev, fe.eff)
				if !fe.is(err) || out != consumer.None {
					t.Fatalf("failing effect = %v, %v; want none and the effect's error", out, err)
				}
				if got := b.records(t); got != 0 {
					t.Errorf("records = %d, want 0", got)
				}
				if got := b.balance(t, "acc-1"); got != 0 {
					t.Errorf("balance = %d, want 0", got)
				}
				// Later, the event is processed after all.
				if out, err := p.deliver(t.Context(), b, ev, credit); err != nil || out != consumer.Applied {
					t.Fatalf("later delivery = %v, %v; want applied", out, err)
				}
				if got := b.balance(t, "acc-1"); got != 100 {
					t.Errorf("balance = %d, want 100", got)
				}
			})
		})
	}
}

// txKind is HandlePgx or HandleSQL in a transaction the test controls.
type txKind struct {
	name  string
	begin func(t *testing.T, b *bundle) callerTx
}

// callerTx is an application's transaction: stmt runs a statement in it,
// handle calls HandlePgx or HandleSQL with eff, commit and rollback end it.
type callerTx struct {
	stmt             func(sql string) error
	handle           func(ctx context.Context, ev consumer.Event, eff effect) (consumer.Outcome, error)
	commit, rollback func() error
}

var txKinds = []txKind{
	{"HandlePgx", func(t *testing.T, b *bundle) callerTx {
		tx, err := b.pool.Begin(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		return callerTx{
			stmt: func(sql string) error { _, err := tx.Exec(t.Context(), sql); return err },
			handle: func(ctx context.Context, ev consumer.Event, eff effect) (consumer.Outcome, error) {
				return consumer.HandlePgx(ctx, tx, ev, func(ctx context.Context) error { return eff(ctx, pgxExec(tx), ev) })
			},
			commit:   func() error { return tx.Commit(t.Context()) },
			rollback: func() error { return tx.Rollback(t.Context()) },
		}
	}},
	{"HandleSQL", func(t *testing.T, b *bundle) callerTx {
		tx, err := b.db.BeginTx(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback() })
		return callerTx{
			stmt: func(sql string) error { _, err := tx.ExecContext(t.Context(), sql); return err },
			handle: func(ctx context.Context, ev consumer.Event, eff effect) (consumer.Outcome, error) {
				return consumer.HandleSQL(ctx, tx, ev, func(ctx context.Context) error { return eff(ctx, sqlExec(tx), ev) })
			},
			commit:   tx.Commit,
			rollback: tx.Rollback,
		}
	}},
}

func TestEffectFailureRecordsNothingEvenIfCallerCommits(t *testing.T) {
	t.Parallel()
	for _, fe := range failingEffects {
		for _, k := range txKinds {
			t.Run(fe.name+"/"+k.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				ev := grantEvent("evt-1", "acc-1", 100)
				tx := k.begin(t, b)
				// The caller's own write, before the event, must survive.
				if err := tx.stmt(`UPDATE accounts SET balance = balance + 7 WHERE id = 'acc-2'`); err != nil {
					t.Fatal(err)
				}
				out, err := tx.handle(t.Context(), ev, fe.eff)
				if !fe.is(err) || out != consumer.None {
					t.Fatalf("failing effect = %v, %v; want none and the effect's error", out, err)
				}
				// A careless caller commits anyway: the savepoint was rolled
				// back, so the transaction is healthy and holds nothing of
				// the event.
				if err := tx.commit(); err != nil {
					t.Fatalf("commit after the failed effect: %v", err)
				}
				if got := b.records(t); got != 0 {
					t.Errorf("records = %d, want 0", got)
				}
				if got := b.balance(t, "acc-1"); got != 0 {
					t.Errorf("balance = %d, want 0 (the partial credit was rolled back)", got)
				}
				if got := b.balance(t, "acc-2"); got != 7 {
					t.Errorf("caller's own write: balance = %d, want 7", got)
				}
				if out, err := paths[0].deliver(t.Context(), b, ev, credit); err != nil || out != consumer.Applied {
					t.Fatalf("later delivery = %v, %v; want applied", out, err)
				}
			})
		}
	}
}

// holdEvent records ev and runs its credit in a transaction it leaves open,
// and returns that transaction and its server process id.
func holdEvent(t *testing.T, b *bundle, ev consumer.Event) (pgx.Tx, uint32) {
	t.Helper()
	tx, err := b.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	out, err := consumer.HandlePgx(t.Context(), tx, ev, func(ctx context.Context) error { return credit(ctx, pgxExec(tx), ev) })
	if err != nil || out != consumer.Applied {
		t.Fatalf("holder = %v, %v; want applied", out, err)
	}
	return tx, tx.Conn().PgConn().PID()
}

// waitUntilBlocked returns once some server process waits for a lock held by
// pid: the barrier between "the second delivery is waiting" and what the
// test does next.
func waitUntilBlocked(t *testing.T, b *bundle, pid uint32) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var blocked bool
		err := b.pool.QueryRow(t.Context(),
			`SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1::int = ANY (pg_blocking_pids(pid)))`, int32(pid)).Scan(&blocked)
		if err != nil {
			t.Fatal(err)
		}
		if blocked {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no delivery came to wait for the holding transaction")
		}
		time.Sleep(2 * time.Millisecond) // poll interval, not a synchronisation
	}
}

func TestWaiterAppliesWhenHolderRollsBack(t *testing.T) {
	t.Parallel()
	forEachPath(t, func(t *testing.T, b *bundle, p path) {
		ev := grantEvent("evt-1", "acc-1", 100)
		holder, pid := holdEvent(t, b, ev)
		done := make(chan result, 1)
		go func() {
			out, err := p.deliver(t.Context(), b, ev, credit)
			done <- result{out, err}
		}()
		waitUntilBlocked(t, b, pid)
		if err := holder.Rollback(t.Context()); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil || r.out != consumer.Applied {
			t.Fatalf("waiter = %v, %v; want applied (the holder never committed)", r.out, r.err)
		}
		if got := b.balance(t, "acc-1"); got != 100 {
			t.Errorf("balance = %d, want 100", got)
		}
		if got := b.ledgerEntries(t); got != 1 {
			t.Errorf("ledger entries = %d, want 1", got)
		}
	})
}

func TestWaiterIsDuplicateWhenHolderCommits(t *testing.T) {
	t.Parallel()
	forEachPath(t, func(t *testing.T, b *bundle, p path) {
		ev := grantEvent("evt-1", "acc-1", 100)
		holder, pid := holdEvent(t, b, ev)
		done := make(chan result, 1)
		go func() {
			out, err := p.deliver(t.Context(), b, ev, credit)
			done <- result{out, err}
		}()
		waitUntilBlocked(t, b, pid)
		if err := holder.Commit(t.Context()); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil || r.out != consumer.Duplicate {
			t.Fatalf("waiter = %v, %v; want duplicate", r.out, r.err)
		}
		if got := b.balance(t, "acc-1"); got != 100 {
			t.Errorf("balance = %d, want 100", got)
		}
	})
}

func TestCancelledWaitIsNotDuplicate(t *testing.T) {
	t.Parallel()
	forEachPath(t, func(t *testing.T, b *bundle, p path) {
		ev := grantEvent("evt-1", "acc-1", 100)
		holder, pid := holdEvent(t, b, ev)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var ran atomic.Bool
		done := make(chan result, 1)
		go func() {
			out, err := p.deliver(ctx, b, ev, func(ctx context.Context, exec execer, ev consumer.Event) error {
				ran.Store(true)
				return credit(ctx, exec, ev)
			})
			done <- result{out, err}
		}()
		waitUntilBlocked(t, b, pid)
		cancel()
		r := <-done
		if r.err == nil || r.out != consumer.None || ran.Load() {
			t.Fatalf("cancelled waiter = %v, %v (effect ran: %v); want none and an error", r.out, r.err, ran.Load())
		}
		// The holder never commits: the event was not processed, and the
		// next delivery applies it.
		if err := holder.Rollback(t.Context()); err != nil {
			t.Fatal(err)
		}
		if out, err := p.deliver(t.Context(), b, ev, credit); err != nil || out != consumer.Applied {
			t.Fatalf("next delivery = %v, %v; want applied", out, err)
		}
		if got := b.balance(t, "acc-1"); got != 100 {
			t.Errorf("balance = %d, want 100", got)
		}
	})
}

func TestLockTimeoutIsNotDuplicate(t *testing.T) {
	t.Parallel()
	for _, k := range txKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ev := grantEvent("evt-1", "acc-1", 100)
			holder, _ := holdEvent(t, b, ev)

			tx := k.begin(t, b)
			if err := tx.stmt(`SET LOCAL lock_timeout = '50ms'`); err != nil {
				t.Fatal(err)
			}
			out, err := tx.handle(t.Context(), ev, credit)
			var pg *pgconn.PgError
			if !errors.As(err, &pg) || pg.Code != "55P03" || out != consumer.None {
				t.Fatalf("waiter = %v, %v; want none and lock_not_available (55P03)", out, err)
			}
			if err := tx.rollback(); err != nil {
				t.Fatal(err)
			}
			if err := holder.Rollback(t.Context()); err != nil {
				t.Fatal(err)
			}
			if out, err := paths[0].deliver(t.Context(), b, ev, credit); err != nil || out != consumer.Applied {
				t.Fatalf("next delivery = %v, %v; want applied", out, err)
			}
		})
	}
}

func TestRepeatableReadWaiterGetsSerializationFailureNotDuplicate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ev := grantEvent("evt-1", "acc-1", 100)
	holder, pid := holdEvent(t, b, ev)

	tx, err := b.pool.BeginTx(t.Context(), pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(t.Context(), `SELECT 1`); err != nil { // takes the snapshot
		t.Fatal(err)
	}
	done := make(chan result, 1)
	go func() {
		out, err := consumer.HandlePgx(t.Context(), tx, ev, func(ctx context.Context) error { return credit(ctx, pgxExec(tx), ev) })
		done <- result{out, err}
	}()
	waitUntilBlocked(t, b, pid)
	if err := holder.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := <-done
	var pg *pgconn.PgError
	if !errors.As(r.err, &pg) || pg.Code != "40001" || r.out != consumer.None {
		t.Fatalf("repeatable-read waiter = %v, %v; want none and serialization_failure (40001)", r.out, r.err)
	}
	_ = tx.Rollback(t.Context())
	if out, err := paths[0].deliver(t.Context(), b, ev, credit); err != nil || out != consumer.Duplicate {
		t.Fatalf("retry = %v, %v; want duplicate", out, err)
	}
}

func TestMismatchRolledBackIsQuarantinedAgain(t *testing.T) {
	t.Parallel()
	for _, k := range txKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			if out, err := paths[0].deliver(t.Context(), b, grantEvent("evt-1", "acc-1", 100), credit); err != nil || out != consumer.Applied {
				t.Fatalf("first delivery = %v, %v", out, err)
			}
			changed := grantEvent("evt-1", "acc-1", 500)

			tx := k.begin(t, b)
			var mismatch *consumer.MismatchError
			if _, err := tx.handle(t.Context(), changed, credit); !errors.As(err, &mismatch) {
				t.Fatalf("changed payload: %v; want a *MismatchError", err)
			}
			if err := tx.rollback(); err != nil { // the caller did not keep it…
				t.Fatal(err)
			}
			if got := b.count(t, `SELECT count(*) FROM herald_quarantined_events`); got != 0 {
				t.Fatalf("quarantine rows after rollback = %d, want 0", got)
			}

			tx = k.begin(t, b) // …and the message came again
			if _, err := tx.handle(t.Context(), changed, credit); !errors.As(err, &mismatch) {
				t.Fatalf("changed payload again: %v; want a *MismatchError", err)
			}
			if err := tx.commit(); err != nil {
				t.Fatal(err)
			}
			if got := b.count(t, `SELECT count(*) FROM herald_quarantined_events`); got != 1 {
				t.Errorf("quarantine rows after commit = %d, want 1", got)
			}
			if got := b.balance(t, "acc-1"); got != 100 {
				t.Errorf("balance = %d, want 100", got)
			}
		})
	}
}

func TestInvalidCallsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ok := grantEvent("evt-1", "acc-1", 100)
	noConsumer, noID := ok, ok
	noConsumer.Consumer = ""
	noID.ID = ""
	for name, call := range map[string]func() (consumer.Outcome, error){
		"NoConsumer": func() (consumer.Outcome, error) { return paths[0].deliver(t.Context(), b, noConsumer, credit) },
		"NoID":       func() (consumer.Outcome, error) { return paths[1].deliver(t.Context(), b, noID, credit) },
		"NoEffect":   func() (consumer.Outcome, error) { return consumer.Process(t.Context(), b.pool, ok, nil) },
		"NoEffectSQL": func() (consumer.Outcome, error) {
			return consumer.ProcessSQL(t.Context(), b.db, ok, nil)
		},
		"NoEffectTx": func() (consumer.Outcome, error) {
			tx, err := b.pool.Begin(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(context.Background()) }()
			return consumer.HandlePgx(t.Context(), tx, ok, nil)
		},
	} {
		if out, err := call(); err == nil || out != consumer.None {
			t.Errorf("%s: %v, %v; want none and an error", name, out, err)
		}
	}
	if got := b.records(t); got != 0 {
		t.Errorf("records = %d, want 0", got)
	}
}

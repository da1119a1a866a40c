package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/storetest"
)

// Tests of what the conformance suite cannot see: the server's clock, round
// trips, migrations, LISTEN/NOTIFY across stores and the leader lock.

// setup opens a store on url (a fresh schema when url is ""), closed when
// the test ends.
func setup(t *testing.T, url string, opts Options) *Store {
	t.Helper()
	if url == "" {
		url = testpg.Schema(t)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := Open(context.Background(), url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// appURL gives the store's connections their own application_name, so a
// test can find and end them.
func appURL(url, name string) string { return testpg.WithParams(url, "application_name", name) }

func uniqueName(prefix string) string {
	return strings.ToLower(ids.New(prefix, time.Now()))
}

func params(mutate func(p *store.NotificationCreateParams)) store.NotificationCreateParams {
	id := ids.New("ntf", time.Now())
	p := store.NotificationCreateParams{
		Tenant: "t1", IdempotencyKey: "key-" + id, RequestHash: "h1", IdempotencyTTL: time.Hour,
		Response: []byte(`{"id":"` + id + `"}`), ID: id, Recipient: "r1", EventID: "e1", Kind: "k",
		Lane: heraldtype.LaneTransactional, Params: json.RawMessage(`{"a":1}`),
		Channels: []heraldtype.Channel{heraldtype.ChannelWebhook},
	}
	if mutate != nil {
		mutate(&p)
	}
	return p
}

func mustCreate(t *testing.T, s *Store, p store.NotificationCreateParams) store.NotificationCreateResult {
	t.Helper()
	res, err := s.NotificationCreate(context.Background(), p)
	if err != nil {
		t.Fatalf("NotificationCreate: %v", err)
	}
	return res
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func drain(c <-chan struct{}) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

func TestServerClockDecidesWithoutATestClock(t *testing.T) {
	t.Parallel()
	for _, clk := range []clock.Clock{nil, clock.Real{}} {
		t.Run(fmt.Sprintf("%T", clk), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := setup(t, "", Options{Clock: clk})
			if s.clock != nil {
				t.Fatal("store keeps a clock: it would not use the server's")
			}
			p := params(nil)
			mustCreate(t, s, p)
			v, err := s.NotificationGet(ctx, "t1", p.ID)
			if err != nil {
				t.Fatal(err)
			}
			if d := time.Since(v.Now); d < -time.Minute || d > time.Minute || !v.Now.Equal(v.Now.UTC()) {
				t.Fatalf("view Now %v is not the server's time (local %v)", v.Now, time.Now())
			}
			if v.CreatedAt.After(v.Now) {
				t.Fatalf("created %v after now %v", v.CreatedAt, v.Now)
			}
			// A lease that ends before it starts: the owner's write is refused
			// and the sweep takes the row back, by the server's clock.
			rows, err := s.OutboxClaim(ctx, store.OutboxClaimParams{Lane: p.Lane, Owner: "w", Limit: 10, Lease: -time.Second})
			if err != nil || len(rows) != 1 {
				t.Fatalf("claim %d rows (%v)", len(rows), err)
			}
			if ok, err := s.OutboxComplete(ctx, rows[0].Fence, heraldtype.OutboxDone, ""); ok || err != nil {
				t.Fatalf("write under an expired lease: ok %v err %v", ok, err)
			}
			if n, err := s.OutboxReclaimExpired(ctx); n != 1 || err != nil {
				t.Fatalf("reclaimed %d (%v), want 1", n, err)
			}
			rows, err = s.OutboxClaim(ctx, store.OutboxClaimParams{Lane: p.Lane, Owner: "w", Limit: 10, Lease: time.Minute})
			if err != nil || len(rows) != 1 {
				t.Fatalf("second claim %d rows (%v)", len(rows), err)
			}
			if ok, err := s.OutboxComplete(ctx, rows[0].Fence, heraldtype.OutboxDone, ""); !ok || err != nil {
				t.Fatalf("owner's write: ok %v err %v", ok, err)
			}
		})
	}
}

// countingTracer counts the statements sent through the pool.
type countingTracer struct{ queries atomic.Int64 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.queries.Add(1)
	return ctx
}
func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func TestHotPathStatementCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tr := &countingTracer{}
	// One connection: every statement is prepared once and then cached, so
	// one statement is one round trip and one (implicit) transaction. Every
	// create NOTIFYs in its own statement here; under load, creates also
	// share a trailing NOTIFY, at most one per lane and NotifyInterval.
	s := setup(t, "", Options{Tracer: tr, MaxConns: 1, NotifyInterval: time.Nanosecond})
	cycle := func() {
		p := params(func(p *store.NotificationCreateParams) { p.Lane = heraldtype.LaneAlert })
		mustCreate(t, s, p)
		rows, err := s.OutboxClaim(ctx, store.OutboxClaimParams{Lane: p.Lane, Owner: "w", Limit: 10, Lease: time.Minute})
		if err != nil || len(rows) != 1 {
			t.Fatalf("claim %d (%v)", len(rows), err)
		}
		row := rows[0]
		res, err := s.DeliveryClaim(ctx, store.DeliveryClaimParams{MessageID: row.MessageID, NotificationID: p.ID, Tenant: "t1", Channel: row.Channel, Provider: "p", Owner: "w"})
		if err != nil || !res.Claimed {
			t.Fatalf("delivery claim %+v (%v)", res, err)
		}
		// The result write settles the outbox row too, as the db transport's
		// sender does.
		if res, err := s.DeliveryRecord(ctx, store.DeliveryRecordParams{MessageID: row.MessageID, Attempt: 1, State: heraldtype.DeliveryProviderAccepted,
			Owner: "w", Class: "accepted", StartedAt: time.Now(), Outbox: &row.Fence}); !res.Recorded || !res.OutboxSettled || err != nil {
			t.Fatalf("record: %+v err %v", res, err)
		}
	}
	cycle() // prepares the statements
	for _, step := range []struct {
		name string
		want int64
		run  func()
	}{
		{"CreateNew", 1, func() { mustCreate(t, s, params(nil)) }},
		// A replay reads the key that blocked it with a second statement,
		// so that a new request, the common case, reads nothing.
		{"CreateReplay", 2, func() {
			p := params(nil)
			mustCreate(t, s, p)
			tr.queries.Store(0)
			if res := mustCreate(t, s, p); res.Outcome != store.Replayed {
				t.Fatalf("outcome %v", res.Outcome)
			}
		}},
		{"CreateDedupOnly", 1, func() {
			mustCreate(t, s, params(func(p *store.NotificationCreateParams) { p.IdempotencyKey, p.DedupKey = "", "d1" }))
		}},
		{"FullCycle", 4, cycle},
	} {
		tr.queries.Store(0)
		step.run()
		if got := tr.queries.Load(); got != step.want {
			t.Errorf("%s: %d statements, want %d", step.name, got, step.want)
		}
	}
}

func TestMigrateIsSerialisedAndIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testpg.Schema(t)
	const n = 4
	versions := make([]int, n)
	errs := make([]error, n)
	start, done := make(chan struct{}), make(chan struct{}, n)
	for i := range n {
		go func() {
			<-start
			versions[i], errs[i] = Migrate(ctx, url)
			done <- struct{}{}
		}()
	}
	close(start)
	for i := range n {
		storetest.Receive(t, done, fmt.Sprintf("Migrate %d of %d returned", i+1, n))
	}
	list, err := migrationList()
	if err != nil {
		t.Fatal(err)
	}
	latest := list[len(list)-1].version
	for i := range n {
		if errs[i] != nil || versions[i] != latest {
			t.Fatalf("Migrate %d: version %d, err %v, want %d", i, versions[i], errs[i], latest)
		}
	}
	if v, err := Migrate(ctx, url); v != latest || err != nil {
		t.Fatalf("Migrate again: %d %v", v, err)
	}
	s := setup(t, url, Options{})
	var rows int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&rows); err != nil || rows != len(list) {
		t.Fatalf("schema_migrations has %d rows (%v)", rows, err)
	}
}

func TestWakeChannelsDifferPerSchemaAndFit(t *testing.T) {
	t.Parallel()
	a, _ := wakeChannels("herald", "h_1")
	b, _ := wakeChannels("herald", "h_2")
	c, _ := wakeChannels("other", "h_1")
	for _, l := range heraldtype.Lanes {
		if a[l] == b[l] || a[l] == c[l] {
			t.Errorf("lane %s: channel %q shared across schemas or databases", l, a[l])
		}
		if len(a[l]) > 63 || a[l] != strings.ToLower(a[l]) {
			t.Errorf("channel %q is not a short lower-case identifier", a[l])
		}
	}
}

func TestWakeupsCrossStoresAndSurviveAListenerDrop(t *testing.T) {
	t.Parallel()
	url := testpg.Schema(t)
	appB := uniqueName("hb")
	a := setup(t, url, Options{})
	b := setup(t, appURL(url, appB), Options{})
	expectWake := func(lane heraldtype.Lane, what string) {
		t.Helper()
		select {
		case <-b.Wakeups().C(lane):
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: store b's lane %s was not woken within 10s", what, lane)
		}
	}
	waitFor(t, 10*time.Second, "b's listener is connected", b.listening.Load)
	// The first connect wakes every lane, as every reconnect does.
	for _, l := range heraldtype.Lanes {
		expectWake(l, "the listener connected")
	}
	mustCreate(t, a, params(func(p *store.NotificationCreateParams) { p.Lane = heraldtype.LaneAlert }))
	expectWake(heraldtype.LaneAlert, "NOTIFY from another store")

	before := b.listenConns.Load()
	if n := testpg.TerminateBackends(t, appB+" listener"); n != 1 {
		t.Fatalf("terminated %d listener sessions, want 1", n)
	}
	waitFor(t, 10*time.Second, "b's listener reconnected", func() bool { return b.listenConns.Load() > before && b.listening.Load() })
	// Notifications sent while nobody listened are lost: the reconnect wakes
	// every lane.
	for _, l := range heraldtype.Lanes {
		expectWake(l, "the listener reconnected")
	}
	mustCreate(t, a, params(func(p *store.NotificationCreateParams) { p.Lane = heraldtype.LaneAlert }))
	expectWake(heraldtype.LaneAlert, "NOTIFY after the listener reconnected")
}

func TestCreatesInsideTheNotifyIntervalShareATrailingNotify(t *testing.T) {
	t.Parallel()
	url := testpg.Schema(t)
	a := setup(t, url, Options{NotifyInterval: 2 * time.Second})
	b := setup(t, url, Options{})
	wake := b.Wakeups().C(heraldtype.LaneAlert)
	waitFor(t, 10*time.Second, "b's listener is connected", b.listening.Load)
	drain(wake)
	alert := func(p *store.NotificationCreateParams) { p.Lane = heraldtype.LaneAlert }
	mustCreate(t, a, params(alert)) // NOTIFYs in its statement
	select {
	case <-wake:
	case <-time.After(10 * time.Second):
		t.Fatal("first create: b was not woken")
	}
	drain(wake)
	mustCreate(t, a, params(alert)) // inside the interval: no NOTIFY of its own
	mustCreate(t, a, params(alert))
	select {
	case <-wake:
	case <-time.After(10 * time.Second):
		t.Fatal("creates inside the interval: b was not woken")
	}
	// b may hear the NOTIFY before a's statement has returned.
	waitFor(t, 10*time.Second, "one trailing NOTIFY", func() bool { return a.notify.trailing.Load() == 1 })
}

func TestLeaderElection(t *testing.T) {
	t.Parallel()
	t.Run("ExactlyOneUntilTheLeaderCloses", func(t *testing.T) {
		t.Parallel()
		url := testpg.Schema(t)
		a := setup(t, url, Options{LeaderInterval: 50 * time.Millisecond})
		b := setup(t, url, Options{LeaderInterval: 50 * time.Millisecond})
		ctx := t.Context()
		go a.RunLeaderElection(ctx)
		go b.RunLeaderElection(ctx)
		waitFor(t, 10*time.Second, "one leader", func() bool { return a.IsLeader() || b.IsLeader() })
		leader, other := a, b
		if b.IsLeader() {
			leader, other = b, a
		}
		// The other store tries the lock again and again, and never gets it.
		tries := other.leaderTries.Load()
		waitFor(t, 10*time.Second, "the other store tried the lock 5 more times", func() bool {
			if !leader.IsLeader() || other.IsLeader() {
				t.Fatalf("leaders: the first %v, the other %v", leader.IsLeader(), other.IsLeader())
			}
			return other.leaderTries.Load() >= tries+5
		})
		if err := leader.Close(); err != nil {
			t.Fatal(err)
		}
		if leader.IsLeader() {
			t.Fatal("a closed store still says it leads")
		}
		waitFor(t, 10*time.Second, "the other store took over", other.IsLeader)
	})
	t.Run("ASchemaHasItsOwnLeader", func(t *testing.T) {
		t.Parallel()
		a := setup(t, "", Options{LeaderInterval: 50 * time.Millisecond})
		b := setup(t, "", Options{LeaderInterval: 50 * time.Millisecond})
		go a.RunLeaderElection(t.Context())
		go b.RunLeaderElection(t.Context())
		waitFor(t, 10*time.Second, "both lead their own schema", func() bool { return a.IsLeader() && b.IsLeader() })
	})
	t.Run("ALostConnectionEndsLeadership", func(t *testing.T) {
		t.Parallel()
		url := testpg.Schema(t)
		appA := uniqueName("ha")
		a := setup(t, appURL(url, appA), Options{LeaderInterval: 50 * time.Millisecond})
		b := setup(t, url, Options{LeaderInterval: 50 * time.Millisecond})
		go a.RunLeaderElection(t.Context())
		waitFor(t, 10*time.Second, "a leads", a.IsLeader)
		go b.RunLeaderElection(t.Context())
		if n := testpg.TerminateBackends(t, appA+" leader"); n != 1 {
			t.Fatalf("terminated %d leader sessions, want 1", n)
		}
		waitFor(t, 10*time.Second, "a noticed its lost connection", func() bool { return a.leaderLost.Load() == 1 })
		waitFor(t, 10*time.Second, "exactly one leader again", func() bool { return a.IsLeader() != b.IsLeader() })
	})
	t.Run("AFrozenLeaderLosesTheLock", func(t *testing.T) {
		t.Parallel()
		// A frozen process (SIGSTOP, a paused container) keeps its
		// connection: its host answers TCP keepalives, so nothing but the
		// session's idle_session_timeout gives the lock to another.
		url := testpg.Schema(t)
		opts := Options{LeaderInterval: 50 * time.Millisecond, LeaderIdleTimeout: time.Second}
		a := setup(t, url, opts)
		b := setup(t, url, opts)
		go a.RunLeaderElection(t.Context())
		waitFor(t, 10*time.Second, "a leads", a.IsLeader)
		go b.RunLeaderElection(t.Context())
		a.leaderFrozen.Store(true)
		waitFor(t, 10*time.Second, "b took the lock of the frozen a", b.IsLeader)
		a.leaderFrozen.Store(false) // a thaws: its session is gone
		waitFor(t, 10*time.Second, "a noticed it lost the lock", func() bool { return a.leaderLost.Load() == 1 })
		waitFor(t, 10*time.Second, "exactly one leader again", func() bool { return a.IsLeader() != b.IsLeader() })
		if !b.IsLeader() {
			t.Fatal("the lock went back to a, want b to keep it")
		}
	})
	t.Run("AnAliveLeaderKeepsTheLock", func(t *testing.T) {
		t.Parallel()
		url := testpg.Schema(t)
		opts := Options{LeaderInterval: 50 * time.Millisecond, LeaderIdleTimeout: time.Second} // 20 checks an idle timeout: a loaded CI run may stall one
		a := setup(t, url, opts)
		b := setup(t, url, opts)
		go a.RunLeaderElection(t.Context())
		waitFor(t, 10*time.Second, "a leads", a.IsLeader)
		go b.RunLeaderElection(t.Context())
		tries := b.leaderTries.Load()
		waitFor(t, 30*time.Second, "b tried the lock for several idle timeouts", func() bool {
			if !a.IsLeader() || b.IsLeader() {
				t.Fatalf("leaders: a %v, b %v; want a to keep the lock while it checks its session", a.IsLeader(), b.IsLeader())
			}
			return b.leaderTries.Load() >= tries+100 // 5 s: five idle timeouts
		})
		if n := a.leaderLost.Load(); n != 0 {
			t.Fatalf("a lost the lock %d times, want 0", n)
		}
	})
	t.Run("ClosedStoreRefusesToCampaign", func(t *testing.T) {
		t.Parallel()
		s := setup(t, "", Options{})
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.RunLeaderElection(t.Context()); err != store.ErrClosed {
			t.Fatalf("err %v, want ErrClosed", err)
		}
	})
}

func TestWritesFailLoudly(t *testing.T) {
	t.Parallel()
	t.Run("AfterClose", func(t *testing.T) {
		t.Parallel()
		s := setup(t, "", Options{})
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		_, err := s.NotificationCreate(context.Background(), params(nil))
		if err == nil || !strings.Contains(err.Error(), store.ErrClosed.Error()) {
			t.Fatalf("create after Close: %v, want ErrClosed", err)
		}
	})
	t.Run("OnADroppedConnection", func(t *testing.T) {
		t.Parallel()
		app := uniqueName("hd")
		s := setup(t, appURL(testpg.Schema(t), app), Options{MaxConns: 1})
		mustCreate(t, s, params(nil))
		if n := testpg.TerminateBackends(t, app); n != 1 {
			t.Fatalf("terminated %d pool sessions, want 1", n)
		}
		// The pool's only connection is dead. Whatever the write reports
		// must be true: an error, or a notification that is there.
		p := params(nil)
		res, firstErr := s.NotificationCreate(context.Background(), p)
		if firstErr == nil {
			if res.Outcome != store.Created {
				t.Fatalf("outcome %v", res.Outcome)
			}
			if _, err := s.NotificationGet(context.Background(), "t1", p.ID); err != nil {
				t.Fatalf("reported Created, but: %v", err)
			}
		}
		// The retry (same key) succeeds on a new connection and agrees: a
		// write that reported Created is replayed; after an error either
		// outcome is true, whether or not the first write committed.
		res, err := s.NotificationCreate(context.Background(), p)
		switch {
		case err != nil:
			t.Fatalf("retry: %v", err)
		case firstErr == nil && res.Outcome != store.Replayed:
			t.Fatalf("retry after Created: %v, want Replayed", res.Outcome)
		case res.Outcome != store.Created && res.Outcome != store.Replayed:
			t.Fatalf("retry after %v: %v, want Created or Replayed", firstErr, res.Outcome)
		}
		if string(res.Response) != string(p.Response) {
			t.Fatalf("retry answered %q, want %q", res.Response, p.Response)
		}
		if _, err := s.NotificationGet(context.Background(), "t1", p.ID); err != nil {
			t.Fatalf("after the retry: %v", err)
		}
		// Once one write reported Created, every later one is a replay.
		if res, err := s.NotificationCreate(context.Background(), p); err != nil || res.Outcome != store.Replayed {
			t.Fatalf("second retry: %v (%v), want Replayed", res.Outcome, err)
		}
	})
}

// holdTx runs sql in a transaction on its own pool connection and leaves it
// open; the returned function commits (true) or rolls back (false) it.
func holdTx(t *testing.T, s *Store, sql string, args ...any) func(commit bool) {
	t.Helper()
	end, _ := holdPid(t, s, sql, args...)
	return end
}

// holdPid is holdTx that also returns the transaction's backend pid, which
// pg_blocking_pids names for a statement that waits for it.
func holdPid(t *testing.T, s *Store, sql string, args ...any) (func(commit bool), int) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		tx.Rollback(ctx)
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		tx.Rollback(ctx)
		t.Fatalf("%s: %v", sql, err)
	}
	done := false
	t.Cleanup(func() {
		if !done {
			tx.Rollback(ctx)
		}
	})
	return func(commit bool) {
		done = true
		var err error
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}, pid
}

// waitsFor reports whether a session waits for a lock the session pid
// holds.
func waitsFor(t *testing.T, s *Store, pid int) bool {
	return anyRow(t, s, `SELECT 1 FROM pg_stat_activity WHERE $1::int = ANY (pg_blocking_pids(pid))`, pid)
}

// waiting reports whether the session pid waits for a lock.
func waiting(t *testing.T, s *Store, pid int) bool {
	return anyRow(t, s, `SELECT 1 WHERE cardinality(pg_blocking_pids($1::int)) > 0`, pid)
}

// waitBlocked waits until a session of app waits for a lock: the barrier
// that orders "the call is blocked" before "the holder commits".
func waitBlocked(t *testing.T, s *Store, app string) {
	t.Helper()
	waitFor(t, 10*time.Second, "the call blocks on the held row", func() bool {
		return anyRow(t, s, `SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, app)
	})
}

// anyRow reports whether query, run on s's pool, returns a row.
func anyRow(t *testing.T, s *Store, query string, args ...any) bool {
	t.Helper()
	var found bool
	if err := s.pool.QueryRow(context.Background(), `SELECT EXISTS (`+query+`)`, args...).Scan(&found); err != nil {
		t.Fatal(err)
	}
	return found
}

// async runs f in a goroutine and returns a function that waits for it.
func async[T any](f func() (T, error)) func(t *testing.T) T {
	type result struct {
		v   T
		err error
	}
	c := make(chan result, 1)
	go func() {
		v, err := f()
		c <- result{v, err}
	}()
	return func(t *testing.T) T {
		t.Helper()
		select {
		case r := <-c:
			if r.err != nil {
				t.Fatal(r.err)
			}
			return r.v
		case <-time.After(10 * time.Second):
			t.Fatal("the call did not return")
		}
		panic("unreachable")
	}
}

// Rows another transaction commits while a statement waits for them are not
// in that statement's snapshot; these tests hold such a transaction open,
// wait until the call blocks on it, and then end it.
func TestConcurrentCommitsAreReadFresh(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	open := func(t *testing.T) (*Store, string) {
		app := uniqueName("hc")
		return setup(t, appURL(testpg.Schema(t), app), Options{}), app
	}
	const holdKey = `INSERT INTO idempotency_keys (tenant, key, request_hash, notification_id, response, created_at, expires_at)
VALUES ('t1', 'k', 'h1', 'ntf_other', '\x7b7d', now(), now() + interval '1 hour')`
	for _, c := range []struct {
		name   string
		hash   string
		commit bool
		want   store.CreateOutcome
	}{
		{"KeyCommittedSameHashReplays", "h1", true, store.Replayed},
		{"KeyCommittedOtherHashConflicts", "h2", true, store.Conflict},
		{"KeyRolledBackIsTaken", "h1", false, store.Created},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, app := open(t)
			end := holdTx(t, s, holdKey)
			wait := async(func() (store.NotificationCreateResult, error) {
				return s.NotificationCreate(ctx, params(func(p *store.NotificationCreateParams) { p.IdempotencyKey, p.RequestHash = "k", c.hash }))
			})
			waitBlocked(t, s, app)
			end(c.commit)
			res := wait(t)
			if res.Outcome != c.want {
				t.Fatalf("outcome %v, want %v", res.Outcome, c.want)
			}
			if c.want == store.Replayed && string(res.Response) != "{}" {
				t.Fatalf("replayed %q, want the committed response", res.Response)
			}
		})
	}
	for _, withKey := range []bool{false, true} {
		t.Run(fmt.Sprintf("DedupCommittedWithKey=%v", withKey), func(t *testing.T) {
			t.Parallel()
			s, app := open(t)
			end := holdTx(t, s, `INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, dedup_key, created_at)
VALUES ('ntf_other', 't1', 'r', 'e', 'k', 'transactional', '{}', 'd', now())`)
			p := params(func(p *store.NotificationCreateParams) {
				p.DedupKey = "d"
				if !withKey {
					p.IdempotencyKey = ""
				}
			})
			wait := async(func() (store.NotificationCreateResult, error) { return s.NotificationCreate(ctx, p) })
			waitBlocked(t, s, app)
			end(true)
			if res := wait(t); res.Outcome != store.Deduplicated || res.ID != "ntf_other" {
				t.Fatalf("got %v %q, want Deduplicated ntf_other", res.Outcome, res.ID)
			}
			if withKey {
				p.DedupKey = "d2"
				if res := mustCreate(t, s, p); res.Outcome != store.Created {
					t.Fatalf("the deduplicated request kept its key: %v", res.Outcome)
				}
			}
		})
	}
	t.Run("DeliveryInsertedConcurrently", func(t *testing.T) {
		t.Parallel()
		s, app := open(t)
		end := holdTx(t, s, `INSERT INTO deliveries (message_id, notification_id, tenant, channel, state, attempts, claimed_at, created_at, updated_at)
VALUES ('m1', 'n', 't1', 'sms', 'SENDING', 1, now(), now(), now())`)
		wait := async(func() (store.DeliveryClaimResult, error) {
			return s.DeliveryClaim(ctx, store.DeliveryClaimParams{MessageID: "m1", NotificationID: "n", Tenant: "t1", Channel: heraldtype.ChannelSMS, Owner: "w"})
		})
		waitBlocked(t, s, app)
		end(true)
		if res := wait(t); res.Claimed || res.Current == nil || res.Current.State != heraldtype.DeliverySending {
			t.Fatalf("claim %+v, want blocked by SENDING", res)
		}
	})
	t.Run("DueRetryTakenConcurrently", func(t *testing.T) {
		t.Parallel()
		s, app := open(t)
		if _, err := s.pool.Exec(ctx, `INSERT INTO deliveries (message_id, notification_id, tenant, channel, state, attempts, next_attempt_at, created_at, updated_at)
VALUES ('m1', 'n', 't1', 'sms', 'RETRY_WAIT', 1, now() - interval '1 second', now(), now())`); err != nil {
			t.Fatal(err)
		}
		end := holdTx(t, s, `UPDATE deliveries SET state = 'SENDING', attempts = 2, next_attempt_at = NULL WHERE message_id = 'm1'`)
		wait := async(func() (store.DeliveryClaimResult, error) {
			return s.DeliveryClaim(ctx, store.DeliveryClaimParams{MessageID: "m1", NotificationID: "n", Tenant: "t1", Channel: heraldtype.ChannelSMS, Owner: "w"})
		})
		waitBlocked(t, s, app)
		end(true)
		if res := wait(t); res.Claimed || res.Current == nil || res.Current.State != heraldtype.DeliverySending || res.Current.Attempts != 2 {
			t.Fatalf("claim %+v, want blocked by the other copy's attempt 2", res)
		}
	})
	t.Run("ClaimSkipsLockedRowsWithoutWaiting", func(t *testing.T) {
		t.Parallel()
		s, _ := open(t)
		first, second := params(nil), params(nil)
		mustCreate(t, s, first)
		mustCreate(t, s, second)
		end := holdTx(t, s, `SELECT id FROM outbox WHERE notification_id = $1 FOR UPDATE`, first.ID)
		defer end(false)
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		rows, err := s.OutboxClaim(cctx, store.OutboxClaimParams{Lane: first.Lane, Owner: "w", Limit: 10, Lease: time.Minute})
		if err != nil || len(rows) != 1 || rows[0].NotificationID != second.ID {
			t.Fatalf("claimed %+v (%v), want only the unlocked row", rows, err)
		}
	})
}

// BenchmarkNotificationCreate measures intake writes (two channels each) with
// the server's clock and the default pool, from as many goroutines as the
// pool has connections.
func BenchmarkNotificationCreate(b *testing.B) {
	url := testpg.Schema(b)
	s, err := Open(context.Background(), url, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.SetParallelism(max(1, DefaultMaxConns/runtime.GOMAXPROCS(0)))
	start := time.Now()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p := params(func(p *store.NotificationCreateParams) {
				p.Channels = []heraldtype.Channel{heraldtype.ChannelWebhook, heraldtype.ChannelPush}
			})
			if _, err := s.NotificationCreate(context.Background(), p); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "notifications/s")
}

// BenchmarkSendCycle measures the store's share of one notification's trip
// on the db transport: create, claim, peek, delivery claim, record, complete
// (six statements, five of them commits), from as many goroutines as the
// pool has connections. It bounds end-to-end throughput from above.
func BenchmarkSendCycle(b *testing.B) {
	url := testpg.Schema(b)
	s, err := Open(context.Background(), url, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	b.SetParallelism(max(1, DefaultMaxConns/runtime.GOMAXPROCS(0)))
	start := time.Now()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p := params(nil)
			if _, err := s.NotificationCreate(ctx, p); err != nil {
				b.Error(err)
				return
			}
			rows, err := s.OutboxClaim(ctx, store.OutboxClaimParams{Lane: p.Lane, Owner: "w", Limit: 1, Lease: time.Minute})
			if err != nil {
				b.Error(err)
				return
			}
			for _, row := range rows {
				if _, err := s.DeliveryGet(ctx, row.MessageID); err != store.ErrNotFound {
					b.Error(err)
					return
				}
				res, err := s.DeliveryClaim(ctx, store.DeliveryClaimParams{MessageID: row.MessageID, NotificationID: row.NotificationID, Tenant: row.Tenant, Channel: row.Channel, Provider: "p", Owner: "w"})
				if err != nil || !res.Claimed {
					b.Error(res, err)
					return
				}
				if _, err := s.DeliveryRecord(ctx, store.DeliveryRecordParams{MessageID: row.MessageID, Attempt: res.Attempt, State: heraldtype.DeliveryProviderAccepted, Owner: "w", Class: "accepted", StartedAt: time.Now()}); err != nil {
					b.Error(err)
					return
				}
				if _, err := s.OutboxComplete(ctx, row.Fence, heraldtype.OutboxDone, ""); err != nil {
					b.Error(err)
					return
				}
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "notifications/s")
}

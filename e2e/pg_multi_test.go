package e2e

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testpg"
)

// TestCrashPostgres is the single-process SIGKILL test (runCrash) on
// PostgreSQL.
func TestCrashPostgres(t *testing.T) {
	skipShort(t, "crash test")
	t.Parallel()
	dbURL := testpg.Database(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("kill schedule seed %d", seed)
	runCrash(t, crashSetup{database: dbURL}, 2000, 5, seed)
}

// leaderTakeover bounds how long after the leader's SIGKILL another process
// must hold the leader lock. The README promises "within about 5 s":
// PostgreSQL ends the dead session (and so releases its lock) at once, and
// the others try the lock every 5 s (postgres.Options.LeaderInterval); the
// 3 s on top are headroom for a loaded 2-core machine running the race
// detector.
const leaderTakeover = 8 * time.Second

// TestSeveralProcessesSharePostgres runs three herald processes on one
// database, each posting to its own path of one webhook sink, while clients
// spread notifications over all three. Mid-run the leader is SIGKILLed with
// a provider call in flight and not restarted. The other two must finish
// its work: its leases expire and they take the rows; the claims it left
// SENDING (the held call among them) end UNKNOWN and are never called
// again, and every other message ends PROVIDER_ACCEPTED with exactly one
// call; a survivor takes over leadership within leaderTakeover. For the
// whole test, every 100 ms, at most one session holds the leader lock and at
// most one live process says it leads. Every survivor made provider calls.
func TestSeveralProcessesSharePostgres(t *testing.T) {
	skipShort(t, "multi-process test")
	t.Parallel()
	dbURL := testpg.Database(t)
	k := newRouteSink()
	sinkSrv := httptest.NewServer(k)
	defer sinkSrv.Close()
	defer close(k.release)

	const procs = 3
	servers := make([]*server, procs)
	clients := make([]*client, procs)
	apps := make([]string, procs)
	for i := range procs {
		addr := freeAddr(t)
		path := fmt.Sprintf("/p%d", i+1)
		apps[i] = appName(fmt.Sprintf("herald_multi_p%d", i+1))
		db := testpg.WithParams(dbURL, "application_name", apps[i])
		servers[i] = newServer(t, crashConfig(t, addr, sinkSrv.URL+path, crashSetup{database: db}), addr)
		clients[i] = newClient(addr, "crash-key")
	}
	for _, s := range servers {
		s.start() // one at a time: the first applies the migrations
	}
	lw := watchLeader(t, databaseName(t, dbURL), servers, apps)
	victim := lw.awaitLeader(t, 30*time.Second)
	victimPath := fmt.Sprintf("/p%d", victim+1)
	// Hold one of the victim's provider calls once it has made a few, so the
	// kill lands with a claim in flight.
	k.mu.Lock()
	k.hold = func(path string, calls int) bool { return path == victimPath && calls >= 20 }
	k.mu.Unlock()

	const n = 2400
	l := &load{n: n, workers: 12, clients: clients, kind: "crash.test", prefix: "multi"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sending := make(chan struct{})
	go func() { defer close(sending); l.run(ctx) }()

	var heldID string
	select {
	case heldID = <-k.held:
	case <-time.After(60 * time.Second):
		t.Fatalf("the victim (process %d) made no provider call to hold", victim+1)
	}
	marks := make([]int, procs)
	for i, s := range servers {
		marks[i] = s.logs.Mark()
	}
	lw.killing(victim)
	servers[victim].kill()
	pid := servers[victim].cmd.Process.Pid
	unknown := map[string]unknownMay{}
	for _, m := range strandedPostgres(t, dbURL, apps[victim], pid) {
		unknown[m] = unknownMay{why: fmt.Sprintf("SENDING when process %d (pid %d) was killed", victim+1, pid), must: true, maxCalls: 1}
	}
	var orphaned int
	if err := pgQuery(dbURL, `SELECT count(*)::int FROM outbox WHERE state = 'CLAIMED' AND claimed_by LIKE $1`,
		[]any{ownerOf(pid)}, &orphaned); err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGKILLed process %d (the leader) after %d accepted, holding %s; it left %d claims SENDING and %d outbox rows leased",
		victim+1, l.accepted.Load(), heldID, len(unknown), orphaned)
	if _, ok := unknown[heldID]; !ok {
		t.Fatalf("the held message %s was not SENDING after its process died", heldID)
	}
	if orphaned == 0 {
		t.Fatal("the killed process held no lease; the test proves nothing")
	}

	// A survivor takes over, as its own log says after the kill.
	took, leader := lw.awaitTakeover(t)
	t.Logf("process %d became leader %s after the kill", leader+1, took.Round(time.Millisecond))
	// The lock is taken a moment before the line is logged (and the log
	// reaches this test through a pipe): on a loaded machine the sampler
	// can see the holder first.
	testenv.WaitFor(t, "the new leader's \"became leader\" line", 10*time.Second, func() bool {
		return len(logLines(servers[leader].logs.Since(marks[leader]), "postgres: became leader")) > 0
	})
	for i, s := range servers {
		after := logLines(s.logs.Since(marks[i]), "postgres: became leader")
		switch {
		case i == leader && len(after) != 1:
			t.Errorf("process %d holds the leader lock but logged %d \"became leader\" after the kill", i+1, len(after))
		case i != leader && len(after) != 0:
			t.Errorf("process %d logged \"became leader\" after the kill, but process %d holds the lock: %v", i+1, leader+1, after)
		}
	}

	select {
	case <-sending:
	case <-ctx.Done():
		t.Fatalf("sending did not finish within 3 minutes: %d of %d accepted", l.accepted.Load(), n)
	}
	if l.err != nil {
		t.Fatalf("sending: %v", l.err)
	}
	if len(l.ids) != n {
		t.Fatalf("accepted %d of %d", len(l.ids), n)
	}
	var live []*client
	for i, c := range clients {
		if i != victim {
			live = append(live, c)
		}
	}
	views := settle(t, dbURL, live, l.ids, 60*time.Second)
	counts, paths := k.snapshot()
	t.Logf("multi-process test: failovers=%d 503s=%d per_process=%v %s",
		l.stats.failovers.Load(), l.stats.unavailable.Load(), paths, checkMessages(t, views, counts, unknown))
	// The held call's claim died with its process: UNKNOWN after one call.
	if counts[heldID] != 1 {
		t.Errorf("held message %s: %d calls, want 1", heldID, counts[heldID])
	}
	// The work was shared.
	for i := range servers {
		if i != victim && paths[fmt.Sprintf("/p%d", i+1)] == 0 {
			t.Errorf("process %d made no provider call", i+1)
		}
	}
	t.Logf("leader watch: %s", lw.stop())
	for i, s := range servers {
		if i == victim {
			continue
		}
		if code := s.stop(30 * time.Second); code != 0 {
			t.Fatalf("process %d: SIGTERM exit code %d:\n%s", i+1, code, s.tail())
		}
	}
	// Count the proof: reconciliation finds every 202 accounted for.
	wantAccounted(t, servers[leader].config)
}

// leaderWatch samples, every 100 ms until stop, who leads the herald
// processes of one database, two ways: which sessions hold an advisory lock
// there (pg_locks; after start-up the leader lock is the only one), and
// which live processes' latest leadership log line is "became leader". At
// every sample at most one process may hold the lock and at most one live
// process may say it leads, and they must be the same one; once a leader
// was seen, a sample with none is allowed only between the leader's kill
// and a survivor's takeover, which must come within leaderTakeover.
type leaderWatch struct {
	t       *testing.T
	db      string
	servers []*server
	apps    []string
	quit    chan struct{}
	done    chan struct{}

	mu       sync.Mutex
	samples  int
	problems []string
	holder   int // process holding the lock at the last sample; -1: none
	seen     bool
	victim   int
	killedAt time.Time
	took     time.Duration // kill → takeover; 0 until then
	changed  chan struct{} // closed and replaced after each sample
}

func watchLeader(t *testing.T, db string, servers []*server, apps []string) *leaderWatch {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testpg.BaseURL())
	if err != nil {
		t.Fatalf("leader watch: connect: %v", err)
	}
	lw := &leaderWatch{t: t, db: db, servers: servers, apps: apps, quit: make(chan struct{}), done: make(chan struct{}),
		holder: -1, victim: -1, changed: make(chan struct{})}
	go func() {
		defer close(lw.done)
		defer conn.Close(context.Background())
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			lw.sample(conn)
			select {
			case <-lw.quit:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { lw.stop() })
	return lw
}

const qAdvisoryHolders = `SELECT coalesce(a.application_name, '?') FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = $1)`

func (lw *leaderWatch) sample(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now := time.Now()
	rows, err := conn.Query(ctx, qAdvisoryHolders, lw.db)
	var names []string
	if err == nil {
		names, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	defer func() { close(lw.changed); lw.changed = make(chan struct{}) }()
	lw.samples++
	fail := func(format string, args ...any) {
		if len(lw.problems) < 20 {
			lw.problems = append(lw.problems, now.Format("15:04:05.000 ")+fmt.Sprintf(format, args...))
		}
	}
	if err != nil {
		fail("read pg_locks: %v", err)
		return
	}
	holders := map[int]bool{}
	for _, name := range names {
		i := -1
		for j, app := range lw.apps {
			if name == app+" leader" {
				i = j
			}
		}
		if i < 0 {
			fail("an advisory lock is held by session %q, not a leader session", name)
			continue
		}
		if i == lw.victim {
			continue // the dead leader's session, about to end
		}
		holders[i] = true
	}
	if len(holders) > 1 {
		fail("%d processes hold the leader lock at once: %v", len(holders), names)
	}
	believers := 0
	believer := -1
	for i, s := range lw.servers {
		if i == lw.victim {
			continue
		}
		logs := s.logs.String()
		if strings.LastIndex(logs, "postgres: became leader") > max(strings.LastIndex(logs, "postgres: lost leadership"), strings.LastIndex(logs, "postgres: gave up leadership")) {
			believers++
			believer = i
		}
	}
	if believers > 1 {
		fail("%d live processes say they lead", believers)
	}
	holder := -1
	for i := range holders {
		holder = i
	}
	if holder >= 0 && believers == 1 && believer != holder {
		fail("process %d holds the leader lock but process %d says it leads", holder+1, believer+1)
	}
	lw.holder = holder
	switch {
	case holder >= 0:
		lw.seen = true
		if !lw.killedAt.IsZero() && lw.took == 0 {
			lw.took = now.Sub(lw.killedAt)
		}
	case !lw.seen:
		// Before the first election.
	case lw.killedAt.IsZero():
		fail("no process holds the leader lock")
	case lw.took == 0:
		// Between the leader's death and a survivor's takeover, which
		// awaitTakeover times.
	default:
		fail("no process holds the leader lock (after the takeover)")
	}
}

// awaitLeader waits until a process holds the leader lock and returns it.
func (lw *leaderWatch) awaitLeader(t *testing.T, timeout time.Duration) int {
	t.Helper()
	deadline := time.After(timeout)
	for {
		lw.mu.Lock()
		holder, changed := lw.holder, lw.changed
		lw.mu.Unlock()
		if holder >= 0 {
			return holder
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("no process held the leader lock within %s", timeout)
		}
	}
}

// killing records that process i, which must be the leader, is about to
// be killed; the takeover is timed from now.
func (lw *leaderWatch) killing(i int) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.holder != i {
		lw.t.Errorf("the killed process %d did not hold the leader lock at the last sample (process %d did)", i+1, lw.holder+1)
	}
	lw.victim, lw.killedAt = i, time.Now()
}

// awaitTakeover waits until a survivor holds the leader lock and returns
// how long that took after the kill, and which process it is. It fails the
// test if that took longer than leaderTakeover.
func (lw *leaderWatch) awaitTakeover(t *testing.T) (time.Duration, int) {
	t.Helper()
	deadline := time.After(leaderTakeover + 5*time.Second) // to see how late it is
	for {
		lw.mu.Lock()
		took, holder, changed := lw.took, lw.holder, lw.changed
		lw.mu.Unlock()
		if took > 0 {
			if took > leaderTakeover {
				t.Errorf("process %d took over the leadership %s after the kill; the README says about 5 s (bound %s)",
					holder+1, took.Round(time.Millisecond), leaderTakeover)
			}
			return took, holder
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("no survivor held the leader lock %s after the kill; the README says about 5 s", leaderTakeover+5*time.Second)
		}
	}
}

// stop ends the sampling, fails the test with any problem seen, and
// returns a summary.
func (lw *leaderWatch) stop() string {
	select {
	case <-lw.quit:
	default:
		close(lw.quit)
	}
	select {
	case <-lw.done:
	case <-time.After(30 * time.Second): // a sample's query ends within 10 s
		lw.t.Errorf("leader watch: the sampler did not stop within 30 s")
	}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if len(lw.problems) > 0 {
		lw.t.Errorf("leader watch over %d samples found:\n  %s", lw.samples, strings.Join(lw.problems, "\n  "))
		lw.problems = nil
	}
	return fmt.Sprintf("%d samples, one leader at each after the first election except %s between the kill and the takeover",
		lw.samples, lw.took.Round(time.Millisecond))
}

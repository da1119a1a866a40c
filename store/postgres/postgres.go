// Package postgres is herald's production store: PostgreSQL through pgx v5
// (pgxpool), with versioned migrations embedded in the binary. Several
// herald processes may share one database; everything below is written so
// they can.
//
// # The claim
//
// OutboxClaim is one autocommitted statement:
//
//	UPDATE outbox SET state = 'CLAIMED', claimed_by = $owner,
//	       claimed_until = now + lease, token = token + 1
//	WHERE id IN (SELECT id FROM outbox
//	             WHERE lane = $lane AND state = 'PENDING' AND available_at <= now
//	               AND (expires_at IS NULL OR expires_at > now)
//	             ORDER BY <its tenant's rows in flight + its place in the
//	                       tenant, its scopes taking turns>,
//	                      <tenants after $after first>, tenant, available_at
//	             LIMIT $n
//	             FOR UPDATE SKIP LOCKED)
//	RETURNING … joined with the notifications
//
// The inner SELECT walks the partial index (lane, tenant, scope,
// available_at, id) WHERE state = 'PENDING' AND NOT deferred, scope by
// scope of each tenant (rows due beyond store.DeferHorizon wait in
// outbox_deferred until a claim of their lane promotes them, so a lane's
// scheduled rows cost its claims nothing however many scopes hold them),
// so a lane is shared fairly between tenants and a tenant's turns between
// its scopes (qOutboxClaim); equal turns go round the tenants from the
// one the caller served last (OutboxClaimParams.After), and a tenant's
// scopes from the one served last in it (Scopes), a sort of the few rows
// already read, which leaves the index walk as it was. SKIP LOCKED
// makes concurrent claimers take disjoint rows without queueing behind each
// other, and no row lock outlives the statement: afterwards ownership is
// the lease and the fencing token alone. Every later outbox write is
// conditional on
// id = $id AND token = $token AND state = 'CLAIMED' AND claimed_until >= now,
// and every delivery write on the row still being SENDING (at that attempt).
//
// # Plans made on an empty database
//
// pgx prepares statements, and PostgreSQL keeps each connection's generic
// plan until an ANALYZE of its tables (autovacuum's, a minute or more after
// a new database starts filling; never where autovacuum is off) or until
// the pool replaces the connection. A plan made on empty tables prefers a
// scan wherever a join or an array of keys meets a table, and then runs it
// against millions of rows. So every hot statement finds its rows by key in
// a form no plan turns into a scan: one key's equality; a LATERAL … LIMIT 1
// probe per key (with FOR UPDATE where the row is written); an update by a
// join on the probed ctids, which every plan makes a TID look-up; OFFSET 0
// in an EXISTS that would otherwise become a hashed subplan. The claim,
// whose update of the rows it chose (by ctid, from a CTE) a plan on empty
// tables still hashed against a scan, runs on connections of its own where
// sequential scans are priced out (claimPoolConfig). growth_plan_test.go
// plans the hot statements on empty tables and reads their plans again at
// 100,000 rows; a new hot statement belongs there.
//
// # Text keys compare byte by byte
//
// Every text column is COLLATE "C" (migration 26): ids, tenants, keys and
// channels are compared in b-trees millions of times a minute and never
// shown in a language's order, and under a database collation such as
// C.UTF-8 or an ICU locale each comparison calls strcoll or ICU. A new
// table writes COLLATE "C" on each text column;
// TestEveryTextColumnIsCollatedC fails otherwise. A comparison with a
// value of the database's default collation (a parameter, a jsonb field, a
// user's column) takes the column's "C" and is never refused.
//
// # The clock seam
//
// Ownership times (leases, due times, staleness, key expiry) come from one
// clock, the database server's, so clock skew between herald processes cannot
// hand one row to two owners. Each statement that needs "now" reads it as
// coalesce($1::timestamptz, now()): the store passes NULL when Options.Clock
// is nil or clock.Real, and the fake clock's time otherwise, which is how the
// conformance suite moves time. NotificationView.Now is that same value.
//
// # Wake-ups: LISTEN/NOTIFY
//
// NotificationCreate calls pg_notify on the lane's channel inside its own
// statement when a row is due now; PostgreSQL delivers it at commit, so a
// wake-up never announces a row that is not there. Because PostgreSQL
// serialises the commits of notifying transactions, a burst shares one: at
// most one create per lane and NotifyInterval notifies in its statement, and
// one trailing pg_notify after the interval covers the creates that did not
// (see notifier). Local claimers are woken after every create. Each Store keeps one
// dedicated connection (not from the pool) that LISTENs on every lane's
// channel and feeds Wakeups; it reconnects with backoff when the connection
// drops, and wakes every lane after each (re)connect because notifications
// sent while it was away are lost. Channel names carry a hash of the database
// and schema, so stores in different schemas of one database do not wake
// each other. Wake-ups are hints: claimers poll as well.
//
// # The leader lock
//
// RunLeaderElection holds a session-level pg_try_advisory_lock on a second
// dedicated connection, keyed by a constant and the database and schema
// names. The lock lives exactly as long as that session: if the process dies
// or the connection breaks, PostgreSQL releases it and another process takes
// it on its next try. IsLeader reports whether this store holds it; it turns
// false as soon as the store sees its connection fail (a check every
// LeaderInterval), so for at most that long two processes may both run the
// leader-only sweeps, which are conditional writes and harmless twice. A
// process that is frozen, not dead, keeps its connection; the session's
// idle_session_timeout (LeaderIdleTimeout) ends it, and the lock with it.
package postgres

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// Options tune the store.
type Options struct {
	// Clock supplies "now" for tests. Nil or clock.Real means the database
	// server's clock, which production must use. Defaults to nil.
	Clock clock.Clock
	// MaxConns caps the connection pool. Defaults to the URL's
	// pool_max_conns, else 16.
	MaxConns int32
	// LeaderInterval is how often leader election retries the lock and
	// checks the connection that holds it. Defaults to 5 seconds.
	LeaderInterval time.Duration
	// LeaderIdleTimeout is how long the leader's session may hear nothing
	// from its process before PostgreSQL ends it (idle_session_timeout, on
	// PostgreSQL 14 and later), and with it the lock: a process that is
	// frozen (SIGSTOP, a paused container) while its host still answers TCP
	// keepalives would otherwise keep the lock, and no process would run
	// the sweeps, the watchdog or any other leader-only loop, for as long
	// as it stays frozen. A process that is alive checks its session every
	// LeaderInterval. At least 3 × LeaderInterval. Defaults to 30 seconds.
	LeaderIdleTimeout time.Duration
	// HoldTimeout ends the session of a relay's held claim
	// (store.OutboxHolder) that stays idle in its transaction this long
	// (idle_in_transaction_session_timeout): a process stopped without
	// dying (SIGSTOP, a paused container) would otherwise hold its rows
	// for as long as it stays stopped. It must outlast a publish and its
	// confirm timeout, as a lease must. Defaults to 1 minute.
	HoldTimeout time.Duration
	// HoldConns caps the connections of the relays' held claims, opened as
	// they are needed: each batch a relay has in flight holds one until its
	// confirms, as do the batch being published and the next claim. A
	// claim past it waits for a batch to settle, as a relay past its
	// InFlight does. Defaults to 12: a lane's four batches awaiting
	// confirms, one being published and its next claim, for two lanes at
	// full pace.
	HoldConns int
	// NotifyInterval is the least time between two NOTIFYs of one lane from
	// this store: creates inside it share one trailing NOTIFY at its end
	// instead of each sending its own (see notifier). Defaults to 10
	// milliseconds.
	NotifyInterval time.Duration
	// Logger receives connection-state changes of the listener and the
	// leader election. Defaults to slog.Default().
	Logger *slog.Logger
	// PipelineWorkers is how many batches of hot statements may be in
	// flight at once (see pipeline). Defaults to 2: on a small machine fewer,
	// larger batches commit less often; the second keeps one batch that waits
	// on a lock from holding up every other statement.
	PipelineWorkers int
	// PipelineBatch caps the statements sent together. Defaults to 64.
	PipelineBatch int
	// MustExist makes Open create and migrate nothing: it fails, wrapping
	// ErrNotMigrated, unless the schema is already at this build's version
	// or later. For commands that only read or mend rows. Defaults to false
	// (Open applies pending migrations).
	MustExist bool

	// Tracer, when set, traces every pool query (tests count round trips
	// and see that a refused request sent no statement). Defaults to nil.
	Tracer pgx.QueryTracer
}

// DefaultMaxConns is the pool size when neither Options nor the URL set one.
const DefaultMaxConns = 16

// Store is the PostgreSQL driver.
type Store struct {
	pool    *pgxpool.Pool
	claims  *pgxpool.Pool   // the claim's own connections (claimPoolConfig)
	pipe    *pipeline       // group commit for the hot single statements
	connCfg *pgx.ConnConfig // for the dedicated listener and leader connections
	clock   clock.Clock     // nil: the database server's clock
	logger  *slog.Logger
	wakeups *store.Wakeups

	// holdPool is the relay's held claims' connections (hold.go), opened
	// on first use (holdConns at most), under holdMu; holdTimeout ends a
	// held claim's session that stays idle in its transaction
	// (Options.HoldTimeout).
	holdMu      sync.Mutex
	holdPool    *pgxpool.Pool
	holdTimeout time.Duration
	holdConns   int32

	channels     map[heraldtype.Lane]string
	lanes        map[string]heraldtype.Lane
	notify       *notifier
	inboxChannel string // inboxsignal.go
	inboxNotify  *inboxNotifier
	inboxSignals store.InboxSignals
	keyChannel   string // apikeys.go
	keyChanges   store.APIKeyChanges
	// languageRead, when set (tests), runs after a create read the
	// profile language its inbox text depends on, before its statement.
	languageRead   func()
	leaderKey      int64
	leaderInterval time.Duration
	leaderIdle     time.Duration
	// leaderIdleOld warns once that the server has no idle_session_timeout.
	leaderIdleOld sync.Once
	promotions    store.Promotions // of deferred outbox rows, per lane (outbox.go)
	// promoting, when set (tests), runs before each promotion's statement.
	promoting func()

	leader      atomic.Bool
	leaderLost  atomic.Int64 // times leadership was lost (tests)
	leaderTries atomic.Int64 // answered tries of the leader lock (tests)
	// leaderFrozen, when set (tests), makes the leader election send
	// nothing on its session, as a frozen process would not.
	leaderFrozen atomic.Bool
	listenConns  atomic.Int64 // successful listener (re)connects (tests)
	listening    atomic.Bool

	life   context.Context // cancelled by Close
	cancel context.CancelFunc
	mu     sync.Mutex // guards closed and wg.Add
	closed bool
	wg     sync.WaitGroup
}

var _ store.Store = (*Store)(nil)

// Open connects to the database at url (a postgres:// URL; pool_max_conns,
// search_path and other runtime parameters may be set in its query), applies
// pending migrations (unless opts.MustExist) and starts the wake-up listener.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	cfg, err := poolConfig(url, opts)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres pool: %w", err)
	}
	claims, err := pgxpool.NewWithConfig(ctx, claimPoolConfig(cfg))
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres pool for claims: %w", err)
	}
	s, err := newStore(ctx, pool, claims, cfg.ConnConfig, opts)
	if err != nil {
		claims.Close()
		pool.Close()
		return nil, err
	}
	s.wg.Add(1)
	go s.listen()
	return s, nil
}

func poolConfig(url string, opts Options) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx redacts the password from the URL it quotes.
		return nil, fmt.Errorf("parse postgres url: %w", err)
	}
	switch {
	case opts.MaxConns > 0:
		cfg.MaxConns = opts.MaxConns
	case !strings.Contains(url, "pool_max_conns"):
		cfg.MaxConns = DefaultMaxConns
	}
	for name, value := range sessionDefaults {
		if _, ok := cfg.ConnConfig.RuntimeParams[name]; !ok {
			cfg.ConnConfig.RuntimeParams[name] = value
		}
	}
	if opts.Tracer != nil {
		cfg.ConnConfig.Tracer = opts.Tracer
	}
	return cfg, nil
}

// sessionDefaults are the run-time parameters herald's connections start
// with, each unless the URL sets its own (poolConfig).
var sessionDefaults = map[string]string{
	"application_name": "herald",
	// herald's statements are short and run many times a second; JIT
	// compiles a plan at every execution once its estimated cost passes
	// jit_above_cost, which stale statistics of a grown table make it do:
	// in issue 12's isolation run each send's result write spent about
	// 60 ms compiling (and a stale-claim sweep 3.4 s), on the two
	// connections every hot statement is written through.
	"jit": "off",
	// A backend that writes out dirty buffers (as herald's do when a
	// campaign's fan-out fills shared_buffers faster than the background
	// writer empties them) leaves them in the kernel's page cache, which
	// on a machine with memory to spare holds gigabytes before it starts
	// writing them back, then writes them all at once: every commit's WAL
	// flush waits behind that burst. This has the kernel start on them
	// every 256 kB, as PostgreSQL's checkpointer does by default. In issue
	// 12's isolation run (a 1,000,000-recipient campaign beside 100
	// transactional notifications a second) the transactional p99 was
	// 213-387 ms without it and 69-94 ms with it, the stalls lining up
	// with commits of an idle probe taking 130-270 ms.
	"backend_flush_after": backendFlushAfter,
	// A process whose host froze or lost its network sends no FIN or RST:
	// the server keeps its session, and the session's locks, until its
	// TCP keepalive gives up, by the kernel's defaults over two hours. The
	// leader's advisory lock among them: for that long no other process
	// would lead, and no sweep, watchdog or campaign fan-out would run.
	// The server probes a silent herald connection after 10 s and drops
	// it after three unanswered probes 5 s apart, about 25 s in all (the
	// leader pings its connection every few seconds, so a healthy one is
	// never silent that long).
	"tcp_keepalives_idle":     "10",
	"tcp_keepalives_interval": "5",
	"tcp_keepalives_count":    "3",
}

// backendFlushAfter is the backend_flush_after herald's connections run
// with unless their URL sets it.
const backendFlushAfter = "256kB"

// The claim (qOutboxClaim and the relay's two) runs on connections of its
// own, a pool of at most claimConns beside the main one, whose run-time
// parameters are claimSettings:
//
//   - plan_cache_mode force_generic_plan: the claim is prepared once per
//     connection and planned once, not at every call. Planned at every
//     call, its CTEs took 0.8-1.3 ms to plan against 0.6-1.2 ms to run
//     (EXPLAIN, 12 rows), and in the Go API's run (pg_stat_statements,
//     20,000 notifications) its planning was 3.6 s of the server's 20 s.
//     PostgreSQL's own choice (plan_cache_mode auto) keeps planning it,
//     as a generic plan's LIMIT $3 estimates thousands of rows and so
//     looks dearer than every custom plan.
//   - enable_seqscan off: a generic plan is made once, whatever the tables
//     hold then, and kept for the connection's life. Made on the empty
//     tables of a new database, where reading a page or two costs less
//     than ten look-ups, the claim's UPDATE hashed a scan of the outbox
//     against the rows it chose (15 ms a claim at 50,000 rows, growing
//     with the outbox). Every step of the claim has an index or TID path
//     (the query's comment); with sequential scans priced out, a plan
//     takes those whatever the statistics, and a step without one would
//     still scan rather than fail. growth_plan_test.go plans the claims
//     on empty tables under these settings.
//   - enable_bitmapscan off: a step read through a bitmap never marks the
//     dead index entries it meets, so it fetches their heap pages again at
//     every call. Planned on empty tables, the count of a lane's rows in
//     flight (busy) read outbox_leased through a bitmap, and in a lane with
//     two groups or more, every claim then read the heap page of every row
//     settled since the last vacuum (20,000 settled rows: 400 pages a
//     claim, growing through a drain). A plain index scan marks them, and
//     the next claims step over them on the index's own pages.
//
// Nothing else runs on these connections but the promotion of a lane's
// deferred rows (store/promote.go), which the claim runs first: an ordered
// walk of outbox_deferred, a plain index scan under these settings too.
const claimConns = 4

var claimSettings = map[string]string{"plan_cache_mode": "force_generic_plan", "enable_seqscan": "off", "enable_bitmapscan": "off"}

// WarmUp opens the connections a sending process uses first, before its
// claimers, relay and sender ask for them, and leaves them idle in their
// pools: the claim pool's claimConns, and warmMain of the main pool (the
// pipeline's workers, default 2, and the statements beside them). A server
// calls it at start: opened on demand, they were opened by the first
// claims and sends, while the notifications committed meanwhile waited. In
// the Go API's run (8 goroutines enqueueing from the first moment), a
// committed notification's wait for its provider call had a p99 of
// 83-266 ms; with the claim connections open first, 37-75 ms; with the
// main pool's too, 32-39 ms (four alternated pairs each).
func (s *Store) WarmUp(ctx context.Context) error {
	var conns []*pgxpool.Conn
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for _, p := range []struct {
		pool *pgxpool.Pool
		n    int
	}{{s.claims, claimConns}, {s.pool, min(warmMain, int(s.pool.Config().MaxConns))}} {
		for range p.n {
			c, err := p.pool.Acquire(ctx)
			if err != nil {
				return s.fail("open connections ahead", err)
			}
			conns = append(conns, c)
		}
	}
	return nil
}

// warmMain is how many of the main pool's connections WarmUp opens.
const warmMain = 4

// claimPoolConfig derives the claim pool's configuration from the main
// pool's: the same server and parameters, claimSettings on top.
func claimPoolConfig(cfg *pgxpool.Config) *pgxpool.Config {
	c := cfg.Copy()
	c.MaxConns, c.MinConns = claimConns, 0
	for k, v := range claimSettings {
		c.ConnConfig.RuntimeParams[k] = v
	}
	return c
}

func newStore(ctx context.Context, pool, claims *pgxpool.Pool, connCfg *pgx.ConnConfig, opts Options) (*Store, error) {
	s := &Store{pool: pool, claims: claims, logger: opts.Logger, wakeups: store.NewWakeups(), leaderInterval: opts.LeaderInterval}
	if opts.Clock != nil && !clock.IsReal(opts.Clock) {
		s.clock = opts.Clock
	}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	if s.leaderInterval <= 0 {
		s.leaderInterval = 5 * time.Second
	}
	s.leaderIdle = opts.LeaderIdleTimeout
	if s.leaderIdle <= 0 {
		s.leaderIdle = 30 * time.Second
	}
	s.leaderIdle = max(s.leaderIdle, 3*s.leaderInterval)
	s.holdTimeout = opts.HoldTimeout
	if s.holdTimeout <= 0 {
		s.holdTimeout = time.Minute
	}
	s.holdConns = int32(opts.HoldConns)
	if s.holdConns <= 0 {
		s.holdConns = defaultHoldConns
	}
	if opts.NotifyInterval <= 0 {
		opts.NotifyInterval = 10 * time.Millisecond
	}
	s.notify = newNotifier(s, opts.NotifyInterval)
	if opts.PipelineWorkers <= 0 {
		opts.PipelineWorkers = 2
	}
	if opts.PipelineBatch <= 0 {
		opts.PipelineBatch = 64
	}
	s.pipe = newPipeline(pool, opts.PipelineWorkers, opts.PipelineBatch)
	s.connCfg = connCfg.Copy()
	s.connCfg.Tracer = nil
	s.life, s.cancel = context.WithCancel(context.Background())

	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	defer conn.Release()
	var version int
	if opts.MustExist {
		version, err = checkSchema(ctx, conn.Conn())
	} else {
		version, err = migrate(ctx, conn.Conn())
	}
	if err == nil {
		err = warnNewerSchema(ctx, opts.Logger, version)
	}
	if err != nil {
		return nil, err
	}
	db, schema, err := where(ctx, conn.Conn())
	if err != nil {
		return nil, err
	}
	s.leaderKey = lockKey("leader", db, schema)
	s.channels, s.lanes = wakeChannels(db, schema)
	s.inboxChannel, s.inboxNotify = inboxChannel(db, schema), newInboxNotifier(s)
	s.keyChannel = keyChannel(db, schema)
	return s, nil
}

// where names the database and schema the store works in.
func where(ctx context.Context, conn *pgx.Conn) (db, schema string, err error) {
	var sch *string
	if err := conn.QueryRow(ctx, qWhere).Scan(&db, &sch); err != nil {
		return "", "", fmt.Errorf("read current schema: %w", err)
	}
	if sch == nil {
		return "", "", errors.New("read current schema: no schema of search_path exists")
	}
	return db, *sch, nil
}

// lockKey is the advisory lock key for purpose in one database and schema.
func lockKey(purpose, db, schema string) int64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "herald:%s:%s.%s", purpose, db, schema)
	return int64(h.Sum64())
}

// wakeChannels names each lane's NOTIFY channel, suffixed with the first 8
// hex digits of md5("database.schema") (a channel name is an identifier: at
// most 63 bytes). qWakeHash names them alike in SQL.
func wakeChannels(db, schema string) (map[heraldtype.Lane]string, map[string]heraldtype.Lane) {
	sum := md5.Sum([]byte(db + "." + schema))
	suffix := hex.EncodeToString(sum[:])[:8]
	byLane := make(map[heraldtype.Lane]string, len(heraldtype.Lanes))
	byName := make(map[string]heraldtype.Lane, len(heraldtype.Lanes))
	for _, l := range heraldtype.Lanes {
		name := "herald_wake_" + suffix + "_" + string(l)
		byLane[l], byName[name] = name, l
	}
	return byLane, byName
}

// Close stops the listener and leader election (releasing the leader lock)
// and closes the pool. Calls in flight finish first.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.notify.stop()
	s.wg.Wait()
	s.pipe.close()
	s.claims.Close()
	s.holdMu.Lock()
	if s.holdPool != nil {
		s.holdPool.Close()
	}
	s.holdMu.Unlock()
	s.pool.Close()
	return nil
}

// goBackground registers a background loop with Close, or reports ErrClosed.
func (s *Store) goBackground() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	s.wg.Add(1)
	return nil
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// fail wraps err with what was being done; after Close it is ErrClosed.
func (s *Store) fail(what string, err error) error {
	if s.isClosed() {
		return fmt.Errorf("%s: %w", what, store.ErrClosed)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// sqlState is the SQLSTATE of the server's error in err's chain, "" for
// an error the server did not send.
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// The SQLSTATEs herald branches on.
const (
	pgLockNotAvailable      = "55P03" // lock_timeout
	pgDeadlockDetected      = "40P01"
	pgUndefinedObject       = "42704"
	pgInsufficientPrivilege = "42501"
)

// Wakeups returns the wake-up signals: local ones and, through LISTEN, those
// of every process on this database and schema.
func (s *Store) Wakeups() *store.Wakeups { return s.wakeups }

// Ping checks that the database answers and accepts writes.
func (s *Store) Ping(ctx context.Context) error {
	var writable bool
	if err := s.pool.QueryRow(ctx, qPing).Scan(&writable); err != nil {
		return s.fail("ping postgres", err)
	}
	if !writable {
		return errors.New("ping postgres: the server is read-only")
	}
	return nil
}

// now is the $1 of every statement that needs the time: NULL (the server's
// clock) unless a test clock was given.
func (s *Store) now() any {
	if s.clock == nil {
		return nil
	}
	return s.clock.Now()
}

func utc(t time.Time) time.Time { return t.UTC() }

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// nullInt is n, or NULL for 0.
func nullInt(n int) *int {
	if n == 0 {
		return nil
	}
	return &n
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

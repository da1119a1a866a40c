// Package app wires a Config into a running herald: store, providers,
// sender, the transport's dispatchers, sweeps, the watchdog, reconciliation,
// the inbox's retention purge and the HTTP API. cmd/herald
// and the in-process tests both start herald through it.
package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/broker/rabbitmq"
	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/httpapi"
	"github.com/heraldhq/herald/inbox"
	"github.com/heraldhq/herald/intake"
	"github.com/heraldhq/herald/limits"
	"github.com/heraldhq/herald/lookup"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/parked"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/sim"
	"github.com/heraldhq/herald/reconcile"
	"github.com/heraldhq/herald/retention"
	"github.com/heraldhq/herald/seal"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/settle"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/postgres"
	"github.com/heraldhq/herald/store/sqlite"
	"github.com/heraldhq/herald/stream"
	"github.com/heraldhq/herald/sweep"
	"github.com/heraldhq/herald/watchdog"
)

// The alerts herald logs itself: at most alertBurst of one kind and reason
// a window of alertWindow, then one line counting the rest (alert.Coalesce).
const (
	alertWindow = time.Minute
	alertBurst  = 10
)

// Options are the seams tests use; production leaves them zero.
type Options struct {
	Logger *slog.Logger
	Clock  clock.Clock
	// Providers replaces configured providers by name.
	Providers map[string]provider.Provider
	Alerts    alert.Sink
	Hooks     sender.Hooks
	// Listener, when set, is used instead of listening on cfg.Listen;
	// MetricsListener instead of listening on cfg.Metrics.Listen (Bind
	// makes both).
	Listener        net.Listener
	MetricsListener net.Listener
	// OpenFiles stands for the process's open files limit (tests); 0 reads
	// it (RLIMIT_NOFILE). See listenerConns.
	OpenFiles uint64
}

// App is a wired herald.
type App struct {
	cfg      *config.Config
	logger   *slog.Logger
	store    store.Store
	sender   *sender.Sender
	metrics  *metrics.Metrics
	registry *provider.Registry
	sims     map[string]*sim.Sim
	// seal seals and opens personal data (personal_data.keys); nil when
	// none are configured.
	seal *seal.Keyring
	// receivers take delivery reports, checkers answer status look-ups
	// (providers.go).
	receivers map[string]provider.CallbackReceiver
	checkers  map[string]provider.StatusChecker
	// closers are the adapters that hold connections of their own, closed
	// once the sends have ended.
	closers map[string]interface{ Close() error }
	// stopSimReports ends the simulators' delivery reports (providers.go).
	stopSimReports context.CancelFunc
	// limiter holds the providers' shared rate limits (nil: none); the
	// sender and the status look-ups both spend from it.
	limiter sender.Limiter
	// quotas holds the tenants' send quotas per lane with the other rates
	// of package limits (nil: none), shared by intake and the campaign
	// fan-out.
	quotas   *limits.Limiter
	handler  http.Handler
	listener net.Listener
	owner    string
	draining atomic.Bool
	stopping atomic.Bool // SIGTERM came: /readyz says so through shutdown_delay
	alerts   alert.Sink
	// coalesce is alerts when herald logs them itself (no Options.Alerts).
	coalesce *alert.Coalesce
	clock    clock.Clock
	parked   parked.Service
	// metricsListener serves /metrics alone (config metrics.listen).
	metricsListener net.Listener
	// gauges are the store's gauges, computed by the leader (gauges.go).
	gauges *storeGauges
	// reconciler runs the leader's scheduled reconciliations.
	reconciler *reconcile.Reconciler
	// rabbit is the rabbitmq transport's relays and consumers, one of each
	// per lane; nil with transport db.
	rabbit []rabbitLane
	// claimers are the db transport's, one a lane.
	claimers map[heraldtype.Lane]*dispatch.Claimer
	// handoff are the claimers or the relays, by lane, that intake hands
	// rows due now (dispatch, "Rows handed over at intake").
	handoff dispatch.Lanes
	// streams are the live inbox streams of GET /v1/me/stream.
	streams *stream.Hub
	// listenConns caps each listener's open connections: max_connections,
	// or less under a low open files limit (listenerConns).
	listenConns int
}

// New opens the store and wires every component. It does not start anything.
func New(ctx context.Context, cfg *config.Config, opts Options) (*App, error) {
	a := &App{cfg: cfg, logger: opts.Logger, clock: opts.Clock, sims: map[string]*sim.Sim{}}
	if a.logger == nil {
		a.logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if a.clock == nil {
		a.clock = clock.Real{}
	}
	a.alerts = opts.Alerts
	if a.alerts == nil {
		// A flood of one cause logs its first alerts and then a count a
		// minute (alert.Coalesce); herald_alerts_total counts every one.
		a.coalesce = &alert.Coalesce{Next: alert.Log{Logger: a.logger}, Every: alertWindow, Burst: alertBurst}
		a.alerts = a.coalesce
	}
	files := cmp.Or(opts.OpenFiles, openFilesLimit())
	conns, lowered, err := listenerConns(cfg, files)
	if err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	a.listenConns = conns
	if lowered {
		a.logger.LogAttrs(ctx, slog.LevelWarn, "app: the open files limit leaves the API listener fewer connections than server.max_connections; more wait in the accept queue",
			slog.Uint64("open_files", files), slog.Int("max_connections", cfg.Server.MaxConnections), slog.Int("connections", conns))
	}
	host, _ := os.Hostname()
	a.owner = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), strconv.FormatInt(time.Now().UnixNano()%1e6, 36))

	cat, err := catalog.New(cfg.Kinds)
	if err != nil {
		return nil, err
	}
	cat.SendAtHorizon = cfg.SendAtHorizon.D()
	if a.seal, err = Keyring(cfg); err != nil {
		return nil, err
	}
	if a.seal == nil && cfg.Environment == config.EnvProduction {
		a.logger.LogAttrs(ctx, slog.LevelWarn, "app: no personal_data keys: addresses, device tokens and params are stored as plain text")
	}
	for _, w := range append(cfg.ProductionWarnings(), cfg.QuietHoursWarnings()...) {
		a.logger.LogAttrs(ctx, slog.LevelWarn, "app: "+w)
	}
	if err := a.buildProviders(cfg, opts); err != nil {
		return nil, err
	}

	a.store, err = openStore(ctx, cfg, a.clock, a.logger)
	if err != nil {
		return nil, err
	}
	// The gauges that read the store, from memory (gauges.go).
	a.gauges = &storeGauges{backlogOf: a.store.OutboxBacklog, figuresOf: a.reconcileFigures, logger: a.logger,
		staleAfter: 3 * cfg.Metrics.RefreshInterval.D()}
	a.metrics = metrics.New(a.gauges.Backlog)
	a.wireSimReports()
	a.metrics.Declare(knownSeries(cfg, cat))
	a.metrics.WatchReconcile(reconcile.Kinds, a.gauges.Figures)
	a.metrics.WatchLeader(leaderCheck(a.store))
	a.reconciler, err = Reconciler(cfg, a.store, ReconcileOptions{
		RunBy: "server " + a.owner, Logger: a.logger, Alerts: a.alerts, Metrics: a.metrics, Clock: a.clock,
	})
	if err != nil {
		a.store.Close()
		return nil, err
	}
	a.limiter = rateLimiter(cfg, a.store, a.logger)
	a.sender = sender.New(sender.Config{
		Store: a.store, Providers: a.registry, Catalog: cat, Clock: a.clock, Seal: a.seal,
		Limiter: a.limiter, Checks: a.policyChecks(),
		Retry: sender.RetryPolicy{
			Quick: cfg.Retry.Quick, QuickDelay: cfg.Retry.QuickDelay.D(),
			Slow: cfg.Retry.Slow, SlowDelay: cfg.Retry.SlowDelay.D(),
		},
		Owner: a.owner, Logger: a.logger, Alerts: a.alerts, Metrics: a.metrics, Hooks: opts.Hooks,
		RecordTimeout: RecordTimeout(cfg),
	})
	a.parked = Parked(cfg, parked.Counted(a.store, a.metrics, a.logger), a.logger)
	keys := map[string]string{}
	for _, k := range cfg.APIKeys {
		keys[k.Key] = k.Tenant
	}
	a.handoff = dispatch.Lanes{}
	if cfg.Transport == "rabbitmq" {
		a.rabbit = a.newRabbitMQ()
		for _, rl := range a.rabbit {
			a.handoff[rl.lane] = rl.relay
		}
	} else {
		a.claimers = a.newClaimers()
		for lane, c := range a.claimers {
			a.handoff[lane] = c
		}
	}
	operators := map[string]string{}
	for _, k := range cfg.OperatorKeys {
		operators[k] = "operator"
	}
	tokens, err := recipientTokens(cfg, a.clock)
	if err != nil {
		a.store.Close()
		return nil, err
	}
	a.streams = stream.New(stream.Config{
		Store: a.store, Signals: a.store.InboxSignals(), MaxStreams: cfg.Inbox.StreamsMax, MaxPerRecipient: cfg.Inbox.StreamsPerRecipient,
		MaxPerTenant: cfg.Inbox.StreamsPerTenant,
		Heartbeat:    cfg.Inbox.StreamHeartbeat.D(), Resync: cfg.Inbox.StreamResync.D(),
		Clock: a.clock, Logger: a.logger, Metrics: a.metrics,
	})
	apiKeys, lim, auditLog := a.security(cfg) // keys.go
	a.quotas = lim
	a.handler = httpapi.New(httpapi.Config{
		Keys:      auth.NewKeys(keys),
		APIKeys:   apiKeys,
		Limits:    lim,
		Audit:     auditLog,
		Now:       a.clock.Now,
		Operators: auth.NewKeys(operators),
		Seal:      a.seal,
		Intake: &intake.Handler{
			Store: a.store, Catalog: cat, Clock: a.clock, IdempotencyTTL: cfg.IdempotencyTTL.D(), Seal: a.seal,
			Logger: a.logger, Metrics: a.metrics, Quotas: lim, Handoff: a.handoff,
		},
		Lookup: &lookup.Handler{Store: a.store, Logger: a.logger},
		Callbacks: &settle.CallbackHandler{
			Store: a.store, Receivers: a.receivers, Metrics: a.metrics, Logger: a.logger, Alerts: a.alerts,
		},
		Parked:  a.parked,
		Store:   a.store,
		Metrics: a.metrics,
		Logger:  a.logger,
		Ready:   http.HandlerFunc(a.serveReadyz),
		Stream:  a.streams,
		Inbox:   &inbox.API{Store: a.store, Tokens: tokens, Metrics: a.metrics, Logger: a.logger},
		// /metrics: on its own listener, behind a token (server.go).
		MetricsToken: cfg.Metrics.Token(), MetricsApart: cfg.Metrics.Listen != "",
		// A page past it is refused whole (campaign.Service.MaxRecipients).
		CampaignMaxRecipients: cfg.Limits.CampaignCap(),
		// Each costs up to about 150 MB while it is read (hardening.md).
		CampaignBodies:   cfg.Limits.CampaignBodies,
		CampaignDraftTTL: cfg.CampaignDraftTTL.D(),
	})
	a.listener, a.metricsListener = opts.Listener, opts.MetricsListener
	return a, nil
}

func openStore(ctx context.Context, cfg *config.Config, clk clock.Clock, logger *slog.Logger) (store.Store, error) {
	driver, dsn, err := cfg.DatabaseDriver()
	if err != nil {
		return nil, err
	}
	switch driver {
	case "sqlite":
		return sqlite.Open(ctx, dsn, sqlite.Options{Clock: clk, Logger: logger})
	case "postgres":
		// With clock.Real the store takes every ownership time from the
		// database server's clock.
		// A relay's held claim (store.OutboxHolder) is given up as a lease
		// runs out, when its process stops without dying; two lanes' relays
		// hold claims at full pace before a third waits for a connection.
		return postgres.Open(ctx, dsn, postgres.Options{Clock: clk, Logger: logger, HoldTimeout: cfg.Lease.D(),
			HoldConns: 2 * (cfg.RabbitMQ.RelayInFlight + 2)})
	}
	return nil, fmt.Errorf("database driver %q is not available in this build", driver)
}

// Keyring is the personal data keyring of cfg's personal_data.keys, nil
// when there are none.
func Keyring(cfg *config.Config) (*seal.Keyring, error) {
	keys, err := cfg.PersonalDataKeys()
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, nil
	}
	ring := make([]seal.Key, len(keys))
	for i, k := range keys {
		ring[i] = seal.Key{ID: k.ID, Secret: k.Secret}
	}
	k, err := seal.New(ring)
	if err != nil {
		return nil, fmt.Errorf("config: personal_data: %w", err)
	}
	return k, nil
}

// warmer opens the connections the claims and sends will use before they
// need them (PostgreSQL).
type warmer interface {
	WarmUp(ctx context.Context) error
}

var _ warmer = (*postgres.Store)(nil)

// WarmUp opens the database connections the claims and the first sends
// use, before Run's claimers and senders ask for them (PostgreSQL: the
// claim pool's and a few of the main pool's; nothing on SQLite), so the
// notifications committed as a server starts under load do not wait for
// them. herald serve calls it before Run. It is best effort: a failure is
// logged, and a claim or a send opens what is still missing.
func (a *App) WarmUp(ctx context.Context) {
	if w, ok := a.store.(warmer); ok {
		if err := w.WarmUp(ctx); err != nil {
			a.logger.LogAttrs(ctx, slog.LevelWarn, "app: could not open the database connections ahead", slog.Any("error", err))
		}
	}
}

// leaderElector is a store shared by several processes that elects one of
// them to run the leader-only sweeps (PostgreSQL's advisory lock). A store
// without it (SQLite: one process) is always the leader.
type leaderElector interface {
	RunLeaderElection(ctx context.Context) error
	IsLeader() bool
}

var _ leaderElector = (*postgres.Store)(nil)

// leaderCheck is st's IsLeader, or nil for a store without an election
// (SQLite: the one process always leads), as the leader-only loops and
// the leader gauge take it.
func leaderCheck(st store.Store) func() bool {
	if le, ok := st.(leaderElector); ok {
		return le.IsLeader
	}
	return nil
}

// Store returns the store (tests inspect it).
func (a *App) Store() store.Store { return a.store }

// Sim returns the simulated provider of that name, if one was built.
func (a *App) Sim(name string) *sim.Sim { return a.sims[name] }

// Handler returns the HTTP handler.
func (a *App) Handler() http.Handler { return a.handler }

// Listen binds the HTTP address (unless a listener was given), and
// metrics.listen's when it is set, and returns the first.
func (a *App) Listen() (net.Addr, error) {
	if a.listener == nil {
		l, err := bind("", a.cfg.Listen)
		if err != nil {
			return nil, err
		}
		a.listener = l
	}
	if a.cfg.Metrics.Listen != "" && a.metricsListener == nil {
		l, err := bind("metrics.listen ", a.cfg.Metrics.Listen)
		if err != nil {
			return nil, err
		}
		a.metricsListener = l
	}
	return a.listener.Addr(), nil
}

// Bind binds cfg's HTTP address and metrics.listen's when it is set, for
// Options.Listener and Options.MetricsListener: herald serve binds before
// New opens (and migrates) the database, so a port already taken stops it
// with nothing written. The caller closes both when New fails.
func Bind(cfg *config.Config) (http, metrics net.Listener, err error) {
	if http, err = bind("", cfg.Listen); err != nil {
		return nil, nil, err
	}
	if cfg.Metrics.Listen != "" {
		if metrics, err = bind("metrics.listen ", cfg.Metrics.Listen); err != nil {
			http.Close()
			return nil, nil, err
		}
	}
	return http, metrics, nil
}

func bind(what, addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s%s: %w", what, addr, err)
	}
	return l, nil
}

// MetricsAddr is metrics.listen's bound address once Listen ran; nil
// without metrics.listen.
func (a *App) MetricsAddr() net.Addr {
	if a.metricsListener == nil {
		return nil
	}
	return a.metricsListener.Addr()
}

// Run serves until ctx is cancelled, then drains: it stops accepting HTTP
// requests and claiming rows, lets in-flight sends finish and record, and
// closes the store. It returns nil after a clean drain.
func (a *App) Run(ctx context.Context) error {
	if _, err := a.Listen(); err != nil {
		return err
	}
	if _, elects := a.store.(leaderElector); !elects {
		a.gauges.refresh(ctx, time.Now()) // the only process leads: /metrics has them from the start
	}
	srv := httpServer(a.cfg.Server, a.refuseWhileDraining(a.handler), a.logger) // server.go: timeouts and limits
	serveErr := make(chan error, 2)
	go func() { serveErr <- srv.Serve(limitConns(a.listener, a.listenConns)) }()
	var metricsSrv *http.Server
	if a.metricsListener != nil {
		metricsSrv = a.metricsServer()
		go func() { serveErr <- metricsSrv.Serve(limitConns(a.metricsListener, a.listenConns)) }()
	}

	work, stopWork := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	if a.cfg.Transport == "db" {
		for _, c := range a.claimers {
			wg.Add(1)
			go func() { defer wg.Done(); c.Run(work) }()
		}
	} else {
		a.runRabbitMQ(work, &wg)
	}
	isLeader := leaderCheck(a.store)
	if le, ok := a.store.(leaderElector); ok {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := le.RunLeaderElection(work); err != nil {
				a.logger.Warn("herald: leader election stopped", slog.Any("error", err))
			}
		}()
	}
	wg.Add(1)
	go func() { defer wg.Done(); a.gauges.run(work, a.cfg.Metrics.RefreshInterval.D(), isLeader) }()
	if a.coalesce != nil {
		wg.Add(1)
		go func() { defer wg.Done(); a.coalesce.Run(work) }()
	}
	sw := sweep.New(sweep.Config{
		Store: a.store, StaleClaimAfter: a.cfg.StaleClaimAfter.D(), Interval: a.cfg.SweepInterval.D(),
		IsLeader: isLeader, Logger: a.logger, Alerts: a.alerts, Metrics: a.metrics,
	})
	wg.Add(1)
	go func() { defer wg.Done(); sw.Run(work) }()
	// The watchdog moves on what the sweeps and the transport left without
	// an owner; leader-only like the sweeps.
	wdc := watchdogConfig(a.cfg)
	wdc.Store, wdc.IsLeader, wdc.Logger, wdc.Alerts, wdc.Metrics = a.store, isLeader, a.logger, a.alerts, a.metrics
	wd := watchdog.New(wdc)
	wg.Add(1)
	go func() { defer wg.Done(); wd.Run(work) }()
	// The inbox's retention purge, leader-only too, every purge_interval.
	purger := retention.New(retentionConfig(a.cfg, a.store, isLeader, a.clock, a.logger, a.metrics))
	wg.Add(1)
	go func() { defer wg.Done(); purger.Run(work) }()
	a.runSuppressionPurge(work, &wg, isLeader) // old event keys, leader-only too
	a.runCampaigns(work, &wg, isLeader)        // campaign fan-out, leader-only too
	// Reconciliation, leader-only too, every reconcile_interval.
	wg.Add(1)
	go func() { defer wg.Done(); a.reconciler.Loop(work, a.cfg.ReconcileInterval.D(), isLeader) }()
	// Status look-ups of UNKNOWN deliveries, leader-only too.
	looker := settle.NewLooker(settle.LookupConfig{
		Store: a.store, Checkers: a.checkers, Interval: a.cfg.LookupInterval.D(), IsLeader: isLeader, Limiter: a.limiter,
		Clock: a.clock, Logger: a.logger, Metrics: a.metrics, Alerts: a.alerts,
	})
	wg.Add(1)
	go func() { defer wg.Done(); looker.Run(work) }()

	var runErr error
	select {
	case <-ctx.Done():
		if d := a.cfg.ShutdownDelay.D(); d > 0 {
			// Not ready, still serving: a load balancer polling /readyz
			// takes this process out before its listener closes.
			a.stopping.Store(true)
			a.logger.Info("herald: stopping; /readyz answers 503 until the drain begins", slog.Duration("shutdown_delay", d))
			select {
			case <-time.After(d):
			case err := <-serveErr:
				runErr = fmt.Errorf("http server: %w", err)
			}
		}
	case err := <-serveErr:
		runErr = fmt.Errorf("http server: %w", err)
	}

	// Draining first, then the log line: a request that reaches a handler
	// after anyone could see "draining" is refused (refuseWhileDraining),
	// even if the listener has not closed yet.
	a.draining.Store(true)
	a.logger.Info("herald: draining")
	deadline := time.Now().Add(a.cfg.ShutdownTimeout.D())
	sctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	// End the live streams: Shutdown waits for the requests in flight, and
	// a stream would last until the deadline. Their apps resume elsewhere
	// with Last-Event-ID.
	a.streams.Close()
	// Stop accepting requests first (in-flight intake requests finish and
	// commit), then stop claiming and wait for the sends in flight.
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		a.logger.Warn("herald: http shutdown", slog.Any("error", err))
	}
	if metricsSrv != nil {
		_ = metricsSrv.Close()
	}
	stopWork()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-sctx.Done():
		// SIGTERM still ends in exit 0 (DESIGN §8): what the drain left
		// behind is owned. A claimed send whose call outlived the drain
		// stays SENDING and becomes UNKNOWN after stale_claim_after (never
		// resent); unclaimed rows come back after their lease.
		a.logger.Error("herald: drain timed out; sends still in flight are abandoned and become UNKNOWN after stale_claim_after",
			slog.Duration("shutdown_timeout", a.cfg.ShutdownTimeout.D()))
	}
	if a.coalesce != nil {
		// What the drain raised after the windows' goroutine stopped.
		a.coalesce.Flush(context.Background())
	}
	a.closeProviders()
	if err := a.store.Close(); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("close store: %w", err))
	}
	a.logger.Info("herald: stopped")
	return runErr
}

// retentionConfig is the inbox purge cfg asks for (config inbox:
// retention, tenant_retention, purge_interval, purge_batch).
func retentionConfig(cfg *config.Config, st retention.Store, isLeader func() bool, clk clock.Clock, logger *slog.Logger, m *metrics.Metrics) retention.Config {
	c := retention.Config{
		Store: st, Retention: cfg.Inbox.Retention.D(), TenantRetention: map[string]time.Duration{},
		Interval: cfg.Inbox.PurgeInterval.D(), Batch: cfg.Inbox.PurgeBatch,
		IsLeader: isLeader, Clock: clk, Logger: logger, Metrics: m,
	}
	for t, d := range cfg.Inbox.TenantRetention {
		c.TenantRetention[t] = d.D()
	}
	return c
}

// Topology is the broker topology cfg asks for: its prefix, its delivery
// limit, single active consumer, and retry queues for the sender's quick and
// slow delays besides the defaults.
func Topology(cfg *config.Config) rabbitmq.Topology {
	return rabbitmq.Topology{
		Prefix:               cfg.RabbitMQ.Prefix,
		RetryDelays:          append([]time.Duration{cfg.Retry.QuickDelay.D(), cfg.Retry.SlowDelay.D()}, rabbitmq.DefaultRetryDelays...),
		DeliveryLimit:        cfg.RabbitMQ.DeliveryLimit,
		SingleActiveConsumer: cfg.RabbitMQ.SingleActiveConsumer,
	}.WithDefaults()
}

// Parked returns the parked-message service of cfg's transport: the
// parking queue for rabbitmq, the PARKED deliveries for db.
func Parked(cfg *config.Config, st store.Store, logger *slog.Logger) parked.Service {
	if cfg.Transport == "rabbitmq" {
		return &rabbitmq.Parking{URL: cfg.RabbitMQURL, Topology: Topology(cfg), Store: st,
			ConfirmTimeout: cfg.RabbitMQ.ConfirmTimeout.D(), Logger: logger}
	}
	return parked.DB{Store: st}
}

// rabbitLane is one lane's share of the rabbitmq transport: a relay with
// its publisher, and a consumer that hands messages to the sender.
type rabbitLane struct {
	lane  heraldtype.Lane
	pub   *rabbitmq.Publisher
	relay *dispatch.Relay
	cons  *rabbitmq.Consumer
}

// newRabbitMQ builds, per lane, a relay with its publisher and a consumer.
func (a *App) newRabbitMQ() []rabbitLane {
	topo := Topology(a.cfg)
	var lanes []rabbitLane
	for _, lane := range heraldtype.Lanes {
		pub := rabbitmq.NewPublisher(rabbitmq.PublisherConfig{
			URL: a.cfg.RabbitMQURL, Name: fmt.Sprintf("herald-relay-%s-%s", lane, a.owner), Topology: topo,
			ConfirmTimeout: a.cfg.RabbitMQ.ConfirmTimeout.D(), Bundle: a.cfg.RabbitMQ.RelayBundle, Logger: a.logger,
		})
		relay := dispatch.NewRelay(dispatch.RelayConfig{
			Lane: lane, Store: a.store, Wake: a.store.Wakeups().C(lane), Publisher: pub, Owner: a.owner,
			Window: a.cfg.LanePublishWindow(lane), Express: a.cfg.LaneReserve(lane) > 0,
			Backlog:   func(ctx context.Context) (int, error) { return pub.Backlog(ctx, lane) },
			BatchSize: a.cfg.RabbitMQ.RelayBatch, InFlight: a.cfg.RabbitMQ.RelayInFlight, Lease: a.cfg.Lease.D(),
			PollInterval: a.cfg.PollInterval.D(), Cooldown: a.cfg.Cooldown(), MaxAttempts: a.cfg.DispatchMaxAttempts,
			Logger: a.logger, Alerts: a.alerts, Metrics: a.metrics, Gate: a.relayGate(lane),
		})
		cons := rabbitmq.NewConsumer(rabbitmq.ConsumerConfig{
			URL: a.cfg.RabbitMQURL, Name: fmt.Sprintf("herald-consumer-%s-%s", lane, a.owner), Lane: lane, Topology: topo,
			Sender: a.sender, Concurrency: a.cfg.LaneConcurrency(lane), Prefetch: a.cfg.LanePrefetch(lane),
			Bundle: a.cfg.RabbitMQ.RelayBundle, Reserve: a.cfg.LaneReserve(lane),
			ConfirmTimeout: a.cfg.RabbitMQ.ConfirmTimeout.D(), Logger: a.logger, Metrics: a.metrics, Alerts: a.alerts,
			Outbox: a.store,
		})
		lanes = append(lanes, rabbitLane{lane: lane, pub: pub, relay: relay, cons: cons})
	}
	return lanes
}

// runRabbitMQ starts every lane's relay, publisher and consumer. The relays
// stop first when work ends; their publishers stay connected until the
// relays have settled the batches in flight.
func (a *App) runRabbitMQ(work context.Context, wg *sync.WaitGroup) {
	pubCtx, stopPub := context.WithCancel(context.Background())
	var relays sync.WaitGroup
	for _, rl := range a.rabbit {
		wg.Add(3)
		relays.Add(1)
		go func() { defer wg.Done(); rl.pub.Run(pubCtx) }()
		go func() { defer wg.Done(); defer relays.Done(); rl.relay.Run(work) }()
		go func() { defer wg.Done(); rl.cons.Run(work) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); relays.Wait(); stopPub() }()
}

// Close releases the store of an App that was never Run.
func (a *App) Close() error {
	a.streams.Close()
	a.closeProviders()
	return a.store.Close()
}

// newClaimers makes the db transport's claimers, one a lane; Run starts them.
func (a *App) newClaimers() map[heraldtype.Lane]*dispatch.Claimer {
	lanes := map[heraldtype.Lane]*dispatch.Claimer{}
	for _, lane := range heraldtype.Lanes {
		lanes[lane] = dispatch.NewClaimer(dispatch.ClaimerConfig{
			Lane: lane, Store: a.store, Wake: a.store.Wakeups().C(lane), Sender: a.sender, Owner: a.owner,
			Concurrency: a.cfg.LaneConcurrency(lane), Reserve: a.cfg.LaneReserve(lane), Gather: a.cfg.LaneConcurrency(lane) / 2,
			Lease: a.cfg.Lease.D(), PollInterval: a.cfg.PollInterval.D(), Cooldown: a.cfg.Cooldown(),
			MaxAttempts: a.cfg.DispatchMaxAttempts, Logger: a.logger, Alerts: a.alerts, Metrics: a.metrics,
			Gate: a.dispatchGate(),
		})
	}
	return lanes
}

// RecordTimeout is how long a sender keeps trying to write a provider's
// answer before it gives up (RECORD_FAILED): half of stale_claim_after,
// at least 30 s. The answer is in the sender's memory alone, and the
// claim stays SENDING until the stale sweep makes it UNKNOWN at
// stale_claim_after; a database failover of a minute or two must not turn
// answers herald holds into UNKNOWNs a person settles (an SRE's walk cut
// the database for 40 s: 50 accepted sends ended UNKNOWN at the old 30 s).
// Half leaves the provider call its timeout and the write its last tries
// before the sweep. A send's slot stays taken meanwhile, which costs
// nothing while the database is away.
func RecordTimeout(cfg *config.Config) time.Duration {
	return max(30*time.Second, cfg.StaleClaimAfter.D()/2)
}

package watchdog_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/internal/testsqlite"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/metrics/metricstest"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/sim"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/postgres"
	"github.com/heraldhq/herald/store/sqlite"
	"github.com/heraldhq/herald/watchdog"
)

const lane = heraldtype.LaneTransactional

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// world is one test's herald parts: a fresh store on a fake clock, the
// simulated provider counting calls, the one sender, and what is alerted
// and counted.
type world struct {
	driver  string
	dsn     string // the SQLite file, or the PostgreSQL URL
	store   store.Store
	clk     *clock.Fake
	sim     *sim.Sim
	snd     *sender.Sender
	alerts  *alert.Recorder
	metrics *metrics.Metrics
	ctx     context.Context
}

func open(t *testing.T, driver string, start time.Time) *world {
	t.Helper()
	w := &world{driver: driver, clk: clock.NewFake(start), sim: sim.New(sim.Config{}), alerts: &alert.Recorder{},
		metrics: metrics.New(nil), ctx: context.Background()}
	var err error
	switch driver {
	case "sqlite":
		w.dsn = testsqlite.Path(t)
		w.store, err = sqlite.Open(w.ctx, w.dsn, sqlite.Options{Clock: w.clk})
	case "postgres":
		w.dsn = testpg.Schema(t)
		w.store, err = postgres.Open(w.ctx, w.dsn, postgres.Options{Clock: w.clk, Logger: quiet})
	}
	if err != nil {
		t.Fatalf("open %s: %v", driver, err)
	}
	t.Cleanup(func() {
		if err := w.store.Close(); err != nil {
			t.Errorf("close the store: %v", err)
		}
	})
	cat, err := catalog.New([]config.Kind{{Name: "pay", Category: "transactional", Channels: []string{"webhook"},
		Templates: map[string]config.Template{"webhook": {Title: "Paid", Body: "Paid"}}}})
	if err != nil {
		t.Fatal(err)
	}
	reg := provider.NewRegistry()
	reg.Register(heraldtype.ChannelWebhook, "sim", w.sim)
	w.snd = sender.New(sender.Config{Store: w.store, Providers: reg, Catalog: cat, Clock: w.clk, Owner: "test", Logger: quiet,
		Alerts: w.alerts, Metrics: w.metrics})
	return w
}

// eachStore runs test on SQLite and on PostgreSQL.
func eachStore(t *testing.T, test func(t *testing.T, driver string)) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			test(t, driver)
		})
	}
}

// watchdog returns a watchdog on w's store with the default graces.
func (w *world) watchdog(broker bool, leader func() bool) *watchdog.Watchdog {
	return watchdog.New(watchdog.Config{Store: w.store, Broker: broker, IsLeader: leader, Logger: quiet,
		Alerts: w.alerts, Metrics: w.metrics})
}

// notify creates a notification of kind pay and returns its message id.
func (w *world) notify(t *testing.T) string {
	t.Helper()
	return w.notifyExpiring(t, nil)
}

// notifyExpiring is notify with an expires_at.
func (w *world) notifyExpiring(t *testing.T, expires *time.Time) string {
	t.Helper()
	id := ids.New("ntf", w.clk.Now())
	_, err := w.store.NotificationCreate(w.ctx, store.NotificationCreateParams{
		Tenant: "t1", ID: id, Recipient: "r1", EventID: id, Kind: "pay", Lane: lane, ExpiresAt: expires,
		Params: json.RawMessage(`{}`), Channels: []heraldtype.Channel{heraldtype.ChannelWebhook},
	})
	if err != nil {
		t.Fatal(err)
	}
	return store.MessageID(id, heraldtype.ChannelWebhook)
}

// strand leaves messageID's delivery waiting in RETRY_WAIT, due a minute
// ago, behind an outbox row in outboxState, by editing the database as a
// lost write or a copy that closed the path back would leave it: no
// provider call is made.
func (w *world) strand(t *testing.T, messageID string, outboxState heraldtype.OutboxState) {
	t.Helper()
	now := w.clk.Now()
	due := now.Add(-time.Minute)
	id := messageID[:len(messageID)-len(".webhook")]
	switch w.driver {
	case "sqlite":
		db, err := sql.Open("sqlite", sqlite.DSN(w.dsn))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{`UPDATE outbox SET state = ?, updated_at = ? WHERE message_id = ?`, []any{string(outboxState), now.UnixMilli(), messageID}},
			{`INSERT INTO deliveries (message_id, notification_id, tenant, channel, provider, state, reason, attempts, next_attempt_at, created_at, updated_at)
VALUES (?, ?, 't1', 'webhook', 'sim', 'RETRY_WAIT', 'HTTP_429', 1, ?, ?, ?)`, []any{messageID, id, due.UnixMilli(), now.UnixMilli(), now.UnixMilli()}},
		} {
			if _, err := db.ExecContext(w.ctx, q.sql, q.args...); err != nil {
				t.Fatalf("%s: %v", q.sql, err)
			}
		}
	case "postgres":
		conn, err := pgx.Connect(w.ctx, w.dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(w.ctx)
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{`UPDATE outbox SET state = $1, updated_at = $2 WHERE message_id = $3`, []any{string(outboxState), now, messageID}},
			{`INSERT INTO deliveries (message_id, notification_id, tenant, channel, provider, state, reason, attempts, next_attempt_at, created_at, updated_at)
VALUES ($1, $2, 't1', 'webhook', 'sim', 'RETRY_WAIT', 'HTTP_429', 1, $3, $4, $4)`, []any{messageID, id, due, now}},
		} {
			if _, err := conn.Exec(w.ctx, q.sql, q.args...); err != nil {
				t.Fatalf("%s: %v", q.sql, err)
			}
		}
	}
}

func (w *world) delivery(t *testing.T, messageID string) store.Delivery {
	t.Helper()
	d, err := w.store.DeliveryGet(w.ctx, messageID)
	if err != nil {
		t.Fatalf("DeliveryGet %s: %v", messageID, err)
	}
	return d
}

func (w *world) outboxState(t *testing.T, messageID string) heraldtype.OutboxState {
	t.Helper()
	v, err := w.store.NotificationGet(w.ctx, "t1", messageID[:len(messageID)-len(".webhook")])
	if err != nil {
		t.Fatalf("NotificationGet: %v", err)
	}
	return v.Deliveries[0].OutboxState
}

// round runs one round and fails the test on error.
func round(t *testing.T, w *watchdog.Watchdog, ctx context.Context) watchdog.Report {
	t.Helper()
	r, err := w.Round(ctx)
	if err != nil {
		t.Fatalf("round: %v", err)
	}
	return r
}

// claimOutbox claims messageID's outbox row (the only due row of the lane).
func (w *world) claimOutbox(t *testing.T, messageID string, publishing bool) store.Claimed {
	t.Helper()
	rows, err := w.store.OutboxClaim(w.ctx, store.OutboxClaimParams{Lane: lane, Owner: "c", Limit: 1, Lease: time.Minute, Publishing: publishing})
	if err != nil || len(rows) != 1 || rows[0].MessageID != messageID {
		t.Fatalf("OutboxClaim: %+v (%v), want %s", rows, err, messageID)
	}
	return rows[0]
}

// One of each kind without an owner: a round moves each on, counts it in
// herald_watchdog_redriven_total{lane,kind} and raises a REDRIVEN alert
// with its message id, tenant and reason; the stale claim it settles is
// counted and alerted as the stale sweep would (UNKNOWN, STALE_CLAIM). A
// second round finds nothing.
func TestRoundRedrivesCountsAndAlertsEachKind(t *testing.T) {
	t.Parallel()
	w := open(t, "sqlite", time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	retry := w.notify(t)
	w.strand(t, retry, heraldtype.OutboxDone)
	published := w.notify(t)
	row := w.claimOutbox(t, published, true)
	if n, err := w.store.OutboxMarkPublished(w.ctx, []store.Fence{row.Fence}); err != nil || n != 1 {
		t.Fatalf("mark published: %d (%v)", n, err)
	}
	stale := w.notify(t)
	row = w.claimOutbox(t, stale, false)
	if res, err := w.store.DeliveryClaim(w.ctx, store.DeliveryClaimParams{MessageID: stale, NotificationID: row.NotificationID,
		Tenant: "t1", Channel: heraldtype.ChannelWebhook, Provider: "sim", Owner: "dead"}); err != nil || !res.Claimed {
		t.Fatalf("delivery claim: %+v (%v)", res, err)
	}
	if ok, err := w.store.OutboxComplete(w.ctx, row.Fence, heraldtype.OutboxDone, ""); err != nil || !ok {
		t.Fatalf("complete: %v (%v)", ok, err)
	}
	leased := w.notify(t)
	w.claimOutbox(t, leased, false)
	unmoved := w.unmovedChain(t) // fallback_test.go

	wd := w.watchdog(false, nil)
	cfg := wd.Config()
	w.clk.Advance(max(cfg.RetryGrace, cfg.PublishedGrace, cfg.StaleClaimAfter+cfg.SweepGrace, time.Minute+cfg.SweepGrace) + time.Second)
	r := round(t, wd, w.ctx)
	want := map[store.UnownedKind]int{store.UnownedRetryWait: 1, store.UnownedPublished: 1, store.UnownedSending: 1, store.UnownedLease: 1,
		store.UnownedWaiting: 1}
	if !maps.Equal(r.Found, want) || !maps.Equal(r.Redriven, want) {
		t.Fatalf("round %+v, want one of each kind found and moved on", r)
	}
	wantAlerts := map[alert.Alert]int{
		{Kind: alert.Redriven, MessageID: retry, Tenant: "t1", Reason: watchdog.ReasonRetryWaitUnowned}:        1,
		{Kind: alert.Redriven, MessageID: published, Tenant: "t1", Reason: watchdog.ReasonPublishedNoDelivery}: 1,
		{Kind: alert.Redriven, MessageID: stale, Tenant: "t1", Reason: watchdog.ReasonStaleClaimUnswept}:       1,
		{Kind: alert.StaleClaim, MessageID: stale, Tenant: "t1", Reason: heraldtype.ReasonStaleClaim}:          1,
		{Kind: alert.Redriven, MessageID: leased, Tenant: "t1", Reason: watchdog.ReasonLeaseUnreclaimed}:       1,
		{Kind: alert.Redriven, MessageID: unmoved, Tenant: "t1", Reason: watchdog.ReasonFallbackUnmoved}:       1,
	}
	gotAlerts := map[alert.Alert]int{}
	for _, a := range w.alerts.Alerts() {
		gotAlerts[a]++
	}
	if !maps.Equal(gotAlerts, wantAlerts) {
		t.Fatalf("alerts %v, want %v", gotAlerts, wantAlerts)
	}
	redriven := metricstest.Series(t, w.metrics, "herald_watchdog_redriven_total", "lane", "kind")
	for _, k := range store.UnownedKinds {
		if got := redriven[string(lane)+"/"+string(k)]; got != 1 {
			t.Errorf("herald_watchdog_redriven_total{lane=%s,kind=%s} = %v, want 1", lane, k, got)
		}
	}
	if got := metricstest.Series(t, w.metrics, "herald_alerts_total", "kind"); got[alert.Redriven] != 5 || got[alert.StaleClaim] != 1 {
		t.Errorf("herald_alerts_total %v, want REDRIVEN 5 and STALE_CLAIM 1", got)
	}
	if got := metricstest.Deliveries(t, w.metrics); !maps.Equal(got, map[string]float64{"transactional/webhook/UNKNOWN": 1}) {
		t.Errorf("herald_deliveries_total %v, want the one stale claim's UNKNOWN", got)
	}
	for _, id := range []string{retry, published, leased} {
		if s := w.outboxState(t, id); s != heraldtype.OutboxPending {
			t.Errorf("%s: outbox %s after the round, want PENDING", id, s)
		}
	}
	if d := w.delivery(t, stale); d.State != heraldtype.DeliveryUnknown {
		t.Errorf("stale claim %s after the round, want UNKNOWN", d.State)
	}
	if r := round(t, wd, w.ctx); len(r.Found) != 0 {
		t.Fatalf("second round found %v, want nothing", r.Found)
	}
}

// A round that moves on many rows (a broker that lost a queue's copies)
// logs one warning with the counts, not one a row: each row's alert is
// already held to the alert sink's flood limit, and its own line is
// debug.
func TestARoundLogsOneWarningNotOneARow(t *testing.T) {
	t.Parallel()
	w := open(t, "sqlite", time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	const rows = 5
	for range rows {
		w.strand(t, w.notify(t), heraldtype.OutboxDone)
	}
	var logs bytes.Buffer
	wd := watchdog.New(watchdog.Config{Store: w.store, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Alerts: w.alerts, Metrics: w.metrics})
	w.clk.Advance(wd.Config().RetryGrace + time.Second)
	if r := round(t, wd, w.ctx); r.Redriven[store.UnownedRetryWait] != rows {
		t.Fatalf("round %+v, want %d retry_wait rows moved on", r, rows)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "retry_wait=5") {
		t.Fatalf("the round logged %d warnings, want one with retry_wait=5:\n%s", n, logs.String())
	}
	if n := len(w.alerts.Alerts()); n != rows {
		t.Errorf("%d alerts, want one REDRIVEN a row (%d)", n, rows)
	}
}

// Only the leader's watchdog moves anything: another process's round
// finds and writes nothing, and counts nothing.
func TestANonLeaderDoesNothing(t *testing.T) {
	t.Parallel()
	w := open(t, "sqlite", time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	id := w.notify(t)
	w.strand(t, id, heraldtype.OutboxDone)
	w.clk.Advance(time.Hour)
	wd := w.watchdog(false, func() bool { return false })
	if r := round(t, wd, w.ctx); len(r.Found) != 0 || len(r.Redriven) != 0 {
		t.Fatalf("a non-leader's round %+v, want nothing", r)
	}
	if s := w.outboxState(t, id); s != heraldtype.OutboxDone {
		t.Fatalf("outbox %s after a non-leader's round, want DONE as it was", s)
	}
	if got := len(w.alerts.Alerts()); got != 0 {
		t.Fatalf("%d alerts from a non-leader", got)
	}
	// The leader's round finds it.
	wantRedriven(t, w.watchdog(false, nil), w.ctx, store.UnownedRetryWait)
}

// A round reads at most MaxPages pages of Batch rows of each kind; the next
// round goes on from there (published rows from the store's checkpoint, so
// from where another leader stopped too) until every row was seen.
func TestRoundsGoOnWhereTheLastStopped(t *testing.T) {
	t.Parallel()
	w := open(t, "sqlite", time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	var retries, published []string
	for range 5 {
		id := w.notify(t)
		w.strand(t, id, heraldtype.OutboxFailed)
		retries = append(retries, id)
	}
	for range 5 {
		id := w.notify(t)
		row := w.claimOutbox(t, id, true)
		if n, err := w.store.OutboxMarkPublished(w.ctx, []store.Fence{row.Fence}); err != nil || n != 1 {
			t.Fatalf("mark published: %d (%v)", n, err)
		}
		published = append(published, id)
		w.clk.Advance(time.Millisecond)
	}
	w.clk.Advance(2 * time.Hour)
	small := func() *watchdog.Watchdog {
		return watchdog.New(watchdog.Config{Store: w.store, Batch: 2, MaxPages: 1, Logger: quiet, Alerts: w.alerts})
	}
	wd := small()
	// Retries start again from the first row at a new leader (they are few:
	// only rows still waiting are examined); published rows go on from the
	// checkpoint.
	for i, want := range []map[store.UnownedKind]int{
		{store.UnownedRetryWait: 2, store.UnownedPublished: 2},
		{store.UnownedRetryWait: 2, store.UnownedPublished: 2},
		{store.UnownedPublished: 1}, // a new leader
		{},
		{store.UnownedRetryWait: 1},
	} {
		if i == 2 {
			wd = small()
		}
		r := round(t, wd, w.ctx)
		if !maps.Equal(r.Redriven, want) {
			t.Fatalf("round %d re-drove %v, want %v", i+1, r.Redriven, want)
		}
	}
	for _, id := range published {
		if s := w.outboxState(t, id); s != heraldtype.OutboxPending {
			t.Errorf("%s: outbox %s, want PENDING (re-driven once)", id, s)
		}
	}
	if got := len(w.alerts.Alerts()); got != 10 {
		t.Errorf("%d alerts, want 10: each of the 5 retries and the 5 published rows once", got)
	}
	for _, id := range retries {
		if s := w.outboxState(t, id); s != heraldtype.OutboxPending {
			t.Errorf("%s: outbox %s, want PENDING", id, s)
		}
	}
}

// A retry left behind an outbox row that EXPIRED (a database from before
// the expiry sweep ended such retries itself): the re-drive puts the row
// back to PENDING, no claim takes a row past its expires_at, and the expiry
// sweep ends it again, now with its delivery, SUPPRESSED(EXPIRED). No call.
func TestRedrivenExpiredRetryEndsWithTheExpiry(t *testing.T) {
	t.Parallel()
	w := open(t, "sqlite", time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	expires := w.clk.Now().Add(-time.Second)
	id := w.notifyExpiring(t, &expires)
	w.strand(t, id, heraldtype.OutboxExpired)
	wd := w.watchdog(false, nil)
	w.clk.Advance(wd.Config().RetryGrace + time.Millisecond)
	wantRedriven(t, wd, w.ctx, store.UnownedRetryWait)
	if rows, err := w.store.OutboxClaim(w.ctx, store.OutboxClaimParams{Lane: lane, Owner: "c", Limit: 1, Lease: time.Minute}); err != nil || len(rows) != 0 {
		t.Fatalf("claimed %+v (%v): no claim takes a row past its expires_at", rows, err)
	}
	expired, err := w.store.OutboxExpire(w.ctx, 1000)
	if err != nil || len(expired) != 1 || !expired[0].DeliveryEnded {
		t.Fatalf("expiry %+v (%v), want the row expired again with its delivery ended", expired, err)
	}
	if d := w.delivery(t, id); d.State != heraldtype.DeliverySuppressed || d.Reason != heraldtype.ReasonExpired {
		t.Fatalf("delivery %s(%s), want SUPPRESSED(EXPIRED)", d.State, d.Reason)
	}
	w.clk.Advance(time.Hour)
	wantNothing(t, wd, w.ctx, "after the expiry")
	if n := w.sim.Total(); n != 0 {
		t.Fatalf("%d provider calls, want none", n)
	}
}

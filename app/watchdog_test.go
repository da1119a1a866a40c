package app_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testsqlite"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/sim"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/sqlite"
	"github.com/heraldhq/herald/watchdog"
)

// A running herald's watchdog finds a delivery left in RETRY_WAIT behind a
// finished outbox row (edited into the database: nothing else would ever
// move it) and re-drives it through the claimers and the sender: one
// provider call, PROVIDER_ACCEPTED, one REDRIVEN alert.
func TestServerWatchdogRedrivesAStrandedRetry(t *testing.T) {
	t.Parallel()
	path := testsqlite.Path(t)
	cfg := testConfig(t, "sqlite:"+path, func(c *config.Config) {
		c.WatchdogInterval = config.Duration(20 * time.Millisecond)
		c.PollInterval = config.Duration(20 * time.Millisecond)
		// Reconciliation re-drives what it finds too; here it runs only at
		// the start, before the row is past its grace (waited for below),
		// so the watchdog is what moves it.
		c.ReconcileInterval = config.Duration(24 * time.Hour)
	})
	clk := clock.NewFake(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	counting := sim.New(sim.Config{})
	alerts := &alert.Recorder{}
	a, _ := newHerald(t, cfg, app.Options{Clock: clk, Providers: map[string]provider.Provider{"sim-webhook": counting}, Alerts: alerts})
	ctx := context.Background()
	const id = "ntf_stranded1"
	msg := store.MessageID(id, heraldtype.ChannelWebhook)
	if _, err := a.Store().NotificationCreate(ctx, store.NotificationCreateParams{Tenant: config.DevTenant, ID: id,
		Recipient: "r", EventID: "e", Kind: "payment.approved", Lane: heraldtype.LaneTransactional,
		Params: json.RawMessage(`{"amount":1000,"merchant":"m"}`), Channels: []heraldtype.Channel{heraldtype.ChannelWebhook}}); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", sqlite.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := clk.Now().UnixMilli()
	if _, err := db.ExecContext(ctx, `UPDATE outbox SET state = 'DONE', updated_at = ? WHERE message_id = ?`, now, msg); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO deliveries (message_id, notification_id, tenant, channel, provider, state, reason, attempts, next_attempt_at, created_at, updated_at)
VALUES (?, ?, ?, 'webhook', 'sim-webhook', 'RETRY_WAIT', 'HTTP_429', 1, ?, ?, ?)`, msg, id, config.DevTenant, now, now, now); err != nil {
		t.Fatal(err)
	}
	stop := runHerald(t, a)
	defer stop()
	testenv.WaitFor(t, "the first reconciliation", testenv.Patience, func() bool {
		_, err := a.Store().ReconcileRunLast(ctx)
		return err == nil
	})

	clk.Advance(watchdog.DefaultRetryGrace + time.Second)
	testenv.WaitFor(t, "the stranded retry to be sent", testenv.Patience, func() bool {
		d, err := a.Store().DeliveryGet(ctx, msg)
		return err == nil && d.State == heraldtype.DeliveryProviderAccepted
	})
	stop()
	if n := counting.Total(); n != 1 {
		t.Fatalf("%d provider calls, want 1", n)
	}
	var redriven []alert.Alert
	for _, al := range alerts.Alerts() {
		if al.Kind == alert.Redriven {
			redriven = append(redriven, al)
		}
	}
	want := alert.Alert{Kind: alert.Redriven, MessageID: msg, Tenant: config.DevTenant, Reason: watchdog.ReasonRetryWaitUnowned}
	if len(redriven) != 1 || redriven[0] != want {
		t.Fatalf("REDRIVEN alerts %+v, want [%+v]", redriven, want)
	}
}

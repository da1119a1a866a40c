package sweep_test

import (
	"context"
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testsqlite"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/metrics/metricstest"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/sqlite"
	"github.com/heraldhq/herald/sweep"
)

type bundle struct {
	ctx    context.Context
	store  store.Store
	clk    *clock.Fake
	alerts *alert.Recorder
}

func setup(t *testing.T) (*sweep.Sweeper, bundle) {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	s, err := sqlite.Open(context.Background(), testsqlite.Path(t), sqlite.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	b := bundle{ctx: context.Background(), store: s, clk: clk, alerts: &alert.Recorder{}}
	sw := sweep.New(sweep.Config{Store: s, StaleClaimAfter: 10 * time.Minute, Interval: time.Minute,
		Logger: slog.New(slog.DiscardHandler), Alerts: b.alerts})
	return sw, b
}

// Alerts carry their tenant (README: "logged … with the message id, tenant
// and reason code"), so an operator knows whose message to look at.
func TestAlertsCarryTheirTenant(t *testing.T) {
	t.Parallel()
	t.Run("StaleClaim", func(t *testing.T) {
		t.Parallel()
		sw, b := setup(t)
		res, err := b.store.DeliveryClaim(b.ctx, store.DeliveryClaimParams{MessageID: "ntf_1.webhook", NotificationID: "ntf_1",
			Tenant: "clinic-7", Channel: heraldtype.ChannelWebhook, Provider: "p", Owner: "dead"})
		if err != nil || !res.Claimed {
			t.Fatalf("claim %+v (%v)", res, err)
		}
		b.clk.Advance(10*time.Minute + time.Second)
		sw.Claims(b.ctx)
		want := alert.Alert{Kind: alert.StaleClaim, MessageID: "ntf_1.webhook", Tenant: "clinic-7", Reason: "STALE_CLAIM"}
		if got := b.alerts.Alerts(); len(got) != 1 || got[0] != want {
			t.Fatalf("alerts %+v, want [%+v]", got, want)
		}
	})
	t.Run("OutboxExpired", func(t *testing.T) {
		t.Parallel()
		sw, b := setup(t)
		expires := b.clk.Now().Add(time.Minute)
		res, err := b.store.NotificationCreate(b.ctx, store.NotificationCreateParams{Tenant: "clinic-8", ID: "ntf_2",
			Recipient: "r", EventID: "e", Kind: "k", Lane: heraldtype.LaneTransactional, ExpiresAt: &expires,
			Channels: []heraldtype.Channel{heraldtype.ChannelWebhook}})
		if err != nil || res.Outcome != store.Created {
			t.Fatalf("create %+v (%v)", res, err)
		}
		b.clk.Advance(time.Minute)
		sw.Leases(b.ctx)
		want := alert.Alert{Kind: alert.OutboxExpired, MessageID: store.MessageID("ntf_2", heraldtype.ChannelWebhook), Tenant: "clinic-8", Reason: "EXPIRED"}
		if got := b.alerts.Alerts(); len(got) != 1 || got[0] != want {
			t.Fatalf("alerts %+v, want [%+v]", got, want)
		}
	})
}

// TestStaleSweepCountsUnknownOncePerClaim: each stale claim the sweep turns
// UNKNOWN is a delivery entering UNKNOWN, counted once under its
// notification's lane and its channel; a claim still young, and a sweep
// that finds nothing more, count nothing.
func TestStaleSweepCountsUnknownOncePerClaim(t *testing.T) {
	t.Parallel()
	sw, b := setup(t)
	m := metrics.New(nil)
	sw.Metrics = m
	claim := func(id string, lane heraldtype.Lane, ch heraldtype.Channel) {
		t.Helper()
		res, err := b.store.NotificationCreate(b.ctx, store.NotificationCreateParams{Tenant: "t1", ID: id,
			Recipient: "r", EventID: id, Kind: "k", Lane: lane, Channels: []heraldtype.Channel{ch}})
		if err != nil || res.Outcome != store.Created {
			t.Fatalf("create %s: %+v (%v)", id, res, err)
		}
		c, err := b.store.DeliveryClaim(b.ctx, store.DeliveryClaimParams{MessageID: store.MessageID(id, ch), NotificationID: id,
			Tenant: "t1", Channel: ch, Provider: "p", Owner: "dead"})
		if err != nil || !c.Claimed {
			t.Fatalf("claim %s: %+v (%v)", id, c, err)
		}
	}
	claim("ntf_a", heraldtype.LaneAlert, heraldtype.ChannelSMS)
	claim("ntf_b", heraldtype.LaneTransactional, heraldtype.ChannelWebhook)
	claim("ntf_c", heraldtype.LaneTransactional, heraldtype.ChannelWebhook)
	b.clk.Advance(5 * time.Minute)
	claim("ntf_young", heraldtype.LaneTransactional, heraldtype.ChannelWebhook)
	b.clk.Advance(5*time.Minute + time.Second)

	sweepTwice(t, m, func() { sw.Claims(b.ctx) }, map[string]float64{"alert/sms/UNKNOWN": 1, "transactional/webhook/UNKNOWN": 2})
	if got := len(b.alerts.Alerts()); got != 3 {
		t.Fatalf("%d STALE_CLAIM alerts, want 3", got)
	}
}

// TestExpiryCountsTheWaitingDeliveryItEnds: an outbox row that expires
// while its delivery waits in RETRY_WAIT (db transport) ends that delivery
// SUPPRESSED(EXPIRED), and the sweep counts that entry once, under the
// notification's lane and the delivery's channel; a row that expires with
// no delivery counts no delivery state. Both raise OUTBOX_EXPIRED.
func TestExpiryCountsTheWaitingDeliveryItEnds(t *testing.T) {
	t.Parallel()
	sw, b := setup(t)
	m := metrics.New(nil)
	sw.Metrics = m
	expires := b.clk.Now().Add(time.Minute)
	for _, id := range []string{"ntf_waiting", "ntf_unsent"} {
		res, err := b.store.NotificationCreate(b.ctx, store.NotificationCreateParams{Tenant: "t1", ID: id, Recipient: "r", EventID: id,
			Kind: "k", Lane: heraldtype.LaneAlert, ExpiresAt: &expires, Channels: []heraldtype.Channel{heraldtype.ChannelSMS}})
		if err != nil || res.Outcome != store.Created {
			t.Fatalf("create %s: %+v (%v)", id, res, err)
		}
		if id == "ntf_unsent" {
			continue
		}
		rows, err := b.store.OutboxClaim(b.ctx, store.OutboxClaimParams{Lane: heraldtype.LaneAlert, Owner: "w", Limit: 1, Lease: time.Minute})
		if err != nil || len(rows) != 1 {
			t.Fatalf("claim %s: %+v (%v)", id, rows, err)
		}
		row := rows[0]
		c, err := b.store.DeliveryClaim(b.ctx, store.DeliveryClaimParams{MessageID: row.MessageID, NotificationID: id,
			Tenant: "t1", Channel: row.Channel, Provider: "p", Owner: "w"})
		if err != nil || !c.Claimed {
			t.Fatalf("delivery claim %s: %+v (%v)", id, c, err)
		}
		r, err := b.store.DeliveryRecord(b.ctx, store.DeliveryRecordParams{MessageID: row.MessageID, Attempt: 1,
			State: heraldtype.DeliveryRetryWait, Reason: "HTTP_429", RetryDelay: 10 * time.Minute, Owner: "w", Class: "not_sent",
			StartedAt: b.clk.Now(), Outbox: &row.Fence})
		if err != nil || !r.Recorded || !r.OutboxSettled {
			t.Fatalf("record RETRY_WAIT %s: %+v (%v)", id, r, err)
		}
	}
	b.clk.Advance(time.Minute)
	sweepTwice(t, m, func() { sw.Leases(b.ctx) }, map[string]float64{"alert/sms/SUPPRESSED": 1})
	if got := len(b.alerts.Alerts()); got != 2 {
		t.Fatalf("%d OUTBOX_EXPIRED alerts, want 2", got)
	}
	d, err := b.store.DeliveryGet(b.ctx, store.MessageID("ntf_waiting", heraldtype.ChannelSMS))
	if err != nil || d.State != heraldtype.DeliverySuppressed || d.Reason != heraldtype.ReasonExpired {
		t.Fatalf("waiting delivery %+v (%v), want SUPPRESSED(EXPIRED)", d, err)
	}
}

// sweepTwice runs sweep twice and fails the test unless
// herald_deliveries_total is want after each: the second sweep finds
// nothing more to count.
func sweepTwice(t *testing.T, m *metrics.Metrics, sweep func(), want map[string]float64) {
	t.Helper()
	for i := range 2 {
		sweep()
		if got := metricstest.Deliveries(t, m); !maps.Equal(got, want) {
			t.Fatalf("after sweep %d herald_deliveries_total is %v, want %v", i+1, got, want)
		}
	}
}

// TestExpiryFloodIsBounded: a round of the expiry sweep expires at most
// ExpireBatches batches of ExpireBatch rows, alerts the first
// ExpireAlerts rows one by one and the rest of the round in one alert
// with their count; the next round goes on with what is left.
func TestExpiryFloodIsBounded(t *testing.T) {
	t.Parallel()
	sw, b := setup(t)
	sw.ExpireBatch, sw.ExpireBatches, sw.ExpireAlerts = 2, 3, 2
	expires := b.clk.Now().Add(time.Second)
	for i := range 10 {
		id := "ntf_" + string(rune('a'+i))
		res, err := b.store.NotificationCreate(b.ctx, store.NotificationCreateParams{Tenant: "t1", ID: id,
			Recipient: "r", EventID: id, Kind: "k", Lane: heraldtype.LaneMarketing, ExpiresAt: &expires,
			Channels: []heraldtype.Channel{heraldtype.ChannelWebhook}})
		if err != nil || res.Outcome != store.Created {
			t.Fatalf("create %s: %+v (%v)", id, res, err)
		}
	}
	b.clk.Advance(time.Second)
	round := func(wantEach, wantRest int) {
		t.Helper()
		before := len(b.alerts.Alerts())
		sw.Leases(b.ctx)
		got := b.alerts.Alerts()[before:]
		each, rest := 0, 0
		for _, a := range got {
			switch {
			case a.Kind != alert.OutboxExpired:
				t.Fatalf("alert %+v", a)
			case a.Count > 1:
				rest += a.Count
				if a.MessageID != "" || a.Tenant != "t1" {
					t.Errorf("the round's alert %+v names a message or not the one tenant", a)
				}
			default:
				each++
			}
		}
		if each != wantEach || rest != wantRest || len(got) > wantEach+1 {
			t.Fatalf("a round raised %d alerts: %d one by one and one for %d more, want %d and %d", len(got), each, rest, wantEach, wantRest)
		}
	}
	round(2, 4) // 3 batches of 2: 6 rows
	round(2, 2) // the 4 left
	round(0, 0)
}

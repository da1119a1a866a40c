package app_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
)

// holdOne is a sender hook that stops the first send of one message after
// its peek, before the pre-checks, until released: a message that sits in
// the broker while the clock moves on.
type holdOne struct {
	mu      sync.Mutex
	msg     string
	arrived chan struct{}
	release chan struct{}
}

func newHoldOne() *holdOne {
	return &holdOne{arrived: make(chan struct{}), release: make(chan struct{})}
}

func (h *holdOne) afterPeek(ctx context.Context, job heraldtype.Job) {
	h.mu.Lock()
	hold := job.MessageID == h.msg
	if hold {
		h.msg = "" // only the first time
	}
	h.mu.Unlock()
	if hold {
		close(h.arrived)
		<-h.release
	}
}

// With the rabbitmq transport a deferred marketing send waits in the
// outbox as with db, on both stores, over HTTP with a fake clock:
//
//   - posted at 20:45 KST, from the 20:40 stop, the relay's gate puts its
//     row back to PENDING for 08:00 without publishing it (a due-by at
//     23:00 passing meanwhile ends it EXPIRED with OUTBOX_EXPIRED, no
//     call);
//   - published at 20:39 but reaching the sender only at 20:51 (held in
//     the broker), the sender defers it and the consumer puts its row
//     back to PENDING for 08:00 and drops the copy.
//
// Past the published grace (at 23:00) the watchdog, which has looked at
// every row published up to 20:51, and a reconciliation find nothing
// without an owner: no REDRIVEN alert, no copy in the retry queues, no
// provider call. At 08:00 both go out, once.
func TestQuietHoursWithRabbitMQ(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"sqlite+rabbitmq", "postgres+rabbitmq"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			seoul, _ := time.LoadLocation("Asia/Seoul")
			held := newHoldOne()
			var cfg *config.Config
			h := startQuietHerald(t, driver, time.Date(2026, 6, 11, 20, 39, 0, 0, seoul), func(c *config.Config, o *app.Options) {
				c.WatchdogInterval = config.Duration(20 * time.Millisecond)
				o.Hooks = sender.Hooks{AfterPeek: held.afterPeek}
				cfg = c
			})
			ctx := context.Background()
			morning := h.kst(12, 8, 0)
			outbox := func(id string) store.DeliveryView {
				t.Helper()
				v, err := h.a.Store().NotificationGet(ctx, config.DevTenant, id)
				if err != nil || len(v.Deliveries) != 1 {
					t.Fatalf("NotificationGet(%s): %+v %v", id, v, err)
				}
				return v.Deliveries[0]
			}
			marketing := func(result string) string {
				return metric(t, h.base, `herald_dispatch_total{lane="marketing",result="`+result+`"}`)
			}

			// 20:39: published, then held on its way to the sender.
			held.mu.Lock()
			backlog, backlogMsg := h.post(t, "promo.sms", "r-kr", "backlog", nil)
			held.msg = backlogMsg
			held.mu.Unlock()
			select {
			case <-held.arrived:
			case <-time.After(testenv.Patience):
				t.Fatal("the 20:39 marketing send never reached the sender")
			}
			testenv.WaitFor(t, "the 20:39 send PUBLISHED", testenv.Patience, func() bool {
				return outbox(backlog).OutboxState == heraldtype.OutboxPublished
			})

			// 20:45: the relay holds marketing back.
			h.setClock(t, h.kst(11, 20, 45))
			late, lateMsg := h.post(t, "promo.sms", "r-kr", "late", nil)
			dueBy := h.kst(11, 23, 0)
			expiring, expiringMsg := h.post(t, "promo.sms", "r-kr", "expiring", &dueBy)
			receipt, _ := h.post(t, "receipt.sms", "r-kr", "receipt", nil)
			h.waitState(t, receipt, "PROVIDER_ACCEPTED", "")
			h.waitDeferred(t, late, morning)
			h.waitDeferred(t, expiring, morning)

			// 20:51: the held send reaches the sender, which defers it; the
			// consumer puts its row back.
			h.setClock(t, h.kst(11, 20, 51))
			close(held.release)
			h.waitDeferred(t, backlog, morning)
			// The watchdog's witness: the last row published.
			witness, _ := h.post(t, "receipt.sms", "r-kr", "witness", nil)
			h.waitState(t, witness, "PROVIDER_ACCEPTED", "")
			testenv.WaitFor(t, "the witness PUBLISHED", testenv.Patience, func() bool {
				return outbox(witness).OutboxState == heraldtype.OutboxPublished
			})
			published := outbox(witness).OutboxUpdated
			// One publication, three deferrals (two by the relay, one by
			// the consumer), no copy in a retry queue.
			testenv.WaitFor(t, "marketing published 1, deferred 3, retry_queued 0", testenv.Patience, func() bool {
				return marketing("published") == "1" && marketing("deferred") == "3" && marketing("retry_queued") == "0"
			})

			// 23:00, past the published grace of everything published.
			h.setClock(t, dueBy)
			h.waitState(t, expiring, "EXPIRED", heraldtype.ReasonExpired)
			testenv.WaitFor(t, "a watchdog round past the last publication", testenv.Patience, func() bool {
				pos, err := h.a.Store().UnownedCheckpoint(ctx, store.UnownedPublished)
				return err == nil && !pos.At.Before(published)
			})
			rec, err := app.Reconciler(cfg, h.a.Store(), app.ReconcileOptions{RunBy: "test", Clock: h.clk, Alerts: h.alerts})
			if err != nil {
				t.Fatal(err)
			}
			rep, err := rec.Run(ctx)
			if err != nil || rep.Unowned != 0 || rep.Repaired != 0 {
				t.Fatalf("reconciliation at 23:00: %+v (%v), want nothing unowned or repaired", rep, err)
			}
			for _, id := range []string{late, backlog} {
				if d := outbox(id); d.OutboxState != heraldtype.OutboxPending || d.Delivery != nil {
					t.Fatalf("%s at 23:00: outbox %s, delivery %+v; want PENDING and none", id, d.OutboxState, d.Delivery)
				}
			}
			for _, msg := range []string{lateMsg, expiringMsg, backlogMsg} {
				h.wantCalls(t, msg, 0)
			}

			h.setClock(t, morning)
			h.waitState(t, late, "PROVIDER_ACCEPTED", "")
			h.waitState(t, backlog, "PROVIDER_ACCEPTED", "")
			h.wantCalls(t, lateMsg, 1)
			h.wantCalls(t, backlogMsg, 1)
			h.wantCalls(t, expiringMsg, 0)
			if dups := h.sms.Duplicates(); len(dups) != 0 {
				t.Fatalf("sent twice: %v", dups)
			}
			expired := false
			for _, a := range h.alerts.Alerts() {
				switch {
				case a.Kind == alert.Redriven:
					t.Fatalf("REDRIVEN alert %+v", a)
				case a.Kind == alert.OutboxExpired && a.MessageID == expiringMsg:
					expired = true
				}
			}
			if !expired {
				t.Fatal("no OUTBOX_EXPIRED alert for the send whose due-by passed while deferred")
			}
		})
	}
}

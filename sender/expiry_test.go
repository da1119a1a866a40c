package sender_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testsqlite"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/sim"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store/sqlite"
)

// TestRetryWaitCopyPastItsExpiryEndsSuppressed (issue 8, path 4 on the
// rabbitmq transport): there the outbox row is PUBLISHED, so the outbox
// expiry never sees a message waiting in RETRY_WAIT; what ends it is the
// sender's own expiry pre-check when the retry copy comes back. A copy that
// comes back after expires_at ends the delivery SUPPRESSED(EXPIRED) instead
// of calling the provider or leaving it waiting; one that comes back before
// its retry is due is offered again, and ends when it is. Written as the
// broker hands the sender its copies: no Known, no outbox fence.
func TestRetryWaitCopyPastItsExpiryEndsSuppressed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	st, err := sqlite.Open(ctx, testsqlite.Path(t), sqlite.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cat, err := catalog.New([]config.Kind{{Name: "pay", Category: "transactional", Channels: []string{"webhook"},
		Templates: map[string]config.Template{"webhook": {Title: "t", Body: "b"}}}})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	p := sim.New(sim.Config{})
	p.OnCall(func(context.Context, provider.Message) provider.Outcome {
		calls.Add(1)
		return provider.Outcome{Class: provider.NotSent, Reason: "HTTP_429"}
	})
	reg := provider.NewRegistry()
	reg.Register(heraldtype.ChannelWebhook, "sim", p)
	snd := sender.New(sender.Config{Store: st, Providers: reg, Catalog: cat, Clock: clk, Owner: "test",
		Logger: slog.New(slog.DiscardHandler),
		Retry:  sender.RetryPolicy{Quick: 2, QuickDelay: 10 * time.Second, Slow: 1, SlowDelay: time.Minute}})

	expires := clk.Now().Add(5 * time.Second)
	j := heraldtype.Job{MessageID: "ntf_1.webhook", NotificationID: "ntf_1", Tenant: "t1", Recipient: "r1", EventID: "e1",
		Kind: "pay", Lane: heraldtype.LaneTransactional, Channel: heraldtype.ChannelWebhook, Params: json.RawMessage(`{}`),
		ExpiresAt: &expires}
	if r := snd.Send(ctx, j); r.Verdict != sender.Retry || r.State != heraldtype.DeliveryRetryWait || r.Delay != 10*time.Second {
		t.Fatalf("first copy %+v, want Retry after 10s (RETRY_WAIT)", r)
	}
	// Past expires_at, before the retry is due: offered again when due.
	clk.Advance(6 * time.Second)
	if r := snd.Send(ctx, j); r.Verdict != sender.Retry || r.Delay != 4*time.Second {
		t.Fatalf("early copy past expiry %+v, want Retry in 4s", r)
	}
	// Due, and past expires_at: the pre-check ends it.
	clk.Advance(4 * time.Second)
	if r := snd.Send(ctx, j); r.Verdict != sender.Done || r.State != heraldtype.DeliverySuppressed || r.Reason != heraldtype.ReasonExpired {
		t.Fatalf("due copy past expiry %+v, want Done with SUPPRESSED(EXPIRED)", r)
	}
	d, err := st.DeliveryGet(ctx, j.MessageID)
	if err != nil {
		t.Fatal(err)
	}
	if d.State != heraldtype.DeliverySuppressed || d.Reason != heraldtype.ReasonExpired || d.NextAttemptAt != nil {
		t.Fatalf("delivery %s(%s) next %v, want SUPPRESSED(EXPIRED) with no next attempt", d.State, d.Reason, d.NextAttemptAt)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d provider calls, want 1", n)
	}
	// A late copy finds the message ended and has nothing to do.
	if r := snd.Send(ctx, j); r.Verdict != sender.Done || r.State != heraldtype.DeliverySuppressed {
		t.Fatalf("late copy %+v, want Done", r)
	}
}

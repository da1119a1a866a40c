package dispatch_test

import (
	"context"
	"testing"
	"time"

	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
)

// The relay's gate sees each claimed job with its recipient's profile read
// by the claim; a job it defers is not published but waits in the outbox,
// PENDING until the deferral ends, with the ruling's reason and no failed
// attempt, and is published then; the others are published at once, each
// with the claim's fence, whose token the message carries.
func TestRelayGateKeepsDeferredRowsInTheOutbox(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, b bundle) {
		if err := b.store.ProfilePut(b.ctx, store.Profile{Tenant: "t1", Recipient: "r1", TimeZone: "Asia/Seoul"}); err != nil {
			t.Fatal(err)
		}
		const night = 3 * time.Hour
		morning := b.clk.Now().Add(night)
		night1 := b.notify(t, "promo", heraldtype.LaneTransactional)
		day := b.notify(t, "receipt", heraldtype.LaneTransactional)
		night2 := b.notify(t, "promo", heraldtype.LaneTransactional)

		var fences []*heraldtype.Fence
		pub := &fakePublisher{published: map[string]int{}, outcome: func(j heraldtype.Job) error {
			fences = append(fences, j.Outbox)
			return nil
		}}
		settled := make(chan [2]int, 10)
		r := dispatch.NewRelay(dispatch.RelayConfig{
			Lane: heraldtype.LaneTransactional, Store: b.store, Wake: b.store.Wakeups().C(heraldtype.LaneTransactional),
			Publisher: pub, Owner: "relay", BatchSize: 7, Lease: time.Minute, PollInterval: 5 * time.Millisecond,
			MaxAttempts: 3, Alerts: b.alerts,
			Hooks: dispatch.RelayHooks{AfterSettle: func(published, retried int) { settled <- [2]int{published, retried} }},
			Gate: func(_ context.Context, job heraldtype.Job) sender.Ruling {
				k := job.Known
				if k == nil || !k.ProfileRead {
					t.Errorf("%s reached the gate without its profile: %+v", job.MessageID, k)
					return sender.Ruling{}
				}
				p, err := store.DecodeProfile(job.Tenant, job.Recipient, k.Profile, k.ProfileUpdatedAt)
				if err != nil || p.TimeZone != "Asia/Seoul" {
					t.Errorf("%s: profile %+v (%v)", job.MessageID, p, err)
				}
				if job.Kind == "promo" && b.clk.Now().Before(morning) {
					return sender.DeferFor(morning.Sub(b.clk.Now()), heraldtype.ReasonQuietHours)
				}
				return sender.Ruling{}
			},
		})
		stop := runRelay(t, r)
		defer stop()

		testenv.WaitFor(t, "the receipt PUBLISHED", testenv.Patience, func() bool {
			return b.entry(t, day).OutboxState == heraldtype.OutboxPublished
		})
		for _, id := range []string{night1, night2} {
			e := b.entry(t, id)
			if e.OutboxState != heraldtype.OutboxPending || e.OutboxReason != heraldtype.ReasonQuietHours || !e.AvailableAt.Equal(morning) {
				t.Fatalf("%s: outbox %s %s due %s, want PENDING %s due %s", id, e.OutboxState, e.OutboxReason, e.AvailableAt,
					heraldtype.ReasonQuietHours, morning)
			}
			if n := pub.count(store.MessageID(id, heraldtype.ChannelWebhook)); n != 0 {
				t.Fatalf("%s deferred by the gate but published %d times", id, n)
			}
		}
		if got := testenv.Recv(t, settled, "the first batch settled"); got != [2]int{1, 0} {
			t.Fatalf("first batch settled %v, want the receipt published", got)
		}
		if len(fences) != 1 || fences[0] == nil || fences[0].NotificationID != day || fences[0].Token != 1 {
			t.Fatalf("published with fences %+v, want the receipt's claim (token 1)", fences)
		}

		b.clk.Advance(night)
		for _, id := range []string{night1, night2} {
			testenv.WaitFor(t, id+" PUBLISHED in the morning", testenv.Patience, func() bool {
				return b.entry(t, id).OutboxState == heraldtype.OutboxPublished
			})
			if n := pub.count(store.MessageID(id, heraldtype.ChannelWebhook)); n != 1 {
				t.Fatalf("%s published %d times, want once", id, n)
			}
		}
		stop()
		for _, f := range fences[1:] {
			if f == nil || f.Token != 2 {
				t.Fatalf("the morning's publications carry %+v, want the second claim's fence (token 2)", f)
			}
		}
	})
}

// A relay that dies after its claim, before it put back the rows its gate
// held, leaves them PUBLISHING under its lease: once the lease has run
// out, the reclaim sweep returns them to PENDING and the next relay's
// gate defers them. Nothing was published.
func TestRelayDeadBeforeThePutBackLeavesItsRowsToTheLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.notify(t, "promo", heraldtype.LaneTransactional)
	if rows, err := b.store.OutboxClaim(b.ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "dead",
		Limit: 10, Lease: time.Minute, Publishing: true, Profiles: true}); err != nil || len(rows) != 1 {
		t.Fatalf("the dead relay's claim: %d rows (%v)", len(rows), err)
	}
	b.clk.Advance(time.Minute + time.Second)
	if n, err := b.store.OutboxReclaimExpired(b.ctx); err != nil || n != 1 {
		t.Fatalf("reclaimed %d (%v), want the dead relay's row", n, err)
	}
	pub := &fakePublisher{published: map[string]int{}}
	stop := runRelay(t, dispatch.NewRelay(dispatch.RelayConfig{
		Lane: heraldtype.LaneTransactional, Store: b.store, Wake: b.store.Wakeups().C(heraldtype.LaneTransactional),
		Publisher: pub, Owner: "relay", BatchSize: 7, Lease: time.Minute, PollInterval: 5 * time.Millisecond, Alerts: b.alerts,
		Gate: func(context.Context, heraldtype.Job) sender.Ruling {
			return sender.DeferFor(time.Hour, heraldtype.ReasonQuietHours)
		},
	}))
	defer stop()
	testenv.WaitFor(t, "the row deferred by the next relay", testenv.Patience, func() bool {
		return b.entry(t, id).OutboxReason == heraldtype.ReasonQuietHours
	})
	if e := b.entry(t, id); e.OutboxState != heraldtype.OutboxPending || !e.AvailableAt.Equal(b.clk.Now().Add(time.Hour)) {
		t.Fatalf("outbox %s due %s, want PENDING due in an hour", e.OutboxState, e.AvailableAt)
	}
	if n := pub.count(store.MessageID(id, heraldtype.ChannelWebhook)); n != 0 {
		t.Fatalf("published %d times", n)
	}
}

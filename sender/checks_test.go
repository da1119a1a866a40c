package sender_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
)

// checkFunc is a rule made of a function.
type checkFunc func(ctx context.Context, s sender.Subject) sender.Ruling

func (f checkFunc) Check(ctx context.Context, s sender.Subject) sender.Ruling { return f(ctx, s) }

// A rule runs after the built-in pre-checks with the rendered message and
// the profile read now, before the claim; the first ruling that is not Go
// wins: a decision is recorded as the pre-checks' are, a deferral writes
// nothing and answers Retry after its delay, and Go lets the send go on.
func TestPolicyChecksRuleBeforeTheClaim(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		ruling sender.Ruling
		want   sender.Result
		row    heraldtype.DeliveryState // "" = no delivery row
		calls  int
	}{
		{"Suppress", sender.Suppress("NOT_ALLOWLISTED"), sender.Result{Verdict: sender.Done, State: heraldtype.DeliverySuppressed, Reason: "NOT_ALLOWLISTED"}, heraldtype.DeliverySuppressed, 0},
		{"Park", sender.ParkFor("TEXT_TOO_LONG"), sender.Result{Verdict: sender.Park, State: heraldtype.DeliveryParked, Reason: "TEXT_TOO_LONG"}, heraldtype.DeliveryParked, 0},
		{"Defer", sender.DeferFor(9*time.Hour, "QUIET_HOURS"), sender.Result{Verdict: sender.Retry, Reason: "QUIET_HOURS", Delay: 9 * time.Hour}, "", 0},
		{"Go", sender.Ruling{}, sender.Result{Verdict: sender.Done, State: heraldtype.DeliveryProviderAccepted}, heraldtype.DeliveryProviderAccepted, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			snd, b := setup(t, sender.Hooks{})
			var seen []sender.Subject
			snd.Checks = []sender.Check{
				checkFunc(func(_ context.Context, s sender.Subject) sender.Ruling {
					seen = append(seen, s)
					return sender.Ruling{}
				}),
				checkFunc(func(context.Context, sender.Subject) sender.Ruling { return c.ruling }),
			}
			j := job("n1", heraldtype.ChannelWebhook)
			res := snd.Send(b.ctx, j)
			if res.Verdict != c.want.Verdict || res.State != c.want.State || res.Reason != c.want.Reason || res.Delay != c.want.Delay {
				t.Fatalf("Send = %+v, want %+v", res, c.want)
			}
			if len(seen) != 1 || seen[0].Message == nil || seen[0].Message.MessageID != j.MessageID || seen[0].Message.Body == "" ||
				seen[0].Provider == "" || seen[0].Category != j.Lane {
				t.Fatalf("the rule saw %+v, want the rendered message, the provider and the category", seen)
			}
			d, err := b.store.DeliveryGet(b.ctx, j.MessageID)
			switch {
			case c.row == "" && !errors.Is(err, store.ErrNotFound):
				t.Fatalf("a deferral wrote a row: %+v %v", d, err)
			case c.row != "" && (err != nil || d.State != c.row):
				t.Fatalf("row %+v %v, want %s", d, err, c.row)
			}
			if n := b.sims[heraldtype.ChannelWebhook].Total(); n != c.calls {
				t.Fatalf("%d provider calls, want %d", n, c.calls)
			}
		})
	}
}

// A job whose transport read its notification's cancel mark
// (Known.Cancelled: the db transport's claim) ends SUPPRESSED(CANCELLED)
// before the rules and the rate limit: no rule sees it, none may park it
// (a PARKED alert) or defer it, and no token is spent. The same job
// without the mark meets the rule, which parks it.
func TestACancelledJobEndsBeforeTheRules(t *testing.T) {
	t.Parallel()
	for _, marked := range []bool{true, false} {
		t.Run(fmt.Sprint("marked=", marked), func(t *testing.T) {
			t.Parallel()
			snd, b := setup(t, sender.Hooks{})
			lim := &fakeLimiter{}
			snd.Limiter = lim
			var ruled int
			snd.Checks = []sender.Check{checkFunc(func(context.Context, sender.Subject) sender.Ruling {
				ruled++
				return sender.ParkFor("TEXT_TOO_LONG")
			})}
			j := job("n1", heraldtype.ChannelWebhook)
			j.Known = &heraldtype.Known{ProfileRead: true, Cancelled: marked}
			res := snd.Send(b.ctx, j)
			d := delivery(t, b, j.MessageID)
			if !marked {
				if res.Verdict != sender.Park || d.State != heraldtype.DeliveryParked || ruled != 1 {
					t.Fatalf("unmarked: Send = %+v, row %s, ruled %d times; want the rule's PARKED", res, d.State, ruled)
				}
				wantAlerts(t, b, j, alert.Parked)
				return
			}
			want := sender.Result{Verdict: sender.Done, State: heraldtype.DeliverySuppressed, Reason: heraldtype.ReasonCancelled}
			if res.Verdict != want.Verdict || res.State != want.State || res.Reason != want.Reason {
				t.Fatalf("Send = %+v, want %+v", res, want)
			}
			if d.State != heraldtype.DeliverySuppressed || d.Reason != heraldtype.ReasonCancelled || d.Attempts != 0 {
				t.Fatalf("row %+v, want SUPPRESSED(CANCELLED) without an attempt", d)
			}
			if ruled != 0 || len(lim.waits) != 0 || b.sims[heraldtype.ChannelWebhook].Total() != 0 {
				t.Fatalf("ruled %d times, %d rate-limit waits, %d calls; want none", ruled, len(lim.waits), b.sims[heraldtype.ChannelWebhook].Total())
			}
			wantAlerts(t, b, j)
		})
	}
}

// A copy whose transport read no cancel mark (a broker's) that a rule, or a
// pre-check, would park is ended SUPPRESSED(CANCELLED) if its notification
// is marked: a cancel that failed after its mark raises no PARKED alert a
// person would have to answer. Unmarked, it parks as before.
func TestAParkOfACancelledNotificationEndsItCancelled(t *testing.T) {
	t.Parallel()
	for _, marked := range []bool{true, false} {
		t.Run(fmt.Sprint("marked=", marked), func(t *testing.T) {
			t.Parallel()
			snd, b := setup(t, sender.Hooks{})
			snd.Checks = []sender.Check{checkFunc(func(context.Context, sender.Subject) sender.Ruling {
				return sender.ParkFor("TEXT_TOO_LONG")
			})}
			j := job("ntf_cancelled", heraldtype.ChannelWebhook)
			createNotification(t, b, j)
			if marked {
				if err := b.store.NotificationCancelMark(b.ctx, "t1", j.NotificationID); err != nil {
					t.Fatal(err)
				}
			}
			j.Known = &heraldtype.Known{Delivery: false} // a broker's first copy: no mark read
			res := snd.Send(b.ctx, j)
			d := delivery(t, b, j.MessageID)
			if !marked {
				if res.Verdict != sender.Park || d.State != heraldtype.DeliveryParked {
					t.Fatalf("unmarked: Send = %+v, row %s; want the rule's PARKED", res, d.State)
				}
				wantAlerts(t, b, j, alert.Parked)
				return
			}
			if res.Verdict != sender.Done || res.State != heraldtype.DeliverySuppressed || res.Reason != heraldtype.ReasonCancelled {
				t.Fatalf("Send = %+v, want done, SUPPRESSED(CANCELLED)", res)
			}
			if d.State != heraldtype.DeliverySuppressed || d.Reason != heraldtype.ReasonCancelled || b.sims[heraldtype.ChannelWebhook].Total() != 0 {
				t.Fatalf("row %+v, %d calls; want SUPPRESSED(CANCELLED) and no call", d, b.sims[heraldtype.ChannelWebhook].Total())
			}
			wantAlerts(t, b, j)
		})
	}
}

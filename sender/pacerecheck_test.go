package sender_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
)

// A rule with a boundary in time: quiet from closes on.
type closesAt struct {
	now    func() time.Time
	closes time.Time
	runs   int
}

func (c *closesAt) Check(context.Context, sender.Subject) sender.Ruling {
	c.runs++
	if now := c.now(); !now.Before(c.closes) {
		return sender.DeferFor(11*time.Hour, heraldtype.ReasonQuietHours)
	}
	return sender.Ruling{}
}

// The rules rule again after a rate-limit wait that lasted: a send checked
// at 20:49 whose token came at 20:51 is deferred, not sent (no row, no
// call, no claim); a send whose token came at once is checked once and
// sent.
func TestRulesRuleAgainAfterARateLimitWait(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		wait  time.Duration // how long the limiter makes the send wait
		runs  int
		state heraldtype.DeliveryState // "" = no delivery row
		calls int
	}{
		{"WaitPastTheBoundaryDefers", 2 * time.Minute, 2, "", 0},
		{"NoWaitChecksOnce", 0, 1, heraldtype.DeliveryProviderAccepted, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			lim := &fakeLimiter{}
			snd, b := limited(t, lim)
			rule := &closesAt{now: b.clk.Now, closes: epoch.Add(time.Minute)}
			snd.Checks = []sender.Check{rule}
			lim.wait = func(context.Context, string, heraldtype.Lane) (time.Duration, error) {
				b.clk.Advance(c.wait)
				return 0, nil
			}
			j := job("n1", heraldtype.ChannelWebhook)
			res := snd.Send(b.ctx, j)
			if rule.runs != c.runs {
				t.Fatalf("the rule ran %d times, want %d", rule.runs, c.runs)
			}
			d, err := b.store.DeliveryGet(b.ctx, j.MessageID)
			switch {
			case c.state == "" && (res.Verdict != sender.Retry || res.Reason != heraldtype.ReasonQuietHours || !errors.Is(err, store.ErrNotFound)):
				t.Fatalf("Send = %+v, row %+v (%v); want deferred, no row", res, d, err)
			case c.state != "" && (res.State != c.state || err != nil || d.State != c.state):
				t.Fatalf("Send = %+v, row %+v (%v); want %s", res, d, err, c.state)
			}
			if n := b.sims[heraldtype.ChannelWebhook].Total(); n != c.calls {
				t.Fatalf("%d provider calls, want %d", n, c.calls)
			}
		})
	}
}

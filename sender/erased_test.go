package sender_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
)

// TestRetryOfAnErasedNotificationIsSuppressed: a send in flight when its
// recipient is erased is not stopped (it may be at the provider already),
// but when its result is a retry, the retry is never made: not with the
// emptied params the store now holds, nor with the old ones a broker copy
// still carries. It ends SUPPRESSED(ERASED), with no second call.
func TestRetryOfAnErasedNotificationIsSuppressed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		params string
	}{{"ParamsAsTheStoreHoldsThem", `{}`}, {"ParamsAsABrokerCopyCarriesThem", `{"amount":12000}`}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var snd *sender.Sender
			var b bundle
			erased := make(chan store.RecipientEraseResult, 1)
			snd, b = setup(t, sender.Hooks{AfterClaim: func(ctx context.Context, j heraldtype.Job) {
				// The erasure runs while the claim is SENDING.
				res, err := b.store.RecipientErase(ctx, store.RecipientEraseParams{Tenant: "t1", Recipient: "r1"})
				if err != nil {
					t.Error(err)
				}
				erased <- res
			}})
			putProfile(t, b, store.Profile{Tenant: "t1", Recipient: "r1"})
			j := job("ntf_erased", heraldtype.ChannelWebhook)
			createNotification(t, b, j)
			force(b.sims[heraldtype.ChannelWebhook], provider.NotSentOutcome("HTTP_429", 0))
			if res := snd.Send(b.ctx, j); res.Verdict != sender.Retry || res.State != heraldtype.DeliveryRetryWait {
				t.Fatalf("first attempt: %+v, want a retry", res)
			}
			if res := <-erased; res.Notifications != 1 || len(res.Suppressed) != 0 {
				t.Fatalf("erasure during the send: %+v, want the notification erased and nothing suppressed (SENDING)", res)
			}
			force(b.sims[heraldtype.ChannelWebhook], provider.Outcome{Class: provider.Accepted})
			b.clk.Advance(time.Hour)
			j.Params = json.RawMessage(c.params)
			res := snd.Send(b.ctx, j)
			if res.Verdict != sender.Done || res.State != heraldtype.DeliverySuppressed || res.Reason != store.ReasonErased {
				t.Errorf("the retry: %+v, want done, SUPPRESSED(ERASED)", res)
			}
			if d := delivery(t, b, j.MessageID); d.State != heraldtype.DeliverySuppressed || d.Reason != store.ReasonErased {
				t.Errorf("delivery %s(%s), want SUPPRESSED(ERASED)", d.State, d.Reason)
			}
			if n := b.sims[heraldtype.ChannelWebhook].CallCount(j.MessageID); n != 1 {
				t.Errorf("%d provider calls, want the first one only", n)
			}
		})
	}
}

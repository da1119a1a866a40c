package sender_test

// A result write whose outcome is not known must never close the message's
// way back: a RETRY_WAIT it may have written is carried out only by a copy
// of the message (an outbox row, a broker message). These tests hold the
// sender to answering a recheck (Retry, while SENDING as far as it knows)
// instead of Done when the write's answer was lost for good, or when the row
// could not be read back to tell.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/storefault"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/sender"
)

// notSentThenAccepted makes the first call a definite non-send and every
// later one accepted.
func notSentThenAccepted(b bundle) {
	var mu sync.Mutex
	calls := 0
	b.sims[heraldtype.ChannelWebhook].OnCall(func(context.Context, provider.Message) provider.Outcome {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			return provider.NotSentOutcome("HTTP_429", 0)
		}
		return provider.AcceptedOutcome("")
	})
}

func TestUnknownRecordOutcomeIsRechecked(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		opts storefault.Options
		// want is the first copy's answer: a recheck, never Done.
		want sender.Result
	}{
		// The RETRY_WAIT committed; every later try failed for
		// RecordTimeout: the copy comes back as long after as the claim is
		// old (30 s), and finds the retry due.
		{"AnswerLostForGood", storefault.Options{RecordDown: true},
			sender.Result{Verdict: sender.Retry, State: heraldtype.DeliverySending, Reason: heraldtype.ReasonStoreUnavailable, Delay: readmeRecordTimeout}},
		// The RETRY_WAIT committed; the next try finds the row settled and
		// cannot read it back, and every read fails for RecordTimeout.
		{"ReadBackFailsForGood", storefault.Options{ReadFailures: -1},
			sender.Result{Verdict: sender.Retry, State: heraldtype.DeliverySending, Reason: heraldtype.ReasonStoreUnavailable, Delay: readmeRecordTimeout}},
		// One read fails: it is one more failed try, and the next one
		// recognises the row as this attempt's own RETRY_WAIT.
		{"ReadBackFailsOnce", storefault.Options{ReadFailures: 1},
			sender.Result{Verdict: sender.Retry, State: heraldtype.DeliveryRetryWait, Reason: "HTTP_429", Delay: time.Second}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			snd, b := setup(t, sender.Hooks{})
			notSentThenAccepted(b)
			seam := storefault.LoseRecord(b.store, c.opts)
			snd.Store = seam
			snd.RetryClock = fakeRetryClock{b.clk}
			j := job("n1", heraldtype.ChannelWebhook)

			r := snd.Send(b.ctx, j)
			r.Err = nil
			if r != c.want {
				t.Fatalf("first attempt: %+v, want %+v", r, c.want)
			}
			if d := delivery(t, b, j.MessageID); d.State != heraldtype.DeliveryRetryWait || d.Attempts != 1 {
				t.Fatalf("delivery %+v, want the committed RETRY_WAIT", d)
			}
			// The copy offered again after the delay, the store back,
			// finds the retry due and makes the second attempt.
			seam.Heal()
			b.clk.Advance(r.Delay)
			if again := snd.Send(b.ctx, j); again.Verdict != sender.Done || again.State != heraldtype.DeliveryProviderAccepted {
				t.Fatalf("the copy offered again: %+v, want Done PROVIDER_ACCEPTED", again)
			}
			if n := b.sims[heraldtype.ChannelWebhook].CallCount(j.MessageID); n != 2 {
				t.Fatalf("%d provider calls, want 2 (one per attempt)", n)
			}
		})
	}
}

package sender_test

// A result write whose outcome is not known must never close the message's
// way back: a RETRY_WAIT it may have written is carried out only by a copy
// of the message (an outbox row, a broker message). These tests hold the
// sender to answering a recheck (Retry, while SENDING as far as it knows)
// instead of Done when the write's answer was lost for good, or when the row
// could not be read back to tell.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/sqlite"
)

// lostRecord commits the first attempt's first result write and reports an
// error, as a connection that drops after the commit does; after that, the
// first attempt's writes keep failing while recordDown is set, and that
// many reads of the row (the read-back) fail.
type lostRecord struct {
	*sqlite.Store
	mu         sync.Mutex
	lost       bool
	recordDown bool
	getFails   int
}

var errConnReset = errors.New("connection reset by peer")

func (l *lostRecord) DeliveryRecord(ctx context.Context, p store.DeliveryRecordParams) (store.RecordResult, error) {
	l.mu.Lock()
	first, down := !l.lost && p.Attempt == 1, l.recordDown && p.Attempt == 1
	l.lost = l.lost || first
	l.mu.Unlock()
	switch {
	case first:
		if _, err := l.Store.DeliveryRecord(ctx, p); err != nil {
			return store.RecordResult{}, err
		}
		return store.RecordResult{}, errConnReset
	case down:
		return store.RecordResult{}, errConnReset
	}
	return l.Store.DeliveryRecord(ctx, p)
}

func (l *lostRecord) DeliveryGet(ctx context.Context, id string) (store.Delivery, error) {
	l.mu.Lock()
	fail := l.lost && l.getFails > 0
	if fail {
		l.getFails--
	}
	l.mu.Unlock()
	if fail {
		return store.Delivery{}, errConnReset
	}
	return l.Store.DeliveryGet(ctx, id)
}

// heal makes every call work again.
func (l *lostRecord) heal() {
	l.mu.Lock()
	l.recordDown, l.getFails = false, 0
	l.mu.Unlock()
}

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
		name       string
		recordDown bool
		getFails   int
		// want is the first copy's answer: a recheck, never Done.
		want sender.Result
	}{
		// The RETRY_WAIT committed; every later try failed for
		// RecordTimeout: the copy comes back as long after as the claim is
		// old (30 s), and finds the retry due.
		{"AnswerLostForGood", true, 0,
			sender.Result{Verdict: sender.Retry, State: heraldtype.DeliverySending, Reason: heraldtype.ReasonStoreUnavailable, Delay: readmeRecordTimeout}},
		// The RETRY_WAIT committed; the next try finds the row settled and
		// cannot read it back, and every read fails for RecordTimeout.
		{"ReadBackFailsForGood", false, 1 << 20,
			sender.Result{Verdict: sender.Retry, State: heraldtype.DeliverySending, Reason: heraldtype.ReasonStoreUnavailable, Delay: readmeRecordTimeout}},
		// One read fails: it is one more failed try, and the next one
		// recognises the row as this attempt's own RETRY_WAIT.
		{"ReadBackFailsOnce", false, 1,
			sender.Result{Verdict: sender.Retry, State: heraldtype.DeliveryRetryWait, Reason: "HTTP_429", Delay: time.Second}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			snd, b := setup(t, sender.Hooks{})
			notSentThenAccepted(b)
			seam := &lostRecord{Store: b.store, recordDown: c.recordDown, getFails: c.getFails}
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
			seam.heal()
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

package sender_test

// These tests hold the README's promise for a store that goes away while a
// message is being sent: "A send in progress retries its store calls in
// place: those before the provider call for up to 5 s, the write of the
// provider's answer for up to 30 s. Past that, a job not yet claimed goes
// back to the outbox [...], and a claim whose answer could not be written
// becomes UNKNOWN after stale_claim_after rather than risk a second call."
//
// The sender runs on its defaults (StoreRetry, RecordTimeout) with its
// retry clock on the test's fake clock, so the bounds are measured exactly
// and pass in no time; the store is the real SQLite one behind a seam that
// fails chosen steps; the stale sweep is the real sweep package.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/sweep"
)

// fakeRetryClock runs the sender's store retries on a fake clock: a pause
// moves the clock instead of waiting.
type fakeRetryClock struct{ *clock.Fake }

func (f fakeRetryClock) Sleep(ctx context.Context, d time.Duration) bool {
	if ctx.Err() != nil {
		return false
	}
	f.Advance(d)
	return true
}

// The README's bounds, and stale_claim_after's default.
const (
	readmeStoreRetry      = 5 * time.Second
	readmeRecordTimeout   = 30 * time.Second
	readmeStaleClaimAfter = 10 * time.Minute
)

// withDownStore puts a faultyStore whose steps fail forever between snd
// and the bundle's store, with snd's store retries on the bundle's clock.
func withDownStore(snd *sender.Sender, b bundle, steps ...string) *faultyStore {
	fs := &faultyStore{Store: b.store, clk: b.clk, fails: map[string]int{}}
	for _, s := range steps {
		fs.fails[s] = failForever
	}
	snd.Store = fs
	snd.RetryClock = fakeRetryClock{b.clk}
	return fs
}

// wantTriedFor checks that step was tried again and again, the first try at
// start and the last exactly bound later.
func wantTriedFor(t *testing.T, fs *faultyStore, step string, start time.Time, bound time.Duration) {
	t.Helper()
	tries := fs.triesOf(step)
	if len(tries) < 3 {
		t.Fatalf("%s tried %d times, want it retried", step, len(tries))
	}
	if first, last := tries[0], tries[len(tries)-1]; !first.Equal(start) || last.Sub(first) != bound {
		t.Fatalf("%s tried %d times from %s to %s (%s), want for %s from %s", step, len(tries),
			first.Format(time.TimeOnly), last.Format(time.TimeOnly), last.Sub(first), bound, start.Format(time.TimeOnly))
	}
}

func TestStoreRetryBeforeTheCallLasts5sThenGivesTheJobBack(t *testing.T) {
	t.Parallel()
	for _, step := range []string{"peek", "profile", "claim", "decide"} {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			snd, b := setup(t, sender.Hooks{})
			if snd.StoreRetry != readmeStoreRetry {
				t.Fatalf("StoreRetry defaults to %s, the README says %s", snd.StoreRetry, readmeStoreRetry)
			}
			fs := withDownStore(snd, b, step)
			j := job("n1", heraldtype.ChannelWebhook)
			if step == "decide" {
				j = job("n1", heraldtype.ChannelSMS) // no address: a decision to write
			}
			start := b.clk.Now()
			r := snd.Send(b.ctx, j)
			if r.Verdict != sender.Backoff || r.Reason != heraldtype.ReasonStoreUnavailable || r.Err == nil {
				t.Fatalf("%+v, want Backoff STORE_UNAVAILABLE with the error", r)
			}
			wantTriedFor(t, fs, step, start, readmeStoreRetry)
			if _, err := b.store.DeliveryGet(b.ctx, j.MessageID); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("a delivery row was written (%v): the job is not the outbox's to offer again", err)
			}
			if n := b.sims[j.Channel].Total(); n != 0 {
				t.Fatalf("%d provider calls", n)
			}
			wantAlerts(t, b, j)

			// Offered again once the store is back, it is sent (or decided) once.
			fs.heal()
			if r := snd.Send(b.ctx, j); r.Verdict != sender.Done || (r.State != heraldtype.DeliveryProviderAccepted && r.State != heraldtype.DeliverySuppressed) {
				t.Fatalf("offered again: %+v", r)
			}
			if n := b.sims[j.Channel].Total(); n > 1 {
				t.Fatalf("%d provider calls", n)
			}
		})
	}
}

// A claim whose first try committed and whose answer was lost, with the
// store gone for good: the job is given back, the row it left stays
// SENDING and becomes UNKNOWN, and the provider is never called.
func TestClaimWhoseAnswerWasLostIsNeverCalled(t *testing.T) {
	t.Parallel()
	snd, b := setup(t, sender.Hooks{})
	fs := withDownStore(snd, b)
	snd.Store = &lostClaim{faultyStore: fs}
	j := job("n1", heraldtype.ChannelWebhook)
	if r := snd.Send(b.ctx, j); r.Verdict != sender.Backoff {
		t.Fatalf("%+v, want Backoff", r)
	}
	if d := delivery(t, b, j.MessageID); d.State != heraldtype.DeliverySending {
		t.Fatalf("delivery %+v, want the committed claim SENDING", d)
	}
	fs.heal()
	snd.Store = fs
	if r := snd.Send(b.ctx, j); r.Verdict != sender.Retry || r.State != heraldtype.DeliverySending || r.Reason != heraldtype.ReasonClaimHeld {
		t.Fatalf("offered again: %+v, want a recheck while SENDING", r)
	}
	sweepStale(t, snd, b, j, readmeStaleClaimAfter)
	if n := b.sims[j.Channel].Total(); n != 0 {
		t.Fatalf("%d provider calls for a claim nobody knew it held", n)
	}
}

// lostClaim commits the first claim and then fails every call, as a
// database that went away just after the commit does.
type lostClaim struct{ *faultyStore }

func (l *lostClaim) DeliveryClaim(ctx context.Context, p store.DeliveryClaimParams) (store.DeliveryClaimResult, error) {
	l.mu.Lock()
	first := l.fails["claim"] == 0
	l.fails["claim"] = failForever
	l.mu.Unlock()
	if first {
		if _, err := l.Store.DeliveryClaim(ctx, p); err != nil {
			return store.DeliveryClaimResult{}, err
		}
		return store.DeliveryClaimResult{}, errors.New("connection reset after commit")
	}
	return l.faultyStore.DeliveryClaim(ctx, p)
}

// The answer not written: SENDING, then UNKNOWN after stale_claim_after,
// never a second call.
func TestResultNotWrittenFor30sStaysSendingThenBecomesUnknown(t *testing.T) {
	t.Parallel()
	snd, b := setup(t, sender.Hooks{})
	if snd.RecordTimeout != readmeRecordTimeout {
		t.Fatalf("RecordTimeout defaults to %s, the README says %s", snd.RecordTimeout, readmeRecordTimeout)
	}
	fs := withDownStore(snd, b, "record")
	var called time.Time // the provider call, on the fake clock
	snd.Hooks.AfterClaim = func(context.Context, heraldtype.Job) { called = b.clk.Now() }
	j := job("n1", heraldtype.ChannelWebhook)

	r := snd.Send(b.ctx, j)
	// Whether a try committed is not known: the copy is kept and offered
	// again after as long as the claim is old (a recheck).
	if r.Verdict != sender.Retry || r.State != heraldtype.DeliverySending || r.Reason != heraldtype.ReasonStoreUnavailable || r.Delay != readmeRecordTimeout {
		t.Fatalf("%+v, want a recheck in %s, still SENDING, STORE_UNAVAILABLE", r, readmeRecordTimeout)
	}
	wantTriedFor(t, fs, "record", called, readmeRecordTimeout)
	if a := wantAlerts(t, b, j, alert.RecordFailed); a[0].Reason != string(heraldtype.DeliveryProviderAccepted) {
		t.Errorf("RECORD_FAILED reason %q, want the result that was lost", a[0].Reason)
	}
	if d := delivery(t, b, j.MessageID); d.State != heraldtype.DeliverySending || d.Attempts != 1 {
		t.Fatalf("delivery %+v, want SENDING after one attempt", d)
	}
	fs.heal()
	// Copies that come meanwhile (the recheck, a redelivery, a second
	// process) find the claim, leave it, and look again later.
	if r := snd.Send(b.ctx, j); r.Verdict != sender.Retry || r.State != heraldtype.DeliverySending || r.Reason != heraldtype.ReasonClaimHeld {
		t.Fatalf("a copy before the sweep: %+v, want a recheck while SENDING", r)
	}
	sweepStale(t, snd, b, j, readmeStaleClaimAfter)
	if n := b.sims[j.Channel].CallCount(j.MessageID); n != 1 {
		t.Fatalf("%d provider calls, want the one whose answer was lost", n)
	}
}

// sweepStale runs the real stale-claim sweep on j's SENDING delivery: not
// stale a second before staleAfter has passed since the claim, UNKNOWN
// (STALE_CLAIM, alerted) once it has; a copy offered after it is acked
// without a call.
func sweepStale(t *testing.T, snd *sender.Sender, b bundle, j heraldtype.Job, staleAfter time.Duration) {
	t.Helper()
	d := delivery(t, b, j.MessageID)
	if d.State != heraldtype.DeliverySending || d.ClaimedAt == nil {
		t.Fatalf("delivery %+v, want a SENDING claim", d)
	}
	alerts := &alert.Recorder{}
	sw := sweep.New(sweep.Config{Store: b.store, StaleClaimAfter: staleAfter, Interval: time.Minute, Alerts: alerts})

	b.clk.Advance(d.ClaimedAt.Add(staleAfter - time.Second).Sub(b.clk.Now()))
	sw.Claims(b.ctx)
	if d := delivery(t, b, j.MessageID); d.State != heraldtype.DeliverySending {
		t.Fatalf("a second before %s: delivery %+v, want still SENDING", staleAfter, d)
	}
	b.clk.Advance(2 * time.Second)
	sw.Claims(b.ctx)
	if d := delivery(t, b, j.MessageID); d.State != heraldtype.DeliveryUnknown || d.Reason != heraldtype.ReasonStaleClaim {
		t.Fatalf("after %s: delivery %+v, want UNKNOWN STALE_CLAIM", staleAfter, d)
	}
	if got := alerts.Alerts(); len(got) != 1 || got[0].Kind != alert.StaleClaim || got[0].MessageID != j.MessageID || got[0].Tenant != j.Tenant {
		t.Fatalf("sweep alerts %+v, want one STALE_CLAIM for %s of tenant %s", got, j.MessageID, j.Tenant)
	}
	// Requeue and redelivery find UNKNOWN: never resent automatically.
	for range 2 {
		if r := snd.Send(b.ctx, j); r.Verdict != sender.Done || r.State != heraldtype.DeliveryUnknown {
			t.Fatalf("a copy after the sweep: %+v, want Done UNKNOWN", r)
		}
	}
}

package sender_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/metrics/metricstest"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
)

// fakeLimiter is a sender.Limiter that records its calls and answers Wait
// through wait (nil: a token at once).
type fakeLimiter struct {
	mu    sync.Mutex
	wait  func(ctx context.Context, provider string, lane heraldtype.Lane) (time.Duration, error)
	waits []string // provider/lane
	slows []slowCall
}

type slowCall struct {
	provider   string
	retryAfter time.Duration
}

func (f *fakeLimiter) Wait(ctx context.Context, provider string, lane heraldtype.Lane) (time.Duration, error) {
	f.mu.Lock()
	f.waits = append(f.waits, provider+"/"+string(lane))
	wait := f.wait
	f.mu.Unlock()
	if wait == nil {
		return 0, nil
	}
	return wait(ctx, provider, lane)
}

func (f *fakeLimiter) Slow(ctx context.Context, provider string, retryAfter time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slows = append(f.slows, slowCall{provider, retryAfter})
}

// limited is setup with lim as the sender's limiter.
func limited(t *testing.T, lim *fakeLimiter) (*sender.Sender, bundle) {
	t.Helper()
	snd, b := setup(t, sender.Hooks{})
	snd.Limiter = lim
	return snd, b
}

func TestRateLimitIsWaitedForBeforeTheClaim(t *testing.T) {
	t.Parallel()
	lim := &fakeLimiter{}
	snd, b := limited(t, lim)
	j := job("n1", heraldtype.ChannelWebhook)
	lim.wait = func(ctx context.Context, provider string, lane heraldtype.Lane) (time.Duration, error) {
		// Nothing is claimed while the send waits: a crash here leaves no
		// SENDING row.
		if _, err := b.store.DeliveryGet(ctx, j.MessageID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("while waiting for the rate limit, the delivery row is there (%v)", err)
		}
		if n := b.sims[heraldtype.ChannelWebhook].Total(); n != 0 {
			t.Errorf("%d calls before the token", n)
		}
		return 0, nil
	}
	if r := snd.Send(b.ctx, j); r.State != heraldtype.DeliveryProviderAccepted {
		t.Fatalf("%+v", r)
	}
	if want := []string{"sim-webhook/transactional"}; len(lim.waits) != 1 || lim.waits[0] != want[0] {
		t.Fatalf("waits %v, want %v", lim.waits, want)
	}
}

func TestRateLimitAnswersThatStopTheSend(t *testing.T) {
	t.Parallel()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		name    string
		ctx     context.Context
		later   time.Duration
		err     error
		verdict sender.Verdict
		reason  string
		delay   time.Duration
	}{
		{"NoTokenSoonIsARetryAfterTheLimitersTime", context.Background(), 45 * time.Second, nil, sender.Retry, sender.ReasonRateLimited, 45 * time.Second},
		{"ALimiterWithoutItsStoreIsABackoff", context.Background(), 0, errors.New("connection refused"), sender.Backoff, heraldtype.ReasonStoreUnavailable, 0},
		{"ShutdownWhileWaitingIsABackoff", cancelled, 0, context.Canceled, sender.Backoff, "SHUTDOWN", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			lim := &fakeLimiter{wait: func(context.Context, string, heraldtype.Lane) (time.Duration, error) { return c.later, c.err }}
			snd, b := limited(t, lim)
			j := job("n1", heraldtype.ChannelWebhook)
			j.Known = &heraldtype.Known{} // the claim saw no row: no peek, so a cancelled ctx reaches the limiter
			r := snd.Send(c.ctx, j)
			if r.Verdict != c.verdict || r.Reason != c.reason || r.Delay != c.delay || r.State != "" {
				t.Fatalf("%+v, want %s with %s after %s and no state", r, c.verdict, c.reason, c.delay)
			}
			if c.err != nil && !errors.Is(r.Err, c.err) {
				t.Fatalf("Err %v, want it to wrap %v (the claimer gives a row back at shutdown by it)", r.Err, c.err)
			}
			if _, err := b.store.DeliveryGet(b.ctx, j.MessageID); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("a delivery row was written (%v)", err)
			}
			if n := b.sims[heraldtype.ChannelWebhook].Total(); n != 0 {
				t.Fatalf("%d provider calls", n)
			}
		})
	}
}

func TestRateLimitIsNotSpentOnADecisionNotToSend(t *testing.T) {
	t.Parallel()
	lim := &fakeLimiter{}
	snd, b := limited(t, lim)
	j := job("n1", heraldtype.ChannelWebhook)
	j.Kind, j.Lane = "promo", heraldtype.LaneMarketing
	if r := snd.Send(b.ctx, j); r.Reason != heraldtype.ReasonConsentDenied {
		t.Fatalf("%+v", r)
	}
	if len(lim.waits) != 0 {
		t.Fatalf("waits %v for a suppressed send", lim.waits)
	}
}

func TestAJobThatExpiresWhileItWaitsIsNotSent(t *testing.T) {
	t.Parallel()
	lim := &fakeLimiter{}
	snd, b := limited(t, lim)
	j := job("n1", heraldtype.ChannelWebhook)
	expires := epoch.Add(time.Second)
	j.ExpiresAt = &expires
	lim.wait = func(context.Context, string, heraldtype.Lane) (time.Duration, error) {
		b.clk.Advance(2 * time.Second)
		return 0, nil
	}
	if r := snd.Send(b.ctx, j); r.State != heraldtype.DeliverySuppressed || r.Reason != heraldtype.ReasonExpired {
		t.Fatalf("%+v, want SUPPRESSED(EXPIRED)", r)
	}
	if n := b.sims[heraldtype.ChannelWebhook].Total(); n != 0 {
		t.Fatalf("%d provider calls", n)
	}
}

func TestARefusalForTheRateSlowsTheLimit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		out  provider.Outcome
		want []slowCall
	}{
		{"429WithRetryAfter", provider.RateLimitedOutcome("HTTP_429", 3*time.Second), []slowCall{{"sim-webhook", 3 * time.Second}}},
		{"429Bare", provider.RateLimitedOutcome("HTTP_429", 0), []slowCall{{"sim-webhook", 0}}},
		{"AnAdaptersQuotaBare", provider.RateLimitedOutcome("FCM_QUOTA_EXCEEDED", 0), []slowCall{{"sim-webhook", 0}}},
		{"ANotSentWithRetryAfter", provider.NotSentOutcome("BIZPPURIO_3008", 5*time.Second), []slowCall{{"sim-webhook", 5 * time.Second}}},
		{"A401IsNotTheRate", provider.NotSentOutcome("HTTP_401", 0), nil},
		{"ConnectionRefusedIsNotTheRate", provider.NotSentOutcome("CONNECTION_REFUSED", 0), nil},
		{"Accepted", provider.AcceptedOutcome(""), nil},
		{"Unknown", provider.UnknownOutcome("HTTP_503"), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			lim := &fakeLimiter{}
			snd, b := limited(t, lim)
			force(b.sims[heraldtype.ChannelWebhook], c.out)
			snd.Send(b.ctx, job("n1", heraldtype.ChannelWebhook))
			if len(lim.slows) != len(c.want) || (len(c.want) == 1 && lim.slows[0] != c.want[0]) {
				t.Fatalf("slows %+v, want %+v", lim.slows, c.want)
			}
		})
	}
}

// What the rate limit did shows in the metrics: a send put back counts in
// herald_rate_limit_deferrals_total, one that waited for its token and
// went on is observed in herald_rate_limit_wait_seconds, by provider.
func TestRateLimitWaitsAndDeferralsAreCounted(t *testing.T) {
	t.Parallel()
	lim := &fakeLimiter{}
	snd, b := limited(t, lim)
	m := metrics.New(nil)
	snd.Metrics = m
	defer_ := true
	lim.wait = func(context.Context, string, heraldtype.Lane) (time.Duration, error) {
		if defer_ {
			return 5 * time.Second, nil
		}
		b.clk.Advance(2 * time.Second) // the wait for the token
		return 0, nil
	}
	j := job("n1", heraldtype.ChannelWebhook)
	if r := snd.Send(b.ctx, j); r.Verdict != sender.Retry || r.Reason != sender.ReasonRateLimited {
		t.Fatalf("deferred send: %+v", r)
	}
	defer_ = false
	if r := snd.Send(b.ctx, j); r.State != heraldtype.DeliveryProviderAccepted {
		t.Fatalf("send after the wait: %+v", r)
	}
	if got := metricstest.Series(t, m, "herald_rate_limit_deferrals_total", "provider"); got["sim-webhook"] != 1 {
		t.Errorf("deferrals %v, want sim-webhook 1", got)
	}
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var count uint64
	var sum float64
	for _, f := range fams {
		if f.GetName() == "herald_rate_limit_wait_seconds" {
			for _, s := range f.GetMetric() {
				count, sum = count+s.GetHistogram().GetSampleCount(), sum+s.GetHistogram().GetSampleSum()
			}
		}
	}
	if count != 1 || sum != 2 {
		t.Errorf("waits observed %d, %v s; want one of 2 s", count, sum)
	}
}

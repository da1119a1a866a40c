package sender_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testsqlite"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/sim"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/sqlite"
)

var epoch = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

type bundle struct {
	store  *sqlite.Store
	clk    *clock.Fake
	sims   map[heraldtype.Channel]*sim.Sim
	alerts *alert.Recorder
	ctx    context.Context
}

func kinds() []config.Kind {
	tmpl := map[string]config.Template{}
	for _, ch := range []string{"webhook", "sms", "push"} {
		tmpl[ch] = config.Template{Title: "Paid", Body: "Paid {{.amount}} won"}
	}
	return []config.Kind{
		{Name: "payment", Category: "transactional", Channels: []string{"webhook", "sms", "push"}, Templates: tmpl},
		{Name: "promo", Category: "marketing", Channels: []string{"webhook", "sms", "push"}, Templates: tmpl},
		{Name: "greeting", Category: "transactional", Channels: []string{"webhook"}, Templates: map[string]config.Template{
			"webhook": {Locales: map[string]config.Template{
				"ko":      {Title: "결제", Body: "{{.amount}}원 결제"},
				"default": {Title: "Paid", Body: "Paid {{.amount}} won"},
			}},
		}},
	}
}

func setup(t *testing.T, hooks sender.Hooks) (*sender.Sender, bundle) {
	t.Helper()
	clk := clock.NewFake(epoch)
	s, err := sqlite.Open(context.Background(), testsqlite.Path(t), sqlite.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	cat, err := catalog.New(kinds())
	if err != nil {
		t.Fatal(err)
	}
	b := bundle{store: s, clk: clk, sims: map[heraldtype.Channel]*sim.Sim{}, alerts: &alert.Recorder{}, ctx: context.Background()}
	reg := provider.NewRegistry()
	for _, ch := range []heraldtype.Channel{heraldtype.ChannelWebhook, heraldtype.ChannelSMS, heraldtype.ChannelPush} {
		b.sims[ch] = sim.New(sim.Config{})
		reg.Register(ch, "sim-"+string(ch), b.sims[ch])
	}
	snd := sender.New(sender.Config{
		Store: s, Providers: reg, Catalog: cat, Clock: clk, Owner: "test", Alerts: b.alerts, Hooks: hooks,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
		Retry:  sender.RetryPolicy{Quick: 2, QuickDelay: time.Second, Slow: 3, SlowDelay: 10 * time.Minute},
	})
	return snd, b
}

func job(id string, ch heraldtype.Channel) heraldtype.Job {
	return heraldtype.Job{
		MessageID: id + "." + string(ch), NotificationID: id, Tenant: "t1", Recipient: "r1", EventID: "e1",
		Kind: "payment", Lane: heraldtype.LaneTransactional, Channel: ch, Params: json.RawMessage(`{"amount":12000}`),
	}
}

// createNotification stores j's notification, of its one channel, for
// the tests that need it in the store (its erasure, its cancel mark).
func createNotification(t *testing.T, b bundle, j heraldtype.Job) {
	t.Helper()
	if _, err := b.store.NotificationCreate(b.ctx, store.NotificationCreateParams{
		Tenant: j.Tenant, ID: j.NotificationID, Recipient: j.Recipient, EventID: j.EventID, Kind: j.Kind, Lane: j.Lane,
		Params: j.Params, Channels: []heraldtype.Channel{j.Channel},
	}); err != nil {
		t.Fatal(err)
	}
}

func delivery(t *testing.T, b bundle, id string) store.Delivery {
	t.Helper()
	d, err := b.store.DeliveryGet(b.ctx, id)
	if err != nil {
		t.Fatalf("DeliveryGet(%s): %v", id, err)
	}
	return d
}

func putProfile(t *testing.T, b bundle, p store.Profile) {
	t.Helper()
	if err := b.store.ProfilePut(b.ctx, p); err != nil {
		t.Fatalf("ProfilePut: %v", err)
	}
}

// waitLimit bounds every wait so a broken test fails instead of hanging.
const waitLimit = 30 * time.Second

// waitFor waits until done is closed, or fails the test after waitLimit.
func waitFor(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(waitLimit):
		t.Fatalf("%s did not happen within %s", what, waitLimit)
	}
}

// wantAlerts checks that exactly the alerts of kinds were raised, in order,
// each for j's message and tenant.
func wantAlerts(t *testing.T, b bundle, j heraldtype.Job, kinds ...string) []alert.Alert {
	t.Helper()
	got := b.alerts.Alerts()
	if len(got) != len(kinds) {
		t.Fatalf("alerts %+v, want %q", got, kinds)
	}
	for i, a := range got {
		if a.Kind != kinds[i] || a.MessageID != j.MessageID || a.Tenant != j.Tenant || a.Tenant == "" || a.Reason == "" {
			t.Errorf("alert %+v, want %s for %s of tenant %s, with a reason", a, kinds[i], j.MessageID, j.Tenant)
		}
	}
	return got
}

func force(s *sim.Sim, out provider.Outcome) {
	s.OnCall(func(context.Context, provider.Message) provider.Outcome { return out })
}

func TestTwoCopiesPastThePeekMakeOneCall(t *testing.T) {
	t.Parallel()
	// Both copies are held after the peek until both have passed it, so both
	// saw "no row" — the case the peek cannot prevent. The unique claim must.
	// The winner is then held after its claim until the loser has answered,
	// so the loser finds the claim SENDING, as it would with a slow provider.
	var arrived sync.WaitGroup
	arrived.Add(2)
	release := make(chan struct{})
	go func() { arrived.Wait(); close(release) }()
	loserAnswered := make(chan struct{})
	snd, b := setup(t, sender.Hooks{
		AfterPeek: func(context.Context, heraldtype.Job) {
			arrived.Done()
			select {
			case <-release:
			case <-time.After(waitLimit):
				t.Errorf("the other copy did not pass the peek within %s", waitLimit)
			}
		},
		AfterClaim: func(context.Context, heraldtype.Job) {
			select {
			case <-loserAnswered:
			case <-time.After(waitLimit):
				t.Errorf("the losing copy did not answer within %s", waitLimit)
			}
		},
	})
	j := job("n1", heraldtype.ChannelWebhook)
	results := make(chan sender.Result, 2)
	for range 2 {
		go func() { results <- snd.Send(b.ctx, j) }()
	}
	// Only the loser can answer while the winner is held after its claim.
	loser := testenv.Recv(t, results, "the losing copy's answer")
	close(loserAnswered)
	winner := testenv.Recv(t, results, "the winning copy's answer")
	if n := b.sims[heraldtype.ChannelWebhook].CallCount(j.MessageID); n != 1 {
		t.Fatalf("provider called %d times, want 1", n)
	}
	if winner.Verdict != sender.Done || winner.State != heraldtype.DeliveryProviderAccepted {
		t.Fatalf("winner %+v, want Done PROVIDER_ACCEPTED", winner)
	}
	// The loser keeps its copy: the winner might still have needed it.
	if loser.Verdict != sender.Retry || loser.State != heraldtype.DeliverySending || loser.Reason != heraldtype.ReasonClaimHeld || loser.Delay != sender.MinRecheck {
		t.Fatalf("loser %+v, want a recheck in %s while SENDING", loser, sender.MinRecheck)
	}
	if again := snd.Send(b.ctx, j); again.Verdict != sender.Done || again.State != heraldtype.DeliveryProviderAccepted {
		t.Fatalf("the loser's recheck: %+v, want Done PROVIDER_ACCEPTED", again)
	}
	if d := delivery(t, b, j.MessageID); d.State != heraldtype.DeliveryProviderAccepted || d.Attempts != 1 {
		t.Fatalf("delivery %+v", d)
	}
}

func TestOutcomeClasses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		out   provider.Outcome
		state heraldtype.DeliveryState
		alert string
	}{
		{"AcceptedIsProviderAccepted", provider.AcceptedOutcome(""), heraldtype.DeliveryProviderAccepted, ""},
		{"PermanentIsPermanentFailure", provider.PermanentOutcome("HTTP_410"), heraldtype.DeliveryPermanentFailure, ""},
		{"UnknownIsUnknownAndAlerted", provider.UnknownOutcome("TIMEOUT"), heraldtype.DeliveryUnknown, alert.UnknownOutcome},
		{"NotSentReleasesIntoRetryWait", provider.NotSentOutcome("CONNECTION_REFUSED", 0), heraldtype.DeliveryRetryWait, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			snd, b := setup(t, sender.Hooks{})
			force(b.sims[heraldtype.ChannelWebhook], c.out)
			j := job("n1", heraldtype.ChannelWebhook)
			res := snd.Send(b.ctx, j)
			d := delivery(t, b, j.MessageID)
			if res.State != c.state || d.State != c.state || d.Reason != c.out.Reason {
				t.Fatalf("result %+v, delivery %+v, want %s", res, d, c.state)
			}
			if c.alert == "" {
				wantAlerts(t, b, j)
			} else if a := wantAlerts(t, b, j, c.alert); a[0].Reason != c.out.Reason {
				t.Errorf("alert reason %q, want %q", a[0].Reason, c.out.Reason)
			}
			// A later copy never calls again, whatever the outcome was.
			snd.Send(b.ctx, j)
			if n := b.sims[heraldtype.ChannelWebhook].CallCount(j.MessageID); n != 1 {
				t.Fatalf("%d calls", n)
			}
		})
	}
}

func TestDefiniteNonSendRetrySchedule(t *testing.T) {
	t.Parallel()
	snd, b := setup(t, sender.Hooks{})
	s := b.sims[heraldtype.ChannelWebhook]
	force(s, provider.NotSentOutcome("HTTP_429", 0))
	j := job("n1", heraldtype.ChannelWebhook)
	want := []time.Duration{time.Second, 10 * time.Minute, 10 * time.Minute, 10 * time.Minute}
	for i, delay := range want {
		res := snd.Send(b.ctx, j)
		if res.Verdict != sender.Retry || res.Delay != delay {
			t.Fatalf("attempt %d: %+v, want Retry after %s", i+1, res, delay)
		}
		// A copy that arrives before the retry is due does not call.
		if early := snd.Send(b.ctx, j); early.Verdict != sender.Retry || early.Delay != delay {
			t.Fatalf("early copy after attempt %d: %+v", i+1, early)
		}
		b.clk.Advance(delay)
	}
	res := snd.Send(b.ctx, j)
	if res.Verdict != sender.Done || res.State != heraldtype.DeliveryRetryExhausted {
		t.Fatalf("last attempt: %+v, want RETRY_EXHAUSTED", res)
	}
	if n := s.CallCount(j.MessageID); n != 5 {
		t.Fatalf("%d calls, want 5 (2 quick + 3 slow)", n)
	}
	if d := delivery(t, b, j.MessageID); d.Attempts != 5 || d.State != heraldtype.DeliveryRetryExhausted {
		t.Fatalf("delivery %+v", d)
	}
	if a := wantAlerts(t, b, j, alert.RetryExhausted); a[0].Reason != "HTTP_429" {
		t.Errorf("alert reason %q, want HTTP_429", a[0].Reason)
	}
}

func TestRetryAfterHintIsHonouredUpTo1h(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		hint, want time.Duration
	}{
		{"ShorterThanTheQuickDelayIsTheQuickDelay", 100 * time.Millisecond, time.Second},
		{"LongerIsTheHint", 30 * time.Second, 30 * time.Second},
		{"AnHourIsTheHint", time.Hour, time.Hour},
		{"OverAnHourIsCappedAt1h", 7 * time.Hour, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			snd, b := setup(t, sender.Hooks{})
			force(b.sims[heraldtype.ChannelWebhook], provider.NotSentOutcome("HTTP_429", tc.hint))
			j := job("n1", heraldtype.ChannelWebhook)
			if res := snd.Send(b.ctx, j); res.Verdict != sender.Retry || res.Delay != tc.want {
				t.Fatalf("provider hint %s: %+v, want Retry after %s", tc.hint, res, tc.want)
			}
			if d := delivery(t, b, j.MessageID); d.NextAttemptAt == nil || !d.NextAttemptAt.Equal(b.clk.Now().Add(tc.want)) {
				t.Fatalf("next attempt at %v, want %s from now", d.NextAttemptAt, tc.want)
			}
		})
	}
}

func TestCrashAfterClaimIsNeverSentAgain(t *testing.T) {
	t.Parallel()
	snd, b := setup(t, sender.Hooks{})
	j := job("n1", heraldtype.ChannelWebhook)
	// A process claimed the message and died before calling or recording.
	res, err := b.store.DeliveryClaim(b.ctx, store.DeliveryClaimParams{MessageID: j.MessageID, NotificationID: "n1", Tenant: "t1", Channel: j.Channel, Owner: "dead"})
	if err != nil || !res.Claimed {
		t.Fatalf("claim %+v %v", res, err)
	}
	// Copies offered meanwhile keep coming back, as long after as the claim
	// is old (at least 1 s, at most 1 min): the owner may still record a
	// retry that needs a copy.
	for _, c := range []struct{ age, recheck time.Duration }{
		{0, time.Second}, {30 * time.Second, 30 * time.Second}, {10 * time.Minute, time.Minute},
	} {
		b.clk.Advance(epoch.Add(c.age).Sub(b.clk.Now()))
		if r := snd.Send(b.ctx, j); r.Verdict != sender.Retry || r.State != heraldtype.DeliverySending || r.Delay != c.recheck {
			t.Fatalf("a copy %s after the claim: %+v, want a recheck in %s while SENDING", c.age, r, c.recheck)
		}
	}
	// The stale sweep ends the claim; the next recheck finds it ended.
	b.clk.Advance(time.Second)
	stale, err := b.store.DeliverySweepStale(b.ctx, 10*time.Minute)
	if err != nil || len(stale) != 1 {
		t.Fatalf("stale %v %v", stale, err)
	}
	if r := snd.Send(b.ctx, j); r.Verdict != sender.Done || r.State != heraldtype.DeliveryUnknown {
		t.Fatalf("after sweep: %+v, want Done UNKNOWN", r)
	}
	if n := b.sims[heraldtype.ChannelWebhook].Total(); n != 0 {
		t.Fatalf("provider called %d times for a crashed claim", n)
	}
}

func TestPreChecks(t *testing.T) {
	t.Parallel()
	t.Run("NoProfileWebhookSends", func(t *testing.T) {
		t.Parallel()
		snd, b := setup(t, sender.Hooks{})
		if r := snd.Send(b.ctx, job("n1", heraldtype.ChannelWebhook)); r.State != heraldtype.DeliveryProviderAccepted {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("NoProfileSMSIsDestinationUnavailable", func(t *testing.T) {
		t.Parallel()
		snd, b := setup(t, sender.Hooks{})
		r := snd.Send(b.ctx, job("n1", heraldtype.ChannelSMS))
		if r.State != heraldtype.DeliverySuppressed || r.Reason != heraldtype.ReasonDestinationUnavailable {
			t.Fatalf("%+v", r)
		}
		if d := delivery(t, b, "n1.sms"); d.State != heraldtype.DeliverySuppressed || d.Attempts != 0 {
			t.Fatalf("%+v", d)
		}
	})
	t.Run("MarketingWithoutConsentIsConsentDenied", func(t *testing.T) {
		t.Parallel()
		snd, b := setup(t, sender.Hooks{})
		j := job("n1", heraldtype.ChannelWebhook)
		j.Kind, j.Lane = "promo", heraldtype.LaneMarketing
		if r := snd.Send(b.ctx, j); r.State != heraldtype.DeliverySuppressed || r.Reason != heraldtype.ReasonConsentDenied {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("TextIsInTheLanguageOfTheProfileAtSendTime", func(t *testing.T) {
		t.Parallel()
		snd, b := setup(t, sender.Hooks{})
		send := func(id, lang string) string {
			putProfile(t, b, store.Profile{Tenant: "t1", Recipient: "r1", Language: lang})
			j := job(id, heraldtype.ChannelWebhook)
			j.Kind = "greeting"
			if r := snd.Send(b.ctx, j); r.State != heraldtype.DeliveryProviderAccepted {
				t.Fatalf("%s: %+v", id, r)
			}
			calls := b.sims[heraldtype.ChannelWebhook].Calls()
			return calls[len(calls)-1].Message.Body
		}
		if got := send("n1", "ko-KR"); got != "12000원 결제" {
			t.Errorf("language ko-KR: body %q", got)
		}
		if got := send("n2", "de"); got != "Paid 12000 won" {
			t.Errorf("language de: body %q, want the default text", got)
		}
	})
	t.Run("ProfileIsReadAtSendTime", func(t *testing.T) {
		t.Parallel()
		snd, b := setup(t, sender.Hooks{})
		p := store.Profile{Tenant: "t1", Recipient: "r1",
			Addresses: map[heraldtype.Channel]string{heraldtype.ChannelSMS: "+8210"},
			Consent:   map[heraldtype.Channel]bool{heraldtype.ChannelSMS: true}}
		putProfile(t, b, p)
		j := job("n1", heraldtype.ChannelSMS)
		j.Kind, j.Lane = "promo", heraldtype.LaneMarketing
		if r := snd.Send(b.ctx, j); r.State != heraldtype.DeliveryProviderAccepted {
			t.Fatalf("with consent: %+v", r)
		}
		if got := b.sims[heraldtype.ChannelSMS].Calls()[0].Message; got.Address != "+8210" || got.Body != "Paid 12000 won" {
			t.Fatalf("message %+v", got)
		}
		p.Consent[heraldtype.ChannelSMS] = false // withdrawn after intake
		putProfile(t, b, p)
		j2 := job("n2", heraldtype.ChannelSMS)
		j2.Kind, j2.Lane = "promo", heraldtype.LaneMarketing
		if r := snd.Send(b.ctx, j2); r.Reason != heraldtype.ReasonConsentDenied {
			t.Fatalf("after withdrawal: %+v", r)
		}
	})
	t.Run("ProfileKnownFromTheClaimIsUsed", func(t *testing.T) {
		t.Parallel()
		snd, b := setup(t, sender.Hooks{})
		stored := store.Profile{Tenant: "t1", Recipient: "r1",
			Addresses: map[heraldtype.Channel]string{heraldtype.ChannelSMS: "+8210"},
			Consent:   map[heraldtype.Channel]bool{heraldtype.ChannelSMS: true}}
		putProfile(t, b, stored)
		// The claim saw consent withdrawn; the sender must not read again.
		withdrawn, err := json.Marshal(store.Profile{Addresses: stored.Addresses})
		if err != nil {
			t.Fatal(err)
		}
		j := job("n1", heraldtype.ChannelSMS)
		j.Kind, j.Lane = "promo", heraldtype.LaneMarketing
		j.Known = &heraldtype.Known{ProfileRead: true, Profile: withdrawn}
		if r := snd.Send(b.ctx, j); r.Reason != heraldtype.ReasonConsentDenied {
			t.Fatalf("known withdrawal: %+v", r)
		}
		// No profile known: an SMS has no address.
		j2 := job("n2", heraldtype.ChannelSMS)
		j2.Known = &heraldtype.Known{ProfileRead: true}
		if r := snd.Send(b.ctx, j2); r.Reason != heraldtype.ReasonDestinationUnavailable {
			t.Fatalf("known absence: %+v", r)
		}
		// Known without ProfileRead (a broker's message): the profile is read.
		j3 := job("n3", heraldtype.ChannelSMS)
		j3.Known = &heraldtype.Known{}
		if r := snd.Send(b.ctx, j3); r.State != heraldtype.DeliveryProviderAccepted {
			t.Fatalf("profile read by the sender: %+v", r)
		}
	})
	t.Run("SkippedPeekStillSendsOnce", func(t *testing.T) {
		t.Parallel()
		snd, b := setup(t, sender.Hooks{})
		peeks := &countingPeeks{Store: b.store}
		snd.Store = peeks
		j := job("n1", heraldtype.ChannelWebhook)
		if r := snd.Send(b.ctx, j); r.State != heraldtype.DeliveryProviderAccepted || peeks.n.Load() != 1 {
			t.Fatalf("first: %+v after %d peeks, want one", r, peeks.n.Load())
		}
		// A copy whose claim did not see the row (Known says no delivery):
		// the peek is skipped, the delivery claim still refuses it.
		j.Known = &heraldtype.Known{}
		if r := snd.Send(b.ctx, j); r.Verdict != sender.Done || r.State != heraldtype.DeliveryProviderAccepted {
			t.Fatalf("copy: %+v", r)
		}
		if n := peeks.n.Load(); n != 1 {
			t.Fatalf("%d peeks, want the first copy's only", n)
		}
		if n := len(b.sims[heraldtype.ChannelWebhook].Calls()); n != 1 {
			t.Fatalf("%d provider calls, want 1", n)
		}
		// A copy that may have been seen (Known.Delivery) is peeked at.
		j.Known = &heraldtype.Known{Delivery: true}
		if r := snd.Send(b.ctx, j); r.Verdict != sender.Done || peeks.n.Load() != 2 {
			t.Fatalf("seen copy: %+v after %d peeks, want two", r, peeks.n.Load())
		}
	})
	t.Run("UnknownKindIsParked", func(t *testing.T) {
		t.Parallel()
		snd, b := setup(t, sender.Hooks{})
		j := job("n1", heraldtype.ChannelWebhook)
		j.Kind = "gone"
		if r := snd.Send(b.ctx, j); r.Verdict != sender.Park || r.Reason != heraldtype.ReasonUnknownKind {
			t.Fatalf("%+v", r)
		}
		if d := delivery(t, b, j.MessageID); d.State != heraldtype.DeliveryParked {
			t.Fatalf("%+v", d)
		}
	})
	t.Run("TemplateThatNoLongerRendersIsParked", func(t *testing.T) {
		t.Parallel()
		snd, b := setup(t, sender.Hooks{})
		j := job("n1", heraldtype.ChannelWebhook)
		j.Params = json.RawMessage(`{}`)
		if r := snd.Send(b.ctx, j); r.Verdict != sender.Park || r.Reason != heraldtype.ReasonTemplateFailed {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("LongMessageIDIsParkedBeforeAnyClaim", func(t *testing.T) {
		t.Parallel()
		snd, b := setup(t, sender.Hooks{})
		j := job(strings.Repeat("x", 100), heraldtype.ChannelWebhook)
		if r := snd.Send(b.ctx, j); r.Verdict != sender.Park || r.Reason != heraldtype.ReasonMessageIDTooLong {
			t.Fatalf("%+v", r)
		}
		if b.sims[heraldtype.ChannelWebhook].Total() != 0 {
			t.Fatal("called the provider")
		}
	})
	t.Run("ExpiredIsSuppressed", func(t *testing.T) {
		t.Parallel()
		snd, b := setup(t, sender.Hooks{})
		j := job("n1", heraldtype.ChannelWebhook)
		past := epoch.Add(-time.Second)
		j.ExpiresAt = &past
		if r := snd.Send(b.ctx, j); r.State != heraldtype.DeliverySuppressed || r.Reason != heraldtype.ReasonExpired {
			t.Fatalf("%+v", r)
		}
	})
}

// failingProfiles makes the profile read fail, as a database outage would.
type failingProfiles struct{ *sqlite.Store }

func (failingProfiles) ProfileGet(context.Context, string, string) (store.Profile, error) {
	return store.Profile{}, errors.New("connection refused")
}

func TestStoreFailureBeforeClaimWritesNothing(t *testing.T) {
	t.Parallel()
	snd, b := setup(t, sender.Hooks{})
	snd.Store = failingProfiles{b.store}
	snd.StoreRetry = 50 * time.Millisecond
	j := job("n1", heraldtype.ChannelWebhook)
	if r := snd.Send(b.ctx, j); r.Verdict != sender.Backoff || r.Err == nil {
		t.Fatalf("%+v, want Backoff", r)
	}
	if _, err := b.store.DeliveryGet(b.ctx, j.MessageID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a row was written: %v", err)
	}
}

// faultyStore fails the sender's store calls per step ("peek", "profile",
// "claim", "decide", "record"), as the calls on a dropped database
// connection do: a step's count of failures left, or every call with
// failForever. It notes the retry clock's time of every try.
type faultyStore struct {
	*sqlite.Store
	clk   clock.Clock
	mu    sync.Mutex
	fails map[string]int // step → failures left; failForever: every call
	tries map[string][]time.Time
}

const failForever = -1

func (b *faultyStore) fail(step string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tries == nil {
		b.tries = map[string][]time.Time{}
	}
	if b.clk != nil {
		b.tries[step] = append(b.tries[step], b.clk.Now())
	}
	switch n := b.fails[step]; {
	case n == failForever:
	case n > 0:
		b.fails[step]--
	default:
		return nil
	}
	return errors.New(step + ": FATAL: terminating connection due to administrator command (SQLSTATE 57P01)")
}

// heal makes every step work again.
func (b *faultyStore) heal() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fails = nil
}

// triesOf returns when the step was tried.
func (b *faultyStore) triesOf(step string) []time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]time.Time(nil), b.tries[step]...)
}

func (b *faultyStore) DeliveryGet(ctx context.Context, id string) (store.Delivery, error) {
	if err := b.fail("peek"); err != nil {
		return store.Delivery{}, err
	}
	return b.Store.DeliveryGet(ctx, id)
}

func (b *faultyStore) ProfileGet(ctx context.Context, tenant, recipient string) (store.Profile, error) {
	if err := b.fail("profile"); err != nil {
		return store.Profile{}, err
	}
	return b.Store.ProfileGet(ctx, tenant, recipient)
}

func (b *faultyStore) DeliveryClaim(ctx context.Context, p store.DeliveryClaimParams) (store.DeliveryClaimResult, error) {
	if err := b.fail("claim"); err != nil {
		return store.DeliveryClaimResult{}, err
	}
	return b.Store.DeliveryClaim(ctx, p)
}

func (b *faultyStore) DeliveryDecide(ctx context.Context, p store.DeliveryDecideParams) (bool, error) {
	if err := b.fail("decide"); err != nil {
		return false, err
	}
	return b.Store.DeliveryDecide(ctx, p)
}

func (b *faultyStore) DeliveryRecord(ctx context.Context, p store.DeliveryRecordParams) (store.RecordResult, error) {
	if err := b.fail("record"); err != nil {
		return store.RecordResult{}, err
	}
	return b.Store.DeliveryRecord(ctx, p)
}

func TestStoreBlipBeforeClaimIsRetriedInPlace(t *testing.T) {
	t.Parallel()
	snd, b := setup(t, sender.Hooks{})
	snd.Store = &faultyStore{Store: b.store, fails: map[string]int{"peek": 2, "profile": 1, "claim": 1, "record": 1}}
	j := job("n1", heraldtype.ChannelWebhook)
	if r := snd.Send(b.ctx, j); r.Verdict != sender.Done || r.State != heraldtype.DeliveryProviderAccepted {
		t.Fatalf("%+v, want Done PROVIDER_ACCEPTED after the store came back", r)
	}
	if n := b.sims[heraldtype.ChannelWebhook].Total(); n != 1 {
		t.Fatalf("%d provider calls, want 1", n)
	}
}

func TestShutdown(t *testing.T) {
	t.Parallel()
	t.Run("BeforeTheClaimGivesTheJobBack", func(t *testing.T) {
		t.Parallel()
		snd, b := setup(t, sender.Hooks{})
		ctx, cancel := context.WithCancel(b.ctx)
		cancel()
		j := job("n1", heraldtype.ChannelWebhook)
		if r := snd.Send(ctx, j); r.Verdict != sender.Backoff || !errors.Is(r.Err, context.Canceled) {
			t.Fatalf("%+v", r)
		}
		if b.sims[heraldtype.ChannelWebhook].Total() != 0 {
			t.Fatal("called the provider")
		}
	})
	t.Run("AfterTheClaimFinishesTheSend", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		snd, b := setup(t, sender.Hooks{AfterClaim: func(context.Context, heraldtype.Job) { cancel() }})
		s := b.sims[heraldtype.ChannelWebhook]
		s.OnCall(func(callCtx context.Context, _ provider.Message) provider.Outcome {
			if callCtx.Err() != nil {
				return provider.UnknownOutcome("CANCELLED")
			}
			return provider.AcceptedOutcome("")
		})
		j := job("n1", heraldtype.ChannelWebhook)
		if r := snd.Send(ctx, j); r.State != heraldtype.DeliveryProviderAccepted {
			t.Fatalf("%+v: shutdown cancelled the claimed send", r)
		}
	})
}

func TestRetryPolicy(t *testing.T) {
	t.Parallel()
	p := sender.RetryPolicy{Quick: 2, QuickDelay: time.Second, Slow: 3, SlowDelay: 10 * time.Minute}
	for attempt, want := range map[int]time.Duration{1: time.Second, 2: 10 * time.Minute, 3: 10 * time.Minute, 4: 10 * time.Minute} {
		if d, ok := p.DelayAfter(attempt); !ok || d != want {
			t.Errorf("after attempt %d: %s %v, want %s", attempt, d, ok, want)
		}
	}
	if _, ok := p.DelayAfter(5); ok {
		t.Error("a sixth attempt was allowed")
	}
}

// countingPeeks counts the sender's reads of a delivery row.
type countingPeeks struct {
	*sqlite.Store
	n atomic.Int64
}

func (c *countingPeeks) DeliveryGet(ctx context.Context, id string) (store.Delivery, error) {
	c.n.Add(1)
	return c.Store.DeliveryGet(ctx, id)
}

// lostAnswer commits the first result write and then reports an error, as a
// connection that drops after the commit does.
type lostAnswer struct {
	*sqlite.Store
	lost atomic.Bool
}

func (l *lostAnswer) DeliveryRecord(ctx context.Context, p store.DeliveryRecordParams) (store.RecordResult, error) {
	res, err := l.Store.DeliveryRecord(ctx, p)
	if err == nil && l.lost.CompareAndSwap(false, true) {
		return store.RecordResult{}, errors.New("connection reset after commit")
	}
	return res, err
}

func TestRecordWhoseFirstAnswerWasLost(t *testing.T) {
	t.Parallel()
	snd, b := setup(t, sender.Hooks{})
	snd.Store = &lostAnswer{Store: b.store}
	force(b.sims[heraldtype.ChannelWebhook], provider.NotSentOutcome("CONNECTION_REFUSED", 0))
	j := job("n1", heraldtype.ChannelWebhook)
	// The retry of the write finds RETRY_WAIT already there: the message must
	// still be offered again, not given up as a stale claim.
	if r := snd.Send(b.ctx, j); r.Verdict != sender.Retry || r.State != heraldtype.DeliveryRetryWait {
		t.Fatalf("%+v, want Retry", r)
	}
}

// recordSpy passes every store call through and keeps the result writes'
// params.
type recordSpy struct {
	store.Store
	mu  sync.Mutex
	got []store.DeliveryRecordParams
}

func (r *recordSpy) DeliveryRecord(ctx context.Context, p store.DeliveryRecordParams) (store.RecordResult, error) {
	r.mu.Lock()
	r.got = append(r.got, p)
	r.mu.Unlock()
	return r.Store.DeliveryRecord(ctx, p)
}

// A job that came as a message says whether its row is on no fallback
// chain (Job.OffChain, from the relay's claim); the sender hands that to
// its result write, which then need not look for a chain.
func TestTheResultWriteKnowsAJobOnNoChain(t *testing.T) {
	t.Parallel()
	snd, b := setup(t, sender.Hooks{})
	spy := &recordSpy{Store: b.store}
	snd.Store = spy
	for _, off := range []bool{true, false} {
		j := job(map[bool]string{true: "n-off", false: "n-on"}[off], heraldtype.ChannelWebhook)
		j.OffChain = off
		if r := snd.Send(b.ctx, j); r.Verdict != sender.Done {
			t.Fatalf("off chain %v: %+v", off, r)
		}
	}
	spy.mu.Lock()
	defer spy.mu.Unlock()
	if len(spy.got) != 2 || !spy.got[0].OffChain || spy.got[1].OffChain {
		t.Fatalf("result writes %+v; want the first OffChain, the second not", spy.got)
	}
}

// WithCallEnded's function runs once the provider call has returned and
// before its result is written (the dispatcher frees the send's slot
// there), and not at all for a send that makes no call.
func TestCallEndedComesBetweenTheCallAndItsRecord(t *testing.T) {
	t.Parallel()
	snd, b := setup(t, sender.Hooks{})
	j := job("n1", heraldtype.ChannelWebhook)
	var seen []string
	ctx := sender.WithCallEnded(b.ctx, func() {
		seen = append(seen, fmt.Sprintf("%d call(s), %s", b.sims[heraldtype.ChannelWebhook].Total(), delivery(t, b, j.MessageID).State))
	})
	if r := snd.Send(ctx, j); r.Verdict != sender.Done || r.State != heraldtype.DeliveryProviderAccepted {
		t.Fatalf("send: %+v", r)
	}
	if want := []string{"1 call(s), SENDING"}; !slices.Equal(seen, want) {
		t.Fatalf("call ended at %q, want %q", seen, want)
	}
	// A copy finds the send recorded and makes no call.
	if r := snd.Send(ctx, j); r.Verdict != sender.Done {
		t.Fatalf("a copy: %+v", r)
	}
	if len(seen) != 1 {
		t.Fatalf("call ended %d times for one call: %q", len(seen), seen)
	}
}

package suppression_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testsqlite"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/sim"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/sqlite"
	"github.com/heraldhq/herald/suppression"
)

var epoch = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

const lease = 10 * time.Minute

// keys is the seam: the store's event keys, or, while down, a store that
// cannot be reached.
type keys struct {
	suppression.Store
	down  atomic.Bool
	calls atomic.Int32
}

var errDown = errors.New("event keys: connection refused")

func (k *keys) EventKeyTake(ctx context.Context, p store.EventKeyTakeParams) (store.EventKeyTakeResult, error) {
	k.calls.Add(1)
	if k.down.Load() {
		return store.EventKeyTakeResult{}, errDown
	}
	return k.Store.EventKeyTake(ctx, p)
}

// claims is the seam of a check InClaim: the sender's store, whose claims
// cannot take an event key while keys is down.
type claims struct {
	*sqlite.Store
	keys *keys
}

func (c claims) DeliveryClaim(ctx context.Context, p store.DeliveryClaimParams) (store.DeliveryClaimResult, error) {
	if p.Event != nil {
		c.keys.calls.Add(1)
		if c.keys.down.Load() {
			return store.DeliveryClaimResult{}, fmt.Errorf("claim delivery %s: %w: %w", p.MessageID, store.ErrEventKeys, errDown)
		}
	}
	return c.Store.DeliveryClaim(ctx, p)
}

// modes runs test with the check taking keys itself and with the claim
// taking them (InClaim, as herald runs it).
func modes(t *testing.T, test func(t *testing.T, b bundle)) {
	for _, inClaim := range []bool{false, true} {
		name := "check"
		if inClaim {
			name = "claim"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, setupMode(t, inClaim))
		})
	}
}

type bundle struct {
	store *sqlite.Store
	keys  *keys
	clk   *clock.Fake
	sim   *sim.Sim
	logs  *testenv.Buffer
	snd   *sender.Sender
	ctx   context.Context
}

// The kinds: one per category on the webhook channel (no address needed),
// a transactional one with an inbox item, and two on push and SMS, one of
// each policy.
func kinds() []config.Kind {
	tmpl := config.Template{Title: "t", Body: "b"}
	one := func(name, category string, chs ...string) config.Kind {
		k := config.Kind{Name: name, Category: category, Channels: chs, Templates: map[string]config.Template{}}
		for _, ch := range chs {
			k.Templates[ch] = tmpl
		}
		return k
	}
	first := one("login.code", "transactional", "push", "sms")
	first.Policy = config.PolicyFirst
	return []config.Kind{
		one("fraud.alert", "alert", "webhook"),
		one("payment", "transactional", "webhook"),
		one("order.shipped", "transactional", "inbox", "webhook"),
		one("coupon", "marketing", "webhook"),
		one("disk.full", "internal", "webhook"),
		one("security.notice", "alert", "push", "sms"),
		first,
	}
}

// setup is a sender on SQLite whose only rule is the check, over the
// store's keys through the seam.
func setup(t *testing.T) bundle {
	t.Helper()
	return setupMode(t, false)
}

// setupMode is setup with the check InClaim or not; InClaim the seam is
// the sender's claims.
func setupMode(t *testing.T, inClaim bool) bundle {
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
	b := bundle{store: s, keys: &keys{Store: s}, clk: clk, sim: sim.New(sim.Config{}), logs: &testenv.Buffer{}, ctx: context.Background()}
	reg := provider.NewRegistry()
	for _, ch := range []heraldtype.Channel{heraldtype.ChannelWebhook, heraldtype.ChannelPush, heraldtype.ChannelSMS} {
		reg.Register(ch, "sim", b.sim)
	}
	logger := slog.New(slog.NewTextHandler(b.logs, nil))
	byName := map[string]suppression.Kind{}
	for _, k := range kinds() {
		byName[k.Name] = suppression.Kind{First: k.FirstAvailable(), Inbox: k.Channels[0] == "inbox"}
	}
	check := suppression.New(suppression.Config{Store: b.keys, InClaim: inClaim, Lease: lease, Kinds: byName, StoreWait: time.Nanosecond, Logger: logger})
	var st store.Store = s
	if inClaim {
		st = claims{Store: s, keys: b.keys}
	}
	b.snd = sender.New(sender.Config{
		Store: st, Providers: reg, Catalog: cat, Clock: clk, Owner: "test", Logger: logger, Checks: []sender.Check{check},
		Retry: sender.RetryPolicy{Quick: 2, QuickDelay: time.Second, Slow: 3, SlowDelay: 10 * time.Minute},
	})
	for _, r := range []string{"r1", "r2"} {
		err := s.ProfilePut(b.ctx, store.Profile{Tenant: "t1", Recipient: r, Consent: map[heraldtype.Channel]bool{heraldtype.ChannelWebhook: true},
			Addresses: map[heraldtype.Channel]string{heraldtype.ChannelPush: "token", heraldtype.ChannelSMS: "+8210"}})
		if err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// notify accepts a notification of kind for r1's event e1, as intake
// would, and returns its jobs by channel.
func notify(t *testing.T, b bundle, kind, event string) map[heraldtype.Channel]heraldtype.Job {
	t.Helper()
	var k config.Kind
	for _, c := range kinds() {
		if c.Name == kind {
			k = c
		}
	}
	id := ids.New("ntf", b.clk.Now())
	lane := heraldtype.Lane(k.Category)
	var chs []heraldtype.Channel
	for _, ch := range k.Channels {
		chs = append(chs, heraldtype.Channel(ch))
	}
	p := store.NotificationCreateParams{
		Tenant: "t1", IdempotencyKey: id, RequestHash: "h", IdempotencyTTL: time.Hour, Response: []byte(`{}`), ID: id,
		Recipient: "r1", EventID: event, Kind: kind, Lane: lane, Params: json.RawMessage(`{}`), Channels: chs,
	}
	if chs[0] == heraldtype.ChannelInbox {
		p.Inbox = []store.InboxText{{Title: "t", Body: "b"}}
	}
	if _, err := b.store.NotificationCreate(b.ctx, p); err != nil {
		t.Fatalf("NotificationCreate: %v", err)
	}
	jobs := map[heraldtype.Channel]heraldtype.Job{}
	for _, ch := range chs {
		if ch == heraldtype.ChannelInbox {
			continue // stored at intake
		}
		jobs[ch] = heraldtype.Job{MessageID: store.MessageID(id, ch), NotificationID: id, Tenant: "t1", Recipient: "r1",
			EventID: event, Kind: kind, Lane: lane, Channel: ch, Params: json.RawMessage(`{}`)}
	}
	return jobs
}

// send runs the sender on job and fails the test unless it ends in state
// with reason.
func send(t *testing.T, b bundle, job heraldtype.Job, state heraldtype.DeliveryState, reason string) sender.Result {
	t.Helper()
	res := b.snd.Send(b.ctx, job)
	if res.State != state || res.Reason != reason {
		t.Fatalf("send %s: %s(%s) %v; want %s(%s)", job.MessageID, res.State, res.Reason, res.Err, state, reason)
	}
	if d, err := b.store.DeliveryGet(b.ctx, job.MessageID); err != nil || d.State != state || d.Reason != reason {
		t.Fatalf("delivery %s: %+v %v; want %s(%s)", job.MessageID, d, err, state, reason)
	}
	return res
}

// The rule: the first notification of an event takes its key and sends;
// a second one, under another idempotency key, is SUPPRESSED
// (DUPLICATE_EVENT) without a call; the first one's own send again (its
// retry's copy) finds its key and is not suppressed by it.
func TestASecondNotificationOfAnEventIsADuplicate(t *testing.T) {
	modes(t, func(t *testing.T, b bundle) {
		first := notify(t, b, "payment", "e1")[heraldtype.ChannelWebhook]
		send(t, b, first, heraldtype.DeliveryProviderAccepted, "")
		second := notify(t, b, "payment", "e1")[heraldtype.ChannelWebhook]
		send(t, b, second, heraldtype.DeliverySuppressed, heraldtype.ReasonDuplicateEvent)
		if res := b.snd.Send(b.ctx, first); res.Verdict != sender.Done || res.State != heraldtype.DeliveryProviderAccepted {
			t.Fatalf("the first one's copy again: %+v", res)
		}
		other := notify(t, b, "payment", "e2")[heraldtype.ChannelWebhook]
		send(t, b, other, heraldtype.DeliveryProviderAccepted, "")
		if n := b.sim.Total(); n != 2 {
			t.Fatalf("%d provider calls, want 2 (e1 once, e2 once)", n)
		}
	})
}

// A send that waits for its retry holds the event past the lease: other
// notifications are duplicates, and the owner's retry goes on.
func TestTheOwnersRetryGoesOnAndHoldsTheEventMeanwhile(t *testing.T) {
	modes(t, func(t *testing.T, b bundle) {
		refuse := true
		b.sim.OnCall(func(context.Context, provider.Message) provider.Outcome {
			if refuse {
				return provider.Outcome{Class: provider.NotSent, Reason: "HTTP_503"}
			}
			return provider.Outcome{Class: provider.Accepted}
		})
		owner := notify(t, b, "payment", "e1")[heraldtype.ChannelWebhook]
		send(t, b, owner, heraldtype.DeliveryRetryWait, "HTTP_503")
		b.clk.Advance(lease)
		dup := notify(t, b, "payment", "e1")[heraldtype.ChannelWebhook]
		send(t, b, dup, heraldtype.DeliverySuppressed, heraldtype.ReasonDuplicateEvent)
		refuse = false
		send(t, b, owner, heraldtype.DeliveryProviderAccepted, "")
		if n := b.sim.Total(); n != 2 {
			t.Fatalf("%d provider calls, want the owner's two", n)
		}
	})
}

// A send that ended without a call frees the event once the lease has
// run out: the next notification takes the key over and sends, which is
// logged with both owners.
func TestAKeyFreedByADefiniteFailureIsTakenOverAfterTheLease(t *testing.T) {
	modes(t, func(t *testing.T, b bundle) {
		b.sim.OnCall(func(_ context.Context, m provider.Message) provider.Outcome {
			if b.sim.Total() == 0 {
				return provider.Outcome{Class: provider.Permanent, Reason: "HTTP_410"}
			}
			return provider.Outcome{Class: provider.Accepted}
		})
		owner := notify(t, b, "payment", "e1")[heraldtype.ChannelWebhook]
		send(t, b, owner, heraldtype.DeliveryPermanentFailure, "HTTP_410")
		early := notify(t, b, "payment", "e1")[heraldtype.ChannelWebhook]
		send(t, b, early, heraldtype.DeliverySuppressed, heraldtype.ReasonDuplicateEvent)
		b.clk.Advance(lease)
		late := notify(t, b, "payment", "e1")[heraldtype.ChannelWebhook]
		send(t, b, late, heraldtype.DeliveryProviderAccepted, "")
		if !strings.Contains(b.logs.String(), "previous_owner="+owner.NotificationID) {
			t.Fatalf("the takeover was not logged with the previous owner:\n%s", b.logs.String())
		}
		if n, err := b.store.EventKeysTakenOver(b.ctx, epoch); err != nil || n != 1 {
			t.Fatalf("keys taken over: %d %v, want 1", n, err)
		}
	})
}

// Policy all: each planned channel once per event, so a second
// notification sends on a channel the first did not send on. Policy
// first: one send per event, whatever the channel.
func TestTheChannelIsInTheKeyOfAnAllKindOnly(t *testing.T) {
	modes(t, sendBothChannels)
	check := suppression.New(suppression.Config{Kinds: map[string]suppression.Kind{"login.code": {First: true}}})
	device := heraldtype.DeviceSend(heraldtype.ChannelPush, "d1")
	for _, c := range []struct {
		kind string
		ch   heraldtype.Channel
		want heraldtype.Channel
	}{{"security.notice", device, heraldtype.ChannelPush}, {"security.notice", heraldtype.ChannelSMS, heraldtype.ChannelSMS}, {"login.code", device, ""}} {
		k := check.Key(heraldtype.Job{Tenant: "t1", Recipient: "r1", EventID: "e1", Kind: c.kind, Channel: c.ch})
		if want := (store.EventKey{Tenant: "t1", Recipient: "r1", EventID: "e1", Kind: c.kind, Channel: c.want}); k != want {
			t.Fatalf("key of %s on %s: %+v, want %+v", c.kind, c.ch, k, want)
		}
	}
}

// sendBothChannels: policy all sends a second notification of an event on
// a channel the first did not send on; policy first does not.
func sendBothChannels(t *testing.T, b bundle) {
	for _, kind := range []string{"security.notice", "login.code"} {
		first := notify(t, b, kind, "e1")
		send(t, b, first[heraldtype.ChannelPush], heraldtype.DeliveryProviderAccepted, "")
		second := notify(t, b, kind, "e1")
		send(t, b, second[heraldtype.ChannelPush], heraldtype.DeliverySuppressed, heraldtype.ReasonDuplicateEvent)
		if kind == "security.notice" {
			send(t, b, second[heraldtype.ChannelSMS], heraldtype.DeliveryProviderAccepted, "")
			send(t, b, first[heraldtype.ChannelSMS], heraldtype.DeliverySuppressed, heraldtype.ReasonDuplicateEvent)
		} else {
			send(t, b, second[heraldtype.ChannelSMS], heraldtype.DeliverySuppressed, heraldtype.ReasonDuplicateEvent)
			send(t, b, first[heraldtype.ChannelSMS], heraldtype.DeliveryProviderAccepted, "")
		}
	}
}

// When the keys cannot be read the category decides (seed 003 §7): alert
// and internal send, transactional with an inbox item and marketing are
// SUPPRESSED(SUPPRESSION_UNAVAILABLE), transactional without one sends.
func TestTheCategoryDecidesWhenTheKeysAreUnavailable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		kind   string
		state  heraldtype.DeliveryState
		reason string
	}{
		{"fraud.alert", heraldtype.DeliveryProviderAccepted, ""},
		{"payment", heraldtype.DeliveryProviderAccepted, ""},
		{"order.shipped", heraldtype.DeliverySuppressed, heraldtype.ReasonSuppressionUnavailable},
		{"coupon", heraldtype.DeliverySuppressed, heraldtype.ReasonSuppressionUnavailable},
		{"disk.full", heraldtype.DeliveryProviderAccepted, ""},
	} {
		t.Run(c.kind, func(t *testing.T) {
			modes(t, func(t *testing.T, b bundle) {
				b.keys.down.Store(true)
				send(t, b, notify(t, b, c.kind, "e1")[heraldtype.ChannelWebhook], c.state, c.reason)
				if b.keys.calls.Load() == 0 {
					t.Fatal("the check never asked the store")
				}
				calls := 0
				if c.state == heraldtype.DeliveryProviderAccepted {
					calls = 1
				}
				if n := b.sim.Total(); n != calls {
					t.Fatalf("%d provider calls, want %d", n, calls)
				}
				if !strings.Contains(b.logs.String(), "event keys unavailable") {
					t.Fatalf("nothing logged:\n%s", b.logs.String())
				}
			})
		})
	}
	for _, c := range []struct {
		category heraldtype.Lane
		inbox    bool
		send     bool
	}{
		{heraldtype.LaneAlert, true, true}, {heraldtype.LaneAlert, false, true},
		{heraldtype.LaneTransactional, true, false}, {heraldtype.LaneTransactional, false, true},
		{heraldtype.LaneMarketing, true, false}, {heraldtype.LaneMarketing, false, false},
		{heraldtype.LaneInternal, true, true}, {heraldtype.LaneInternal, false, true},
	} {
		if v := suppression.Unavailable(c.category, c.inbox); v.Go() != c.send {
			t.Errorf("Unavailable(%s, inbox %v) = %+v, want send %v", c.category, c.inbox, v, c.send)
		}
	}
}

// A failed take is tried again before the keys count as unavailable.
func TestAFailedTakeIsTriedAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	flaky := &flakyKeys{Store: b.store, fail: 2}
	check := suppression.New(suppression.Config{Store: flaky, StoreWait: time.Minute})
	job := notify(t, b, "coupon", "e1")[heraldtype.ChannelWebhook]
	if v := check.Check(b.ctx, sender.Subject{Job: job, Category: heraldtype.LaneMarketing}); !v.Go() {
		t.Fatalf("ruling %+v after two failed tries, want go", v)
	}
	if n := flaky.calls.Load(); n != 3 {
		t.Fatalf("%d tries, want 3", n)
	}
}

type flakyKeys struct {
	suppression.Store
	fail  int32
	calls atomic.Int32
}

func (f *flakyKeys) EventKeyTake(ctx context.Context, p store.EventKeyTakeParams) (store.EventKeyTakeResult, error) {
	if f.calls.Add(1) <= f.fail {
		return store.EventKeyTakeResult{}, errDown
	}
	return f.Store.EventKeyTake(ctx, p)
}

// A take that fails because the transport's context ended (shutdown) is
// not the store failing: the sender gives the job back before any claim,
// even for marketing.
func TestShutdownGivesTheJobBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(b.ctx)
	b.keys.Store = cancelling{Store: b.store, cancel: cancel}
	job := notify(t, b, "coupon", "e1")[heraldtype.ChannelWebhook]
	if res := b.snd.Send(ctx, job); res.Verdict != sender.Backoff {
		t.Fatalf("Send = %+v, want backoff", res)
	}
	if _, err := b.store.DeliveryGet(b.ctx, job.MessageID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a delivery row was written: %v", err)
	}
	// The check itself let it go: a decision written on the way out
	// could have committed.
	if strings.Contains(b.logs.String(), "unavailable") {
		t.Fatalf("shutdown was taken for the store failing:\n%s", b.logs.String())
	}
}

// cancelling is a store whose take ends the caller's context and fails
// with it, as a take cut short by shutdown does.
type cancelling struct {
	suppression.Store
	cancel context.CancelFunc
}

func (c cancelling) EventKeyTake(ctx context.Context, p store.EventKeyTakeParams) (store.EventKeyTakeResult, error) {
	c.cancel()
	return store.EventKeyTakeResult{}, ctx.Err()
}

// InClaim, a claim whose key cannot be taken is tried again for StoreWait
// before the category decides: a store that recovers within it takes
// the key, and the event's next notification is a duplicate.
func TestAFailedClaimTakeIsTriedAgain(t *testing.T) {
	t.Parallel()
	b := setupMode(t, true)
	check := suppression.New(suppression.Config{InClaim: true, StoreWait: time.Minute})
	flaky := &flakyClaims{Store: b.store, fail: 2}
	snd := sender.New(sender.Config{Store: flaky, Providers: b.snd.Providers, Catalog: b.snd.Catalog, Clock: b.clk, Owner: "test", Logger: slog.New(slog.NewTextHandler(b.logs, nil)),
		Checks: []sender.Check{check}})
	job := notify(t, b, "coupon", "e1")[heraldtype.ChannelWebhook]
	if res := snd.Send(b.ctx, job); res.State != heraldtype.DeliveryProviderAccepted {
		t.Fatalf("Send = %+v after two failed takes, want PROVIDER_ACCEPTED", res)
	}
	if n := flaky.calls.Load(); n != 3 {
		t.Fatalf("%d claims, want 3", n)
	}
	dup := notify(t, b, "coupon", "e1")[heraldtype.ChannelWebhook]
	if res := snd.Send(b.ctx, dup); res.State != heraldtype.DeliverySuppressed || res.Reason != heraldtype.ReasonDuplicateEvent {
		t.Fatalf("the event's second notification: %+v, want SUPPRESSED(DUPLICATE_EVENT)", res)
	}
}

type flakyClaims struct {
	*sqlite.Store
	fail  int32
	calls atomic.Int32
}

func (f *flakyClaims) DeliveryClaim(ctx context.Context, p store.DeliveryClaimParams) (store.DeliveryClaimResult, error) {
	if p.Event != nil && f.calls.Add(1) <= f.fail {
		return store.DeliveryClaimResult{}, fmt.Errorf("claim: %w: %w", store.ErrEventKeys, errDown)
	}
	return f.Store.DeliveryClaim(ctx, p)
}

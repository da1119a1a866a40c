package cancel_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/cancel"
	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/internal/storefault"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/internal/testsqlite"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/metrics/metricstest"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/sim"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/postgres"
	"github.com/heraldhq/herald/store/sqlite"
)

// These tests hold the cancel to its promise through the real sender and
// the db transport's claimer, on both stores: a cancelled message is never
// sent, the copy that comes for it is finished without a provider call, and
// its outbox row ends DONE, with no row left without an owner.

const tenant = "t1"

// bundle is a store with a sender over a simulated webhook provider.
type bundle struct {
	st     store.Store
	sim    *sim.Sim
	sender *sender.Sender
	cancel *cancel.Canceller
	// metrics counts the sender's and the cancel's delivery states.
	metrics *metrics.Metrics
	logger  *slog.Logger
	hooks   *sender.Hooks
	// gate is the claimer's (dispatch.ClaimerConfig.Gate), when set.
	gate func(ctx context.Context, job heraldtype.Job) (sender.Result, bool)
	// catalog and providers are the sender's.
	catalog   *catalog.Catalog
	providers *provider.Registry
}

// eachStore runs test against SQLite and PostgreSQL.
func eachStore(t *testing.T, test func(t *testing.T, b *bundle)) {
	t.Helper()
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			test(t, setup(t, driver))
		})
	}
}

func setup(t *testing.T, driver string) *bundle {
	t.Helper()
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	var st store.Store
	switch driver {
	case "sqlite":
		s, err := sqlite.Open(ctx, testsqlite.Path(t), sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		st = s
	case "postgres":
		s, err := postgres.Open(ctx, testpg.Schema(t), postgres.Options{Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		st = s
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("close the store: %v", err)
		}
	})
	cat, err := catalog.New([]config.Kind{{Name: "k", Category: "transactional", Channels: []string{"webhook"},
		Templates: map[string]config.Template{"webhook": {Title: "t", Body: "{{.n}}"}}}})
	if err != nil {
		t.Fatal(err)
	}
	sm := sim.New(sim.Config{})
	reg := provider.NewRegistry()
	reg.Register(heraldtype.ChannelWebhook, "sim-webhook", sm)
	m := metrics.New(nil)
	b := &bundle{st: st, sim: sm, logger: logger, hooks: &sender.Hooks{}, cancel: &cancel.Canceller{Store: st, Logger: logger, Metrics: m}, metrics: m,
		catalog: cat, providers: reg}
	b.sender = b.senderOver(st)
	return b
}

// senderOver is the bundle's sender over st (a faulty store), its hooks
// b.hooks'.
func (b *bundle) senderOver(st store.Store) *sender.Sender {
	return sender.New(sender.Config{Store: st, Providers: b.providers, Catalog: b.catalog, Owner: "test", Logger: b.logger, Metrics: b.metrics,
		Retry: sender.RetryPolicy{Quick: 2, QuickDelay: 50 * time.Millisecond, Slow: 1, SlowDelay: time.Minute},
		Hooks: sender.Hooks{
			AfterPeek: func(ctx context.Context, job heraldtype.Job) {
				if h := b.hooks.AfterPeek; h != nil {
					h(ctx, job)
				}
			},
			AfterClaim: func(ctx context.Context, job heraldtype.Job) {
				if h := b.hooks.AfterClaim; h != nil {
					h(ctx, job)
				}
			},
			AfterRecord: func(ctx context.Context, job heraldtype.Job, res sender.Result) {
				if h := b.hooks.AfterRecord; h != nil {
					h(ctx, job, res)
				}
			},
		}})
}

// create accepts n notifications, due now, and returns their ids.
func (b *bundle) create(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for i := range n {
		id := ids.New("ntf", time.Now())
		res, err := b.st.NotificationCreate(context.Background(), store.NotificationCreateParams{
			Tenant: tenant, ID: id, Recipient: "r", EventID: fmt.Sprint("e", i), Kind: "k", Lane: heraldtype.LaneTransactional,
			Params: json.RawMessage(`{"n":1}`), Channels: []heraldtype.Channel{heraldtype.ChannelWebhook},
		})
		if err != nil || res.Outcome != store.Created {
			t.Fatalf("create: %+v %v", res, err)
		}
		out = append(out, id)
	}
	return out
}

// runClaimer runs the transactional lane's claimer until the test ends.
func (b *bundle) runClaimer(t *testing.T) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	c := dispatch.NewClaimer(dispatch.ClaimerConfig{Lane: heraldtype.LaneTransactional, Store: b.st, Sender: b.sender,
		Owner: "test", Concurrency: 4, Lease: 30 * time.Second, PollInterval: 10 * time.Millisecond, Logger: b.logger, Gate: b.gate})
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the claimer did not stop within 30 s")
		}
	})
}

// waitAllDone waits until every notification's outbox row is DONE.
func (b *bundle) waitAllDone(t *testing.T, ids []string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		left := 0
		for _, id := range ids {
			if b.view(t, id).Deliveries[0].OutboxState != heraldtype.OutboxDone {
				left++
			}
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s, %d of %d outbox rows are not DONE", left, len(ids))
		}
		<-tick.C
	}
}

func (b *bundle) view(t *testing.T, id string) store.NotificationView {
	t.Helper()
	v, err := b.st.NotificationGet(context.Background(), tenant, id)
	if err != nil {
		t.Fatalf("NotificationGet %s: %v", id, err)
	}
	return v
}

func (b *bundle) cancelOf(t *testing.T, id string) cancel.Entry {
	t.Helper()
	res, err := b.cancel.Cancel(context.Background(), tenant, id)
	if err != nil {
		t.Fatalf("cancel %s: %v", id, err)
	}
	return res.Deliveries[0]
}

// wantOneCallThenCancelled waits for notification id's outbox row to end
// DONE and fails unless its send was called once and then ended
// SUPPRESSED(CANCELLED): never tried again after the cancel.
func (b *bundle) wantOneCallThenCancelled(t *testing.T, id string) {
	t.Helper()
	b.waitAllDone(t, []string{id})
	if n := b.sim.CallCount(store.MessageID(id, heraldtype.ChannelWebhook)); n != 1 {
		t.Errorf("the provider was called %d times, want the first attempt only", n)
	}
	v := b.view(t, id)
	if d := v.Deliveries[0].Delivery; d.State != heraldtype.DeliverySuppressed || d.Reason != cancel.ReasonCancelled || d.Attempts != 1 {
		t.Errorf("delivery %+v, want SUPPRESSED(CANCELLED) after 1 attempt", d)
	}
	// Its end is counted once, by whichever write made it.
	got := metricstest.Deliveries(t, b.metrics)
	want := map[string]float64{"SENDING": 1, "RETRY_WAIT": 1, "SUPPRESSED": 1}
	for _, st := range metrics.DeliveryStates {
		if k := "transactional/webhook/" + string(st); got[k] != want[string(st)] {
			t.Errorf("herald_deliveries_total{%s} = %v, want %v", k, got[k], want[string(st)])
		}
	}
}

// drainCancelled runs the claimer until the outbox rows of ids are DONE,
// and fails unless each one's send ended SUPPRESSED(CANCELLED) without a
// provider call.
func (b *bundle) drainCancelled(t *testing.T, ids []string) {
	t.Helper()
	b.runClaimer(t)
	b.waitAllDone(t, ids)
	for _, id := range ids {
		wantCancelled(t, b, id)
	}
	if n := b.sim.Total(); n != 0 {
		t.Errorf("%d provider calls; want none", n)
	}
}

func wantCancelled(t *testing.T, b *bundle, id string) {
	t.Helper()
	v := b.view(t, id)
	d := v.Deliveries[0].Delivery
	if d == nil || d.State != heraldtype.DeliverySuppressed || d.Reason != cancel.ReasonCancelled {
		t.Errorf("%s: delivery %+v, want SUPPRESSED(CANCELLED)", id, d)
	}
	if n := b.sim.CallCount(store.MessageID(id, heraldtype.ChannelWebhook)); n != 0 {
		t.Errorf("%s: the provider was called %d times for a cancelled message", id, n)
	}
}

func TestCancelledBeforeTheClaimIsFinishedWithoutACall(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, b *bundle) {
		ids := b.create(t, 10)
		for _, id := range ids {
			if e := b.cancelOf(t, id); !e.Cancelled || e.State != "SUPPRESSED" || e.Reason != cancel.ReasonCancelled {
				t.Fatalf("cancel %s: %+v", id, e)
			}
		}
		b.drainCancelled(t, ids)
		// A broker's copy (rabbitmq transport: no outbox fence, nothing
		// known) is acked, without a call.
		res := b.sender.Send(context.Background(), jobOf(b.view(t, ids[0])))
		if res.Verdict != sender.Done || res.State != heraldtype.DeliverySuppressed || b.sim.Total() != 0 {
			t.Fatalf("a consumer's copy: %+v after %d calls, want done (ack), SUPPRESSED, no call", res, b.sim.Total())
		}
	})
}

// A cancel that fails part-way (its mark committed and its answer lost, or
// its decision failing) reports the failure, sends nothing on its own
// account, and a repeat of it completes the cancel.
func TestACancelThatFailsPartWayIsCompletedByItsRepeat(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, b *bundle) {
		ids := b.create(t, 2)
		for i, fault := range []string{"mark", "decide"} {
			faulty := &cancel.Canceller{Store: &faultyCancel{Store: b.st, fault: fault}}
			if _, err := faulty.Cancel(context.Background(), tenant, ids[i]); !errors.Is(err, storefault.ErrConnReset) {
				t.Fatalf("%s: the failing cancel = %v; want the store's error", fault, err)
			}
			if e := b.cancelOf(t, ids[i]); !e.Cancelled {
				t.Fatalf("%s: the repeat answered %+v; want cancelled", fault, e)
			}
		}
		b.drainCancelled(t, ids)
	})
}

// faultyCancel is a store whose cancel mark commits and loses its answer
// (fault "mark"), or whose decisions fail (fault "decide").
type faultyCancel struct {
	store.Store
	fault string
}

func (f *faultyCancel) NotificationCancelMark(ctx context.Context, tenant, id string) error {
	if err := f.Store.NotificationCancelMark(ctx, tenant, id); err != nil || f.fault != "mark" {
		return err
	}
	return storefault.ErrConnReset
}

func (f *faultyCancel) DeliveryDecide(ctx context.Context, p store.DeliveryDecideParams) (bool, error) {
	if f.fault == "decide" {
		return false, storefault.ErrConnReset
	}
	return f.Store.DeliveryDecide(ctx, p)
}

// A claim that ends a cancelled notification's send commits and loses its
// answer (the connection dropped after the commit). The sender's retry of
// the claim finds the send ended, by what it cannot tell was itself: it
// makes no call and finishes the copy, and the send stays
// SUPPRESSED(CANCELLED). The end goes uncounted, as any write whose answer
// is lost.
func TestAClaimThatEndsACancelledSendAndLosesItsAnswerSendsNothing(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, b *bundle) {
		ids := b.create(t, 1)
		if err := b.st.NotificationCancelMark(context.Background(), tenant, ids[0]); err != nil {
			t.Fatal(err)
		}
		lossy := &lostClaim{Store: b.st}
		res := b.senderOver(lossy).Send(context.Background(), jobOf(b.view(t, ids[0])))
		if lossy.tries < 2 {
			t.Fatalf("the claim was tried %d times; want its answer lost, then a retry", lossy.tries)
		}
		if res.Verdict != sender.Done || res.State != heraldtype.DeliverySuppressed || res.Reason != cancel.ReasonCancelled {
			t.Errorf("the send = %+v; want done, SUPPRESSED(CANCELLED)", res)
		}
		wantCancelled(t, b, ids[0])
		if n := b.sim.Total(); n != 0 {
			t.Errorf("%d provider calls; want none", n)
		}
	})
}

// lostClaim is a store whose first DeliveryClaim commits and reports
// ErrConnReset.
type lostClaim struct {
	store.Store
	mu    sync.Mutex
	tries int
}

func (l *lostClaim) DeliveryClaim(ctx context.Context, p store.DeliveryClaimParams) (store.DeliveryClaimResult, error) {
	res, err := l.Store.DeliveryClaim(ctx, p)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tries++; l.tries == 1 && err == nil {
		return store.DeliveryClaimResult{}, storefault.ErrConnReset
	}
	return res, err
}

// jobOf is the job of v's webhook send as a broker message carries it: no
// outbox fence, nothing known.
func jobOf(v store.NotificationView) heraldtype.Job {
	return heraldtype.Job{MessageID: v.Deliveries[0].MessageID, NotificationID: v.ID, Tenant: tenant, Recipient: v.Recipient,
		EventID: v.EventID, Kind: v.Kind, Lane: v.Lane, Channel: heraldtype.ChannelWebhook, Params: json.RawMessage(`{"n":1}`)}
}

// afterRead is a store whose first NotificationGet runs then() after its
// read, before it returns: the cancel then decides on a view gone stale.
type afterRead struct {
	store.Store
	once sync.Once
	then func()
}

func (s *afterRead) NotificationGet(ctx context.Context, tenant, id string) (store.NotificationView, error) {
	v, err := s.Store.NotificationGet(ctx, tenant, id)
	s.once.Do(s.then)
	return v, err
}

// The other narrow gap: the cancel read the send as PENDING, and a sender
// claims it before the cancel's decision. The claim comes after the
// cancel's mark, so it does not send: it ends the send
// SUPPRESSED(CANCELLED) itself, the cancel's own write then finds it
// ended and takes nothing, and the cancel reports it cancelled. Its end
// is counted once, by the claim that made it.
func TestAClaimBetweenTheCancelsReadAndItsDecisionDoesNotSend(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, b *bundle) {
		ids := b.create(t, 1)
		var sent sender.Result
		job := jobOf(b.view(t, ids[0]))
		stale := &afterRead{Store: b.st, then: func() { sent = b.sender.Send(context.Background(), job) }}
		res, err := (&cancel.Canceller{Store: stale, Logger: b.logger, Metrics: b.metrics}).Cancel(context.Background(), tenant, ids[0])
		if err != nil {
			t.Fatalf("cancel: %v", err)
		}
		if sent.Verdict != sender.Done || sent.State != heraldtype.DeliverySuppressed || sent.Reason != cancel.ReasonCancelled {
			t.Errorf("the send in the gap ended %+v; want done, SUPPRESSED(CANCELLED)", sent)
		}
		if e := res.Deliveries[0]; !e.Cancelled {
			t.Errorf("the cancel answered %+v, want cancelled", e)
		}
		msg := store.MessageID(ids[0], heraldtype.ChannelWebhook)
		if d, err := b.st.DeliveryGet(context.Background(), msg); err != nil || d.State != heraldtype.DeliverySuppressed || d.Attempts != 0 || b.sim.CallCount(msg) != 0 {
			t.Errorf("delivery %+v (%v) after %d calls, want SUPPRESSED, no attempt, no call", d, err, b.sim.CallCount(msg))
		}
		got := metricstest.Deliveries(t, b.metrics)
		for _, st := range metrics.DeliveryStates {
			want := 0.0
			if st == heraldtype.DeliverySuppressed {
				want = 1
			}
			if k := "transactional/webhook/" + string(st); got[k] != want {
				t.Errorf("herald_deliveries_total{%s} = %v, want %v", k, got[k], want)
			}
		}
	})
}

// cancelFailingAfterMark cancels each of ids with a cancel that fails
// after its mark, deciding nothing.
func (b *bundle) cancelFailingAfterMark(t *testing.T, ids []string) {
	t.Helper()
	faulty := &cancel.Canceller{Store: &faultyCancel{Store: b.st, fault: "mark"}}
	for _, id := range ids {
		if _, err := faulty.Cancel(context.Background(), tenant, id); !errors.Is(err, storefault.ErrConnReset) {
			t.Fatalf("the failing cancel = %v; want the store's error", err)
		}
	}
}

// A cancel whose mark committed and whose answer was lost is never
// repeated: its mark alone keeps every send from going out. Each claim
// ends its send SUPPRESSED(CANCELLED), and the outbox rows end DONE.
func TestACancelThatFailedAfterItsMarkSendsNothingUnrepeated(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, b *bundle) {
		ids := b.create(t, 5)
		b.cancelFailingAfterMark(t, ids)
		b.drainCancelled(t, ids)
		// A broker's copy of one of them (rabbitmq transport) is acked
		// without a call.
		if res := b.sender.Send(context.Background(), jobOf(b.view(t, ids[0]))); res.Verdict != sender.Done || b.sim.Total() != 0 {
			t.Fatalf("a consumer's copy: %+v after %d calls, want done (ack), no call", res, b.sim.Total())
		}
	})
}

// parkingRule is a send policy rule that parks every send it sees, and
// counts them.
type parkingRule struct{ seen atomic.Int32 }

func (r *parkingRule) Check(context.Context, sender.Subject) sender.Ruling {
	r.seen.Add(1)
	return sender.ParkFor("TEXT_TOO_LONG")
}

// A send whose notification the claimer finds marked (a cancel failed
// after its mark) meets none of the send policy's rules: neither the
// dispatcher's layer (the claimer's gate: quiet hours' early stop would
// put it off until the window opens) nor the sender's (a rule that would
// park it, raising a PARKED alert a person must answer) sees it, and it
// ends SUPPRESSED(CANCELLED), counted once.
func TestTheClaimersMarkedSendMeetsNoRule(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, b *bundle) {
		ids := b.create(t, 4)
		b.cancelFailingAfterMark(t, ids)
		rule := &parkingRule{}
		b.sender.Checks = []sender.Check{rule}
		var gated atomic.Int32
		b.gate = func(ctx context.Context, job heraldtype.Job) (sender.Result, bool) {
			gated.Add(1)
			return b.sender.Apply(ctx, job, sender.DeferFor(time.Hour, "QUIET_HOURS")), true
		}
		b.drainCancelled(t, ids)
		if n, g := rule.seen.Load(), gated.Load(); n != 0 || g != 0 {
			t.Errorf("the sender's rule saw %d marked sends, the claimer's gate %d; want none", n, g)
		}
		got := metricstest.Deliveries(t, b.metrics)
		for _, st := range metrics.DeliveryStates {
			want := map[heraldtype.DeliveryState]float64{heraldtype.DeliverySuppressed: float64(len(ids))}[st]
			if k := "transactional/webhook/" + string(st); got[k] != want {
				t.Errorf("herald_deliveries_total{%s} = %v, want %v", k, got[k], want)
			}
		}
	})
}

// The narrowest gap: the cancel lands after the sender's peek found no
// delivery row, before its claim. The claim loses to the cancel's row.
func TestCancelBetweenPeekAndClaimWins(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, b *bundle) {
		ids := b.create(t, 3)
		var mu sync.Mutex
		answers := map[string]cancel.Entry{}
		b.hooks.AfterPeek = func(ctx context.Context, job heraldtype.Job) {
			e := b.cancelOf(t, job.NotificationID)
			mu.Lock()
			answers[job.NotificationID] = e
			mu.Unlock()
		}
		b.runClaimer(t)
		b.waitAllDone(t, ids)
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if e, ok := answers[id]; !ok || !e.Cancelled {
				t.Errorf("%s: the cancel in the gap answered %+v (ran: %v)", id, e, ok)
			}
			wantCancelled(t, b, id)
		}
	})
}

// A send that waits for its retry (RETRY_WAIT) is cancelled; when its
// retry falls due, the claimer's copy is finished without a second call.
func TestCancelledRetryIsNotRetried(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, b *bundle) {
		ids := b.create(t, 1)
		// Retry-After 2 s: the retry must not come before the cancel in the
		// hook below has run, and with the schedule's 50 ms a loaded machine
		// let another worker claim it first.
		b.sim.OnCall(func(ctx context.Context, m provider.Message) provider.Outcome {
			return provider.NotSentOutcome("HTTP_429", 2*time.Second)
		})
		// Right after the first attempt's RETRY_WAIT is written, before the
		// retry (2 s later) can come.
		cancelled := make(chan cancel.Entry, 1)
		b.hooks.AfterRecord = func(ctx context.Context, job heraldtype.Job, res sender.Result) {
			if res.State == heraldtype.DeliveryRetryWait {
				cancelled <- b.cancelOf(t, job.NotificationID)
			}
		}
		b.runClaimer(t)
		select {
		case e := <-cancelled:
			if !e.Cancelled {
				t.Fatalf("cancel of a waiting retry: %+v", e)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the first attempt was not recorded within 30 s")
		}
		b.wantOneCallThenCancelled(t, ids[0])
	})
}

// A send whose provider call is in flight at the cancel is reported as
// SENDING and left alone; when that call fails for now, its retry is not
// made: the retry's claim ends it SUPPRESSED(CANCELLED) without a second
// call.
func TestASendInFlightAtTheCancelIsNotTriedAgain(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, b *bundle) {
		ids := b.create(t, 1)
		answered := make(chan cancel.Entry, 1)
		b.sim.OnCall(func(ctx context.Context, m provider.Message) provider.Outcome {
			// The cancel comes while the call is at the provider.
			res, err := b.cancel.Cancel(context.Background(), tenant, ids[0])
			if err != nil {
				t.Errorf("cancel during the call: %v", err)
			} else {
				answered <- res.Deliveries[0]
			}
			return provider.NotSentOutcome("HTTP_429", 50*time.Millisecond)
		})
		b.runClaimer(t)
		select {
		case e := <-answered:
			if e.State != string(heraldtype.DeliverySending) || e.Cancelled {
				t.Fatalf("the cancel during the call answered %+v; want SENDING, not cancelled", e)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no provider call within 30 s")
		}
		b.wantOneCallThenCancelled(t, ids[0])
	})
}

// Cancels race the claimer over many messages: each message is either
// sent once (and the cancel reports it) or cancelled and never sent.
func TestCancelsRacingTheClaimerNeverBothWin(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, b *bundle) {
		ids := b.create(t, 40)
		answers := make([]cancel.Entry, len(ids))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				res, err := b.cancel.Cancel(context.Background(), tenant, id)
				if err != nil {
					t.Error(err)
					return
				}
				answers[i] = res.Deliveries[0]
			}()
		}
		b.runClaimer(t)
		close(start)
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the cancels did not return within 30 s")
		}
		b.waitAllDone(t, ids)
		sent, cancelled := 0, 0
		for i, id := range ids {
			calls := b.sim.CallCount(store.MessageID(id, heraldtype.ChannelWebhook))
			d := b.view(t, id).Deliveries[0].Delivery
			switch {
			case d.State == heraldtype.DeliverySuppressed && d.Reason == cancel.ReasonCancelled:
				cancelled++
				if calls != 0 || !answers[i].Cancelled {
					t.Errorf("%s: cancelled, yet %d calls; the cancel answered %+v", id, calls, answers[i])
				}
			case d.State == heraldtype.DeliveryProviderAccepted:
				sent++
				if calls != 1 || answers[i].Cancelled {
					t.Errorf("%s: sent with %d calls; the cancel answered %+v", id, calls, answers[i])
				}
			default:
				t.Errorf("%s: delivery %+v after %d calls", id, d, calls)
			}
		}
		t.Logf("%d sent, %d cancelled", sent, cancelled)
	})
}

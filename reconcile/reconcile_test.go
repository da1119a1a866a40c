package reconcile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testsqlite"
	"github.com/heraldhq/herald/reconcile"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/sqlite"
	"github.com/heraldhq/herald/watchdog"
)

const grace = 10 * time.Minute

type bundle struct {
	rec    *reconcile.Reconciler
	st     *sqlite.Store
	clk    *clock.Fake
	alerts *alert.Recorder
	ctx    context.Context
}

// setup returns a reconciler on a fresh SQLite store whose catalog has
// the kind "payment" on webhook and sms, and "payment.first", the same
// channels as a fallback chain (policy first); mutate adjusts its config.
func setup(t *testing.T, mutate func(c *reconcile.Config)) bundle {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	st, err := sqlite.Open(context.Background(), testsqlite.Path(t), sqlite.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	text := map[string]config.Template{"webhook": {Title: "t", Body: "b"}, "sms": {Title: "t", Body: "b"}}
	cat, err := catalog.New([]config.Kind{
		{Name: "payment", Category: "transactional", Channels: []string{"webhook", "sms"}, Templates: text},
		{Name: "payment.first", Category: "transactional", Channels: []string{"webhook", "sms"}, Policy: config.PolicyFirst, Templates: text},
	})
	if err != nil {
		t.Fatal(err)
	}
	b := bundle{st: st, clk: clk, alerts: &alert.Recorder{}, ctx: context.Background()}
	cfg := reconcile.Config{
		Store: st, Catalog: cat, Grace: grace, Duty: 1,
		Watchdog: watchdog.Config{RetryGrace: grace, PublishedGrace: grace, StaleClaimAfter: grace / 2, SweepGrace: grace / 2}, RunBy: "test", Clock: clk,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Alerts: b.alerts,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	b.rec = reconcile.New(cfg)
	return b
}

// accept creates a notification of kind on the given channels (none: a
// notification whose planned sends were lost) and returns its id.
func accept(t *testing.T, b bundle, kind string, chs ...heraldtype.Channel) string {
	t.Helper()
	id := ids.New("ntf", b.clk.Now())
	res, err := b.st.NotificationCreate(b.ctx, store.NotificationCreateParams{
		Tenant: "t1", ID: id, Recipient: "r1", EventID: "e-" + id, Kind: kind, Lane: heraldtype.LaneTransactional,
		Params: json.RawMessage(`{}`), Channels: chs,
	})
	if err != nil || res.Outcome != store.Created {
		t.Fatalf("NotificationCreate: %+v, %v", res, err)
	}
	return id
}

func run(t *testing.T, b bundle) reconcile.Report {
	t.Helper()
	rep, err := b.rec.Run(b.ctx)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return rep
}

// claimAll claims every due transactional row.
func claimAll(t *testing.T, b bundle) []store.Claimed {
	t.Helper()
	rows, err := b.st.OutboxClaim(b.ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w", Limit: 100, Lease: time.Minute})
	if err != nil {
		t.Fatalf("OutboxClaim: %v", err)
	}
	return rows
}

func alertsOf(b bundle, kind string) []alert.Alert {
	var out []alert.Alert
	for _, a := range b.alerts.Alerts() {
		if a.Kind == kind {
			out = append(out, a)
		}
	}
	return out
}

func TestAnEmptyStoreIsAccountedForAndTheReportIsKept(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	rep := run(t, b)
	if !rep.Accounted() || rep.Accepted != 0 || rep.PlannedSends != 0 || rep.RunBy != "test" || !rep.StartedAt.Equal(b.clk.Now()) {
		t.Fatalf("report of an empty store: %+v", rep)
	}
	for _, k := range reconcile.Kinds {
		if _, ok := rep.UnownedByKind[k]; !ok {
			t.Errorf("unowned_by_kind has no %s: every kind is listed, at 0", k)
		}
	}
	run, kept, ok, err := reconcile.Last(b.ctx, b.st)
	if err != nil || !ok {
		t.Fatalf("Last: %v, %v", ok, err)
	}
	body, _ := json.Marshal(rep)
	if string(run.Report) != string(body) || !kept.FinishedAt.Equal(rep.FinishedAt) {
		t.Fatalf("kept report %s, want %s", run.Report, body)
	}
}

func TestCountsAsTheReadAPIShowsAndListsUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	sent := accept(t, b, "payment", heraldtype.ChannelWebhook)
	accept(t, b, "payment", heraldtype.ChannelWebhook, heraldtype.ChannelSMS)
	for _, r := range claimAll(t, b) {
		if r.NotificationID != sent {
			continue
		}
		if res, err := b.st.DeliveryClaim(b.ctx, store.DeliveryClaimParams{MessageID: r.MessageID, NotificationID: sent, Tenant: "t1",
			Channel: r.Channel, Provider: "p", Owner: "w"}); err != nil || !res.Claimed {
			t.Fatalf("DeliveryClaim: %+v, %v", res, err)
		}
		if res, err := b.st.DeliveryRecord(b.ctx, store.DeliveryRecordParams{MessageID: r.MessageID, Attempt: 1,
			State: heraldtype.DeliveryUnknown, Reason: "TIMEOUT", Owner: "w", Class: "unknown", StartedAt: b.clk.Now(), Outbox: &r.Fence}); err != nil || !res.Recorded {
			t.Fatalf("DeliveryRecord: %+v, %v", res, err)
		}
	}
	rep := run(t, b)
	if rep.Accepted != 2 || rep.PlannedSends != 3 || rep.ByState["UNKNOWN"] != 1 || rep.ByState[heraldtype.ViewPending] != 2 {
		t.Fatalf("accepted %d, planned %d, by state %v; want 2, 3, UNKNOWN 1 and PENDING 2", rep.Accepted, rep.PlannedSends, rep.ByState)
	}
	if msg := store.MessageID(sent, heraldtype.ChannelWebhook); rep.Unknown != 1 || !slices.Equal(rep.UnknownSample, []string{msg}) {
		t.Fatalf("unknown %d %v, want %s", rep.Unknown, rep.UnknownSample, msg)
	}
	if !rep.Accounted() {
		t.Fatalf("an UNKNOWN delivery counted as unowned: %+v", rep)
	}
	if got := alertsOf(b, alert.UnknownUnsettled); len(got) != 1 || got[0].MessageID != store.MessageID(sent, heraldtype.ChannelWebhook) {
		t.Fatalf("UNKNOWN_UNSETTLED alerts %+v, want one per run naming the message", got)
	}
}

func TestRecreatesThePlannedSendsOfANotificationThatHasNone(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	id := accept(t, b, "payment")
	rep := run(t, b)
	if rep.Found[reconcile.KindMissingOutbox] != 1 || rep.RepairedByKind[reconcile.KindMissingOutbox] != 1 || rep.Repaired != 1 || !rep.Accounted() {
		t.Fatalf("report %+v: want the missing planned sends found and recreated", rep)
	}
	var got []string
	for _, r := range claimAll(t, b) {
		got = append(got, r.MessageID)
	}
	slices.Sort(got)
	if want := []string{store.MessageID(id, heraldtype.ChannelSMS), store.MessageID(id, heraldtype.ChannelWebhook)}; !slices.Equal(got, want) {
		t.Fatalf("claimable after the run: %v, want the kind's channels %v", got, want)
	}
	if again := run(t, b); again.Found[reconcile.KindMissingOutbox] != 0 || again.Repaired != 0 {
		t.Fatalf("a second run: %+v, want nothing left to repair", again)
	}
}

// A first kind's planned sends are recreated as its chain: the first
// channel claimable, the next WAITING for it.
func TestRecreatesAFirstKindsPlannedSendsAsItsChain(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	id := accept(t, b, "payment.first")
	if rep := run(t, b); rep.RepairedByKind[reconcile.KindMissingOutbox] != 1 || !rep.Accounted() {
		t.Fatalf("report %+v: want the missing planned sends recreated", rep)
	}
	rows := claimAll(t, b)
	if len(rows) != 1 || rows[0].MessageID != store.MessageID(id, heraldtype.ChannelWebhook) {
		t.Fatalf("claimable after the run: %+v, want the chain's first step alone", rows)
	}
	v, err := b.st.NotificationGet(b.ctx, "t1", id)
	if err != nil || len(v.Deliveries) != 2 {
		t.Fatalf("NotificationGet: %+v, %v", v, err)
	}
	if dv := v.Deliveries[1]; dv.OutboxState != heraldtype.OutboxWaiting || dv.Fallback == nil || dv.Fallback.Step != 2 {
		t.Fatalf("the SMS step: %s step %+v, want WAITING as step 2", dv.OutboxState, dv.Fallback)
	}
}

func TestANotificationOfAKindNoLongerConfiguredIsUnaccountedAndAlerted(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	id := accept(t, b, "retired")
	rep := run(t, b)
	if rep.Unowned != 1 || rep.UnownedByKind[reconcile.KindMissingOutbox] != 1 ||
		!slices.Equal(rep.UnownedSample[reconcile.KindMissingOutbox], []string{id}) || rep.Accounted() {
		t.Fatalf("report %+v: want %s unowned", rep, id)
	}
	got := alertsOf(b, alert.Unaccounted)
	if len(got) != 1 || got[0].MessageID != id || got[0].Tenant != "t1" || got[0].Reason != "missing_outbox:UNKNOWN_KIND" {
		t.Fatalf("alerts %+v, want one UNACCOUNTED for %s", got, id)
	}
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "missing_outbox 1: "+id) || !strings.Contains(text.String(), "1 unaccounted for") {
		t.Fatalf("text report:\n%s", text.String())
	}
}

func TestRedrivesAFinishedSendWithoutADelivery(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	id := accept(t, b, "payment", heraldtype.ChannelWebhook)
	for _, r := range claimAll(t, b) {
		if ok, err := b.st.OutboxComplete(b.ctx, r.Fence, heraldtype.OutboxDone, ""); err != nil || !ok {
			t.Fatalf("OutboxComplete: %v %v", ok, err)
		}
	}
	if rep := run(t, b); rep.Found[reconcile.KindNoDelivery] != 0 {
		t.Fatalf("within the grace: %+v", rep)
	}
	b.clk.Advance(grace + time.Millisecond)
	rep := run(t, b)
	if rep.Found[reconcile.KindNoDelivery] != 1 || rep.RepairedByKind[reconcile.KindNoDelivery] != 1 || !rep.Accounted() {
		t.Fatalf("report %+v: want the finished send without a delivery re-driven", rep)
	}
	if rows := claimAll(t, b); len(rows) != 1 || rows[0].MessageID != store.MessageID(id, heraldtype.ChannelWebhook) {
		t.Fatalf("claimable after the re-drive: %+v", rows)
	}
}

func TestRedrivesWhatTheWatchdogFindsThroughItsRedrive(t *testing.T) {
	t.Parallel()
	var redriven []store.Unowned
	b := setup(t, func(c *reconcile.Config) {
		c.Redrive = func(ctx context.Context, rows []store.Unowned) ([]store.Unowned, error) {
			redriven = append(redriven, rows...)
			return c.Store.UnownedRedrive(ctx, rows)
		}
	})
	id := accept(t, b, "payment", heraldtype.ChannelWebhook)
	msg := store.MessageID(id, heraldtype.ChannelWebhook)
	claimAll(t, b)
	if res, err := b.st.DeliveryClaim(b.ctx, store.DeliveryClaimParams{MessageID: msg, NotificationID: id, Tenant: "t1",
		Channel: heraldtype.ChannelWebhook, Provider: "p", Owner: "w"}); err != nil || !res.Claimed {
		t.Fatalf("DeliveryClaim: %+v, %v", res, err)
	}
	// Past the grace after the lease (a minute) too.
	b.clk.Advance(grace + 2*time.Minute)
	rep := run(t, b)
	if len(redriven) != 2 || rep.Found["sending"] != 1 || rep.RepairedByKind["sending"] != 1 ||
		rep.Found["lease"] != 1 || rep.RepairedByKind["lease"] != 1 || !rep.Accounted() {
		t.Fatalf("re-drove %+v; report %+v: want the stale claim and the lapsed lease re-driven", redriven, rep)
	}
	if d, err := b.st.DeliveryGet(b.ctx, msg); err != nil || d.State != heraldtype.DeliveryUnknown {
		t.Fatalf("the stale claim is %+v (%v), want UNKNOWN", d, err)
	}
}

func TestAFailedRedriveLeavesItsRowsUnaccounted(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *reconcile.Config) {
		c.Redrive = func(context.Context, []store.Unowned) ([]store.Unowned, error) {
			return nil, errors.New("store down")
		}
	})
	accept(t, b, "payment", heraldtype.ChannelWebhook)
	claimAll(t, b)
	b.clk.Advance(grace + 2*time.Minute)
	rep := run(t, b)
	if rep.UnownedByKind["lease"] != 1 || rep.Unowned != 1 || rep.Repaired != 0 {
		t.Fatalf("report %+v: want the lapsed lease unowned", rep)
	}
	if got := alertsOf(b, alert.Unaccounted); len(got) != 1 || got[0].Reason != "lease:REPAIR_FAILED" {
		t.Fatalf("alerts %+v", got)
	}
}

func TestRepairsUpToTheLimitPerRun(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *reconcile.Config) { c.RepairLimit = 2 })
	for range 3 {
		accept(t, b, "payment")
	}
	rep := run(t, b)
	if rep.Found[reconcile.KindMissingOutbox] != 3 || rep.Repaired != 2 || rep.Unowned != 1 {
		t.Fatalf("report %+v: want 2 of 3 repaired, 1 left for the next run", rep)
	}
	if next := run(t, b); next.Repaired != 1 || !next.Accounted() {
		t.Fatalf("the next run: %+v", next)
	}
}

func TestLoopRunsOnlyOnTheLeaderAndOncePerInterval(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var leader atomic.Bool
	checks := make(chan struct{}, 100)
	reconcile.OnCheck(b.rec, func() {
		select {
		case checks <- struct{}{}:
		default:
		}
	})
	runs := func() int64 {
		r, err := b.st.ReconcileRunLast(b.ctx)
		if errors.Is(err, store.ErrNotFound) {
			return 0
		}
		if err != nil {
			t.Fatalf("ReconcileRunLast: %v", err)
		}
		return r.ID
	}
	// drain waits for three checks after the call, so at least two ran
	// entirely after it.
	drain := func(what string) {
		for range len(checks) {
			<-checks
		}
		for range 3 {
			testenv.Recv(t, checks, what)
		}
	}
	testenv.Start(t, func(ctx context.Context) { b.rec.Loop(ctx, time.Hour, leader.Load) })
	drain("checks while not the leader")
	if n := runs(); n != 0 {
		t.Fatalf("ran %d times while not the leader", n)
	}
	leader.Store(true)
	testenv.WaitFor(t, "the leader's first run", testenv.Patience, func() bool { return runs() == 1 })
	drain("checks after the first run")
	if n := runs(); n != 1 {
		t.Fatalf("ran %d times within the interval", n)
	}
	b.clk.Advance(time.Hour)
	testenv.WaitFor(t, "a run once the interval passed", testenv.Patience, func() bool { return runs() == 2 })
}

func TestFiguresAreTheLastReportsOrZero(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	if f, err := reconcile.Figures(b.ctx, b.st); err != nil || f.Ran {
		t.Fatalf("figures before a run: %+v, %v", f, err)
	}
	accept(t, b, "retired")
	rep := run(t, b)
	f, err := reconcile.Figures(b.ctx, b.st)
	if err != nil || !f.Ran || !f.FinishedAt.Equal(rep.FinishedAt) || f.Unowned[reconcile.KindMissingOutbox] != 1 || f.Unknown != 0 {
		t.Fatalf("figures %+v (%v), want the report's %+v", f, err, rep)
	}
}

// A notification that takes over an event key whose owner's lease ran out
// with nothing sent is counted by the next run, and only by it.
func TestCountsTheEventKeysTakenOverSinceTheLastRun(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	take := func(owner string) store.EventKeyOutcome {
		t.Helper()
		res, err := b.st.EventKeyTake(b.ctx, store.EventKeyTakeParams{
			Key: store.EventKey{Tenant: "t1", Recipient: "r1", EventID: "e1", Kind: "payment"}, Owner: owner, Lease: time.Minute})
		if err != nil {
			t.Fatalf("EventKeyTake: %v", err)
		}
		return res.Outcome
	}
	if got := take("ntf-a"); got != store.EventKeyTaken {
		t.Fatalf("first take: %s", got)
	}
	if rep := run(t, b); rep.EventKeysTakenOver != 0 {
		t.Fatalf("before any takeover: %d taken over", rep.EventKeysTakenOver)
	}
	b.clk.Advance(2 * time.Minute) // ntf-a's lease ran out; it sent nothing
	if got := take("ntf-b"); got != store.EventKeyTakenOver {
		t.Fatalf("take after the lease: %s", got)
	}
	b.clk.Advance(time.Second)
	rep := run(t, b)
	if rep.EventKeysTakenOver != 1 || !rep.Accounted() {
		t.Fatalf("after a takeover: %d taken over (accounted %v), want 1", rep.EventKeysTakenOver, rep.Accounted())
	}
	var text strings.Builder
	if err := rep.WriteText(&text); err != nil || !strings.Contains(text.String(), "event keys   1 taken over since the last run") {
		t.Fatalf("text report: %v\n%s", err, text.String())
	}
	if _, kept, _, err := reconcile.Last(b.ctx, b.st); err != nil || kept.EventKeysTakenOver != 1 {
		t.Fatalf("kept report: %d taken over, %v", kept.EventKeysTakenOver, err)
	}
	b.clk.Advance(time.Second)
	if rep := run(t, b); rep.EventKeysTakenOver != 0 {
		t.Fatalf("the run after: %d taken over, want 0 (counted once)", rep.EventKeysTakenOver)
	}
}

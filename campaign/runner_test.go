package campaign_test

import (
	"bytes"
	"cmp"
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
	"github.com/heraldhq/herald/campaign"
	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testdb"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/limits"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/metrics/metricstest"
	"github.com/heraldhq/herald/store"
)

// failing fails every fan-out batch of the campaigns fails names (all of
// them while fails is nil) and passes the others to the store.
type failing struct {
	store.Campaigns
	mu    sync.Mutex
	fails func(id string) bool
}

// failFirst fails every batch of the first campaign it is asked to fan out.
func failFirst(c store.Campaigns) *failing {
	first := ""
	return &failing{Campaigns: c, fails: func(id string) bool {
		if first == "" {
			first = id
		}
		return id == first
	}}
}

// set replaces what fails (nil: every campaign).
func (f *failing) set(fails func(id string) bool) { f.mu.Lock(); f.fails = fails; f.mu.Unlock() }

func (f *failing) CampaignFanOut(ctx context.Context, p store.CampaignFanOutParams) (store.CampaignFanOutResult, error) {
	f.mu.Lock()
	fail := f.fails == nil || f.fails(p.ID)
	f.mu.Unlock()
	if fail {
		return store.CampaignFanOutResult{}, errors.New("injected failure")
	}
	return f.Campaigns.CampaignFanOut(ctx, p)
}

// TestRoundGoesOnPastAFailingCampaign: a campaign whose batches keep
// failing does not hold back the RUNNING campaigns after it (DESIGN §3:
// each still has an owner that moves it on): one round fans them out and
// reports the failure.
func TestRoundGoesOnPastAFailingCampaign(t *testing.T) {
	t.Parallel()
	onEachDriver(t, func(t *testing.T, db *testdb.DB, svc *campaign.Service) {
		ctx := context.Background()
		var cids []string
		for k := range 2 {
			cids = append(cids, startCoupons(t, svc, "t1", fmt.Sprintf("key-%d", k), 2))
		}
		f := failFirst(db.Store.(store.Campaigns))
		r := campaign.NewRunner(campaign.RunnerConfig{Store: f, Batch: 1})
		if _, err := r.Round(ctx); err == nil {
			t.Fatal("Round: no error; want the failing campaign's")
		}
		for _, id := range cids {
			c, err := svc.Get(ctx, "t1", id)
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]string{true: store.CampaignRunning, false: store.CampaignDone}[f.fails(id)]; c.State != want {
				t.Fatalf("campaign %s (failing: %v) is %s; want %s", id, f.fails(id), c.State, want)
			}
		}
	})
}

// TestFanOutIsPacedToTheLaneQuota: a tenant with a send quota in the
// campaign's lane gets its campaign fanned out at the quota's rate, round
// by round as the bucket refills, never refused and never past its
// recipients; another tenant's campaign in the same round goes whole.
func TestFanOutIsPacedToTheLaneQuota(t *testing.T) {
	t.Parallel()
	onEachDriver(t, func(t *testing.T, db *testdb.DB, svc *campaign.Service) {
		ctx := context.Background()
		start := func(tenant string, n int) string { return startCoupons(t, svc, tenant, "key-"+tenant, n) }
		paced, free := start("t1", 25), start("t2", 25)
		clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		quotas := limits.New(limits.Config{Clock: clk,
			Quotas: []limits.Quota{{Tenant: "t1", Lane: heraldtype.LaneMarketing, Rate: 10, Burst: 10}}})
		r := campaign.NewRunner(campaign.RunnerConfig{Store: db.Store.(store.Campaigns), Batch: 100, Quotas: quotas})
		enqueued := func(tenant, id string) (int64, string) {
			t.Helper()
			c, err := svc.Get(ctx, tenant, id)
			if err != nil {
				t.Fatal(err)
			}
			return c.Enqueued, c.State
		}
		for i, step := range []struct {
			advance time.Duration
			round   int
			want    int64
			state   string
		}{
			{0, 10 + 25, 10, store.CampaignRunning}, // t1's burst; t2 whole
			{0, 0, 10, store.CampaignRunning},       // empty bucket: nothing, and no error
			{500 * time.Millisecond, 5, 15, store.CampaignRunning},
			{2 * time.Second, 10, 25, store.CampaignRunning}, // the rest, not the whole burst again
			// Its last batch was full, so the store knows it is done only
			// at the next one, which needs a token (100 ms at 10/s).
			{100 * time.Millisecond, 0, 25, store.CampaignDone},
		} {
			clk.Advance(step.advance)
			n, err := r.Round(ctx)
			if err != nil || n != step.round {
				t.Fatalf("round %d: fanned out %d, %v; want %d", i, n, err, step.round)
			}
			if got, state := enqueued("t1", paced); got != step.want || state != step.state {
				t.Fatalf("round %d: t1's campaign %s with %d enqueued; want %s with %d", i, state, got, step.state, step.want)
			}
		}
		if got, state := enqueued("t2", free); got != 25 || state != store.CampaignDone {
			t.Fatalf("t2's campaign %s with %d enqueued; want DONE with 25", state, got)
		}
		wantOnePerRecipient(t, db, paced, 25)
	})
}

// slowBatches moves the clock on by each fan-out batch's time, as real
// batches take real time while a quota's bucket refills.
type slowBatches struct {
	store.Campaigns
	clk  *clock.Fake
	took time.Duration
}

func (s slowBatches) CampaignFanOut(ctx context.Context, p store.CampaignFanOutParams) (store.CampaignFanOutResult, error) {
	res, err := s.Campaigns.CampaignFanOut(ctx, p)
	s.clk.Advance(s.took)
	return res, err
}

// TestAPacedCampaignDoesNotHoldTheRound: a campaign paced by its quota
// takes one grant a round, not the trickle its bucket refills while its
// batches run (5 tokens a 50 ms batch at 100/s): that loop held the
// leader's round, and every campaign after it, until the paced campaign
// was done, in batches of a few recipients.
func TestAPacedCampaignDoesNotHoldTheRound(t *testing.T) {
	t.Parallel()
	onEachDriver(t, func(t *testing.T, db *testdb.DB, svc *campaign.Service) {
		ctx := context.Background()
		paced, other := startCoupons(t, svc, "t1", "key-t1", 400), startCoupons(t, svc, "t2", "key-t2", 25)
		clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		quotas := limits.New(limits.Config{Clock: clk,
			Quotas: []limits.Quota{{Tenant: "t1", Lane: heraldtype.LaneMarketing, Rate: 100, Burst: 10}}})
		st := slowBatches{Campaigns: db.Store.(store.Campaigns), clk: clk, took: 50 * time.Millisecond}
		r := campaign.NewRunner(campaign.RunnerConfig{Store: st, Batch: 100, Quotas: quotas})
		if n, err := r.Round(ctx); err != nil || n != 10+25 {
			t.Fatalf("round: fanned out %d, %v; want t1's burst of 10 and t2's 25", n, err)
		}
		for tenant, id := range map[string]string{"t1": paced, "t2": other} {
			c, err := svc.Get(ctx, tenant, id)
			if err != nil {
				t.Fatal(err)
			}
			if want := map[string]int64{"t1": 10, "t2": 25}[tenant]; c.Enqueued != want {
				t.Fatalf("%s's campaign: %d enqueued after one round; want %d", tenant, c.Enqueued, want)
			}
		}
	})
}

// TestFanOutIsChargedOnlyForTheRecipientsItFannedOut: the fan-out takes a
// round's tokens from the tenant's lane quota before its batches, but
// keeps only those of the recipients it fanned out. A 3-recipient
// campaign under a burst of 10 leaves 7 for the tenant's single sends
// (it used to spend all 10, and the tenant's next POST /v1/notifications
// in the lane was refused 429); side by side, the batches' sizes
// (limit/count) and a shorter last batch are charged as fanned out; a
// batch that fails wrote nothing and is charged nothing.
func TestFanOutIsChargedOnlyForTheRecipientsItFannedOut(t *testing.T) {
	t.Parallel()
	onEachDriver(t, func(t *testing.T, db *testdb.DB, svc *campaign.Service) {
		ctx := context.Background()
		start := func(tenant string, n int) store.CampaignRef {
			return store.CampaignRef{Tenant: tenant, ID: startCoupons(t, svc, tenant, "key-"+tenant, n), Lane: heraldtype.LaneMarketing}
		}
		// Every tenant has a bucket of its own: 10 a second, burst 10, and
		// the clock does not move, so nothing refills.
		clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		quotas := limits.New(limits.Config{Clock: clk,
			Quotas: []limits.Quota{{Lane: heraldtype.LaneMarketing, Rate: 10, Burst: 10}}})
		// singleSends counts the tenant's single sends (intake's) that pass
		// before one is refused.
		singleSends := func(tenant string) int {
			for n := range 100 {
				if _, wait := quotas.LaneSend(tenant, heraldtype.LaneMarketing); wait > 0 {
					return n
				}
			}
			return 100
		}
		st := db.Store.(store.Campaigns)
		for _, tc := range []struct {
			name       string
			recipients int
			cfg        campaign.RunnerConfig
			fail       bool
			fanned     int
			left       int
		}{
			{"AShortLastBatch", 3, campaign.RunnerConfig{Batch: 100}, false, 3, 7},
			// Granted 10 of 8×4: two ranged batches of 5, the second of 2.
			{"SideBySide", 7, campaign.RunnerConfig{Batch: 4, Parallel: 2}, false, 7, 3},
			{"AFailedBatch", 3, campaign.RunnerConfig{Batch: 100}, true, 0, 10},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ref := start(tc.name, tc.recipients)
				tc.cfg.Store, tc.cfg.Quotas = st, quotas
				if tc.fail {
					tc.cfg.Store = &failing{Campaigns: st, fails: func(id string) bool { return id == ref.ID }}
				}
				n, err := campaign.NewRunner(tc.cfg).FanOut(ctx, ref)
				if n != tc.fanned || (err != nil) != tc.fail {
					t.Fatalf("fanned out %d, %v; want %d (failing: %v)", n, err, tc.fanned, tc.fail)
				}
				if got := singleSends(ref.Tenant); got != tc.left {
					t.Fatalf("%d recipients fanned out of a burst of 10: then %d single sends passed; want %d", n, got, tc.left)
				}
			})
		}
	})
}

// holdFirst holds a side-by-side round's first batch (the one at the
// cursor, which begins at seq 0) until the batch after it has ended, so
// that one waits for its turn past RunnerConfig.TurnTimeout.
type holdFirst struct {
	store.Campaigns
	secondEnded chan struct{}
	once        sync.Once
}

func (h *holdFirst) CampaignFanOut(ctx context.Context, p store.CampaignFanOutParams) (store.CampaignFanOutResult, error) {
	if p.Range == nil {
		return h.Campaigns.CampaignFanOut(ctx, p)
	}
	if p.Range.After == 0 {
		select {
		case <-h.secondEnded:
		case <-time.After(testenv.Patience): // only to unwind a failing test
		}
		return h.Campaigns.CampaignFanOut(ctx, p)
	}
	defer h.once.Do(func() { close(h.secondEnded) })
	return h.Campaigns.CampaignFanOut(ctx, p)
}

// TestABatchGivesUpWaitingForItsTurn: a side-by-side batch waits for the
// batch before it at most TurnTimeout (DESIGN §3: nothing waits without a
// deadline; on PostgreSQL it waits with its rows written in an open
// transaction, which the database cannot see). Past it the batch writes
// nothing (store.ErrCampaignBusy); the runner counts only the batch before
// it, logs the give-up as a retry, not a failure, and the next round
// finishes the campaign from the cursor, one notification per recipient.
func TestABatchGivesUpWaitingForItsTurn(t *testing.T) {
	t.Parallel()
	onEachDriver(t, func(t *testing.T, db *testdb.DB, svc *campaign.Service) {
		const n, size = 20, 10
		ctx := context.Background()
		id := newRunning(t, svc, n)
		st := db.Store.(store.Campaigns)
		var logs bytes.Buffer
		r := campaign.NewRunner(campaign.RunnerConfig{Store: &holdFirst{Campaigns: st, secondEnded: make(chan struct{})},
			Batch: size, Parallel: 2, TurnTimeout: 50 * time.Millisecond, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
		ref := store.CampaignRef{Tenant: "t1", ID: id, Lane: heraldtype.LaneMarketing}
		if got, err := r.FanOut(ctx, ref); got != size || err != nil {
			t.Fatalf("fanned out %d, %v; want the first batch's %d, no error", got, err, size)
		}
		var rec struct {
			Msg, Tenant, Campaign, Error string
			Recipients                   int
		}
		if err := json.Unmarshal(logs.Bytes(), &rec); err != nil {
			t.Fatalf("log %q: %v", logs.String(), err)
		}
		if rec.Msg != "campaign: fan-out batch gave up waiting, the next round starts at the cursor" || rec.Tenant != "t1" ||
			rec.Campaign != id || rec.Recipients != size || !strings.Contains(rec.Error, "turn timeout") {
			t.Fatalf("log = %+v; want the give-up, with tenant, campaign, recipients %d and the error", rec, size)
		}
		if c, err := svc.Get(ctx, "t1", id); err != nil || c.Enqueued != size || c.State != store.CampaignRunning {
			t.Fatalf("campaign = %+v, %v; want RUNNING, enqueued %d", c, err, size)
		}
		next := campaign.NewRunner(campaign.RunnerConfig{Store: st, Batch: size, Parallel: 2})
		if got, err := next.Round(ctx); got != n-size || err != nil {
			t.Fatalf("next round: %d, %v; want the other %d", got, err, n-size)
		}
		wantFannedOut(t, db, svc, id, n)
	})
}

// TestABatchWaitingForItsTurnLetsTheNextBegin: side by side, a batch that
// has written its rows and waits for the batch before it to commit gives
// its place to the next batch, up to twice Parallel batches begun. With
// the first of a round held in its commit, batches 2–4 begin, write and
// wait for their turn, and no fifth begins; let go, all commit in order:
// one notification per recipient, the campaign DONE.
func TestABatchWaitingForItsTurnLetsTheNextBegin(t *testing.T) {
	t.Parallel()
	onEachDriver(t, func(t *testing.T, db *testdb.DB, svc *campaign.Service) {
		const n, size = 800, 100
		ctx := context.Background()
		id, st, all := runningInBatches(t, db, svc, n, size)
		var mu sync.Mutex
		waiting := map[int]bool{}
		release := make(chan struct{})
		let := sync.OnceFunc(func() { close(release) })
		defer let() // a failure below still lets the fan-out end
		h := &hooked{Campaigns: st, ranked: map[int64]int{},
			beforeCommit: func(batch int) error {
				if batch == 1 {
					<-release
				}
				return nil
			},
			onTurn: func(batch int) { mu.Lock(); waiting[batch] = true; mu.Unlock() }}
		done := fanOutRanked(ctx, h, all, id, size, n)
		testenv.WaitFor(t, "batches 2, 3 and 4 to wait for their turn behind batch 1", testenv.Patience, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return waiting[2] && waiting[3] && waiting[4]
		})
		// The fifth would begin at once were the bound missing; give it
		// the time a batch of 100 takes many times over.
		time.Sleep(200 * time.Millisecond)
		if begun := h.batches.Load(); begun != 4 {
			t.Errorf("%d batches begun while the first is held; want 4 (twice Parallel)", begun)
		}
		let()
		if err := testenv.Recv(t, done, "the fan-out"); err != nil {
			t.Fatal(err)
		}
		wantFannedOut(t, db, svc, id, n)
	})
}

// check returns an error saying format unless ok.
func check(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf(format, args...)
}

// fanOutRanked numbers h's batches by all (the campaign's batches read up
// front) and fans campaign id of tenant t1 out in the background, two
// batches of size side by side; done receives an error unless all n were
// fanned out.
func fanOutRanked(ctx context.Context, h *hooked, all []store.CampaignRange, id string, size, n int) (done <-chan error) {
	for i, r := range all {
		h.ranked[r.After] = i + 1
	}
	r := campaign.NewRunner(campaign.RunnerConfig{Store: h, Batch: size, Parallel: 2})
	ch := make(chan error, 1)
	go func() {
		got, err := r.FanOut(ctx, store.CampaignRef{Tenant: "t1", ID: id, Lane: heraldtype.LaneMarketing})
		ch <- errors.Join(err, check(got == n, "fanned out %d, want %d", got, n))
	}()
	return ch
}

// TestAStalledCampaignIsAlertedOnce: a campaign whose fan-out fails at
// every attempt is retried each round and, once it has failed for
// StallAfter, alerted CAMPAIGN_STALLED with its id, once for the stretch;
// a batch that commits ends the stretch, and a later one is alerted anew
// (DESIGN §3: RUNNING has an owner, and a person hears when the owner
// cannot move it on).
func TestAStalledCampaignIsAlertedOnce(t *testing.T) {
	t.Parallel()
	onEachDriver(t, func(t *testing.T, db *testdb.DB, svc *campaign.Service) {
		ctx := context.Background()
		id := startCoupons(t, svc, "t1", "key-stall", 3)
		st := &failing{Campaigns: db.Store.(store.Campaigns)}
		now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		alerts := &alert.Recorder{}
		var leading atomic.Bool
		leading.Store(true)
		r := campaign.NewRunner(campaign.RunnerConfig{Store: st, Batch: 1, StallAfter: time.Minute, Alerts: alerts,
			Now: func() time.Time { return now }, Logger: slog.New(slog.DiscardHandler), IsLeader: leading.Load})
		seen := 0
		failingIDs := map[string]bool{id: true}
		round := func(at time.Duration, wantAlerts int) {
			t.Helper()
			now = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).Add(at)
			_, _ = r.Round(ctx)
			got := alerts.Alerts()
			if len(got) != wantAlerts {
				t.Fatalf("after the round at +%s: %d alerts %+v; want %d", at, len(got), got, wantAlerts)
			}
			if len(got) == seen {
				return
			}
			for _, a := range got[seen:] {
				if a.Kind != alert.CampaignStalled || a.Tenant != "t1" || !failingIDs[strings.TrimSuffix(a.Reason, ":FAILING")] {
					t.Fatalf("alert %+v; want CAMPAIGN_STALLED of t1 with reason <a failing campaign's id>:FAILING (%v)", a, failingIDs)
				}
			}
			seen = len(got)
		}
		round(0, 0)
		round(30*time.Second, 0)
		round(61*time.Second, 1)
		round(5*time.Minute, 1) // the same stretch: no second alert
		st.set(func(string) bool { return false })
		n, err := r.FanOut(ctx, store.CampaignRef{Tenant: "t1", ID: id, Lane: heraldtype.LaneMarketing})
		if err != nil || n != 3 {
			t.Fatalf("FanOut once healed = %d, %v; want all 3", n, err)
		}
		// A new stretch, of another campaign's: alerted on its own.
		delete(failingIDs, id)
		id = startCoupons(t, svc, "t1", "key-stall-2", 3)
		failingIDs[id] = true
		st.set(nil)
		round(6*time.Minute, 1)
		round(8*time.Minute, 2)
		// Another process leads for an hour: when this one leads again,
		// its stretches (both campaigns still fail) start then, not at the
		// failures before, and each is alerted a minute on.
		failingIDs[startCoupons(t, svc, "t1", "key-stall-3", 3)] = true
		round(9*time.Minute, 2)
		leading.Store(false)
		round(10*time.Minute, 2)
		leading.Store(true)
		round(70*time.Minute, 2)
		round(72*time.Minute, 4)
	})
}

// TestARoundReachesEveryRunningCampaign: a round reads the RUNNING
// campaigns a page at a time and fans out every one, however many there
// are; the campaigns past the first page (a hundred, by default) are not
// left for a round that never reaches them.
func TestARoundReachesEveryRunningCampaign(t *testing.T) {
	t.Parallel()
	onEachDriver(t, func(t *testing.T, db *testdb.DB, svc *campaign.Service) {
		ctx := context.Background()
		var ids []string
		for k := range 5 {
			ids = append(ids, startCoupons(t, svc, "t1", fmt.Sprintf("key-%d", k), 2))
		}
		r := campaign.NewRunner(campaign.RunnerConfig{Store: db.Store.(store.Campaigns), Page: 2, Logger: slog.New(slog.DiscardHandler)})
		if n, err := r.Round(ctx); err != nil || n != 10 {
			t.Fatalf("Round = %d, %v; want all 10 recipients of the 5 campaigns", n, err)
		}
		for _, id := range ids {
			if c, err := svc.Get(ctx, "t1", id); err != nil || c.State != store.CampaignDone {
				t.Fatalf("campaign %s after the round: %+v, %v; want DONE", id, c, err)
			}
		}
	})
}

// TestTheNextWindowIsReadWhileAWindowWrites: side by side, the bounds of
// a round's next window of batches are read after the last batch of the
// window being written, while it writes, not at the cursor once it has
// committed (the read is tens of milliseconds on PostgreSQL, with no batch
// writing). With the first batch held in its commit, the read after the
// first window's end is made; let go, every window after the first is
// written on bounds read ahead: one read at the cursor in all, one
// notification per recipient, the campaign DONE.
func TestTheNextWindowIsReadWhileAWindowWrites(t *testing.T) {
	t.Parallel()
	onEachDriver(t, func(t *testing.T, db *testdb.DB, svc *campaign.Service) {
		const n, size = 2000, 100 // windows of 8 batches (Parallel 2): 800, 800, 400
		ctx := context.Background()
		id, st, all := runningInBatches(t, db, svc, n, size)
		release := make(chan struct{})
		let := sync.OnceFunc(func() { close(release) })
		defer let() // a failure below still lets the fan-out end
		var mu sync.Mutex
		var reads []string
		h := &hooked{Campaigns: st, ranked: map[int64]int{},
			beforeCommit: func(batch int) error {
				if batch == 1 {
					<-release
				}
				return nil
			},
			onBatches: func(after *int64) {
				mu.Lock()
				defer mu.Unlock()
				if after == nil {
					reads = append(reads, "cursor")
					return
				}
				i := slices.IndexFunc(all, func(r store.CampaignRange) bool { return r.Upto == *after })
				reads = append(reads, fmt.Sprintf("after batch %d", i+1))
			}}
		done := fanOutRanked(ctx, h, all, id, size, n)
		testenv.WaitFor(t, "the second window's bounds read while the first batch is held", testenv.Patience, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return slices.Contains(reads, "after batch 8")
		})
		let()
		if err := testenv.Recv(t, done, "the fan-out"); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		if want := []string{"cursor", "after batch 8", "after batch 16", "after batch 20"}; !slices.Equal(reads, want) {
			t.Errorf("bounds read %v; want %v", reads, want)
		}
		mu.Unlock()
		wantFannedOut(t, db, svc, id, n)
	})
}

// TestTwoRunnersReadingAheadFanOutEachRecipientOnce: two runners fan out
// one campaign at once (a change of leader overlaps them), side by side
// with batches of different sizes, each reading its next window's bounds
// while it writes: bounds one read ahead of a cursor the other moved are
// refused at their turn (store.ErrCampaignBehind) and read again at the
// cursor, so every recipient still gets one notification and the campaign
// ends DONE.
func TestTwoRunnersReadingAheadFanOutEachRecipientOnce(t *testing.T) {
	t.Parallel()
	onEachDriver(t, func(t *testing.T, db *testdb.DB, svc *campaign.Service) {
		const n = 3000
		ctx := context.Background()
		id := newRunning(t, svc, n)
		st := db.Store.(store.Campaigns)
		quiet := slog.New(slog.DiscardHandler)
		var wg sync.WaitGroup
		for _, size := range []int{100, 70} {
			r := campaign.NewRunner(campaign.RunnerConfig{Store: st, Batch: size, Parallel: 2, TurnTimeout: 2 * time.Second, Logger: quiet})
			wg.Go(func() {
				deadline := time.Now().Add(testenv.Patience)
				for time.Now().Before(deadline) {
					_, _ = r.Round(ctx) // a batch refused or given up is the next round's
					if c, err := svc.Get(ctx, "t1", id); err == nil && c.State == store.CampaignDone {
						return
					}
				}
			})
		}
		wg.Wait()
		wantFannedOut(t, db, svc, id, n)
	})
}

// TestARoundExpiresDraftsPastTheirDeadline: a campaign nobody starts does
// not wait for ever (DESIGN §3): the round after its deadline (its creation
// + the service's DraftTTL, by the store's clock) ends it CANCELLED with
// reason DRAFT_EXPIRED, logs it by tenant and id (never a recipient) and
// counts it; the round before leaves it DRAFT, and RUNNING campaigns are
// fanned out as ever. An expired draft is not started.
func TestARoundExpiresDraftsPastTheirDeadline(t *testing.T) {
	t.Parallel()
	for _, driver := range testdb.Drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := clock.NewFake(time.Date(2030, 3, 14, 9, 0, 0, 0, time.UTC))
			db := testdb.Open(t, driver, clk)
			cat, err := catalog.New(config.Dev().Kinds)
			if err != nil {
				t.Fatal(err)
			}
			svc := &campaign.Service{Store: db.Store.(store.Campaigns), Catalog: cat, Clock: clk, DraftTTL: 48 * time.Hour}
			draft, _, err := svc.Create(ctx, "t1", "key-draft", "h1", campaign.Request{Kind: "coupon.expiring",
				Params: []byte(`{"coupon":"C","date":"d"}`), Recipients: []campaign.Recipient{{Recipient: "u-draft-1"}}})
			if err != nil {
				t.Fatal(err)
			}
			running := startCoupons(t, svc, "t1", "key-running", 2)
			var logs bytes.Buffer
			m := metrics.New(nil)
			r := campaign.NewRunner(campaign.RunnerConfig{Store: db.Store.(store.Campaigns), Metrics: m,
				Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
			state := func(id string) store.Campaign {
				t.Helper()
				c, err := svc.Get(ctx, "t1", id)
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
			if c := state(draft); c.DraftExpiresAt == nil || !c.DraftExpiresAt.Equal(clk.Now().Add(48*time.Hour)) {
				t.Fatalf("the draft's deadline = %v; want its creation + 48h", c.DraftExpiresAt)
			}

			clk.Advance(47 * time.Hour)
			if n, err := r.Round(ctx); err != nil || n != 2 {
				t.Fatalf("Round = %d, %v; want the running campaign's 2 recipients", n, err)
			}
			if c := state(draft); c.State != store.CampaignDraft {
				t.Fatalf("the draft before its deadline = %s; want DRAFT", c.State)
			}
			if c := state(running); c.State != store.CampaignDone {
				t.Fatalf("the running campaign = %s; want DONE", c.State)
			}

			clk.Advance(time.Hour)
			if _, err := r.Round(ctx); err != nil {
				t.Fatal(err)
			}
			if c := state(draft); c.State != store.CampaignCancelled || c.Reason != store.CampaignDraftExpired || c.Enqueued != 0 {
				t.Fatalf("the draft at its deadline = %+v; want CANCELLED, DRAFT_EXPIRED, nothing enqueued", c)
			}
			if got := counterValue(t, m, "herald_campaign_drafts_expired_total"); got != 1 {
				t.Fatalf("herald_campaign_drafts_expired_total = %v; want 1", got)
			}
			if !strings.Contains(logs.String(), `"campaign":"`+draft+`"`) || !strings.Contains(logs.String(), `"tenant":"t1"`) ||
				strings.Contains(logs.String(), "u-draft-1") {
				t.Fatalf("the log %s; want the draft's tenant and id, no recipient", logs.String())
			}
			if _, err := svc.Start(ctx, "t1", draft); !errors.Is(err, campaign.ErrState) {
				t.Fatalf("starting an expired draft: %v; want ErrState", err)
			}
			if n, err := r.ExpireDrafts(ctx); err != nil || n != 0 {
				t.Fatalf("ExpireDrafts again = %d, %v; want nothing left to expire", n, err)
			}
		})
	}
}

// counterValue reads the unlabelled counter name from m's registry.
func counterValue(t *testing.T, m *metrics.Metrics, name string) float64 {
	t.Helper()
	return metricstest.Series(t, m, name)[""]
}

// cutIn moves the cursor of the campaign it fans out by a batch of its
// own (another writer's: an overlapping old leader) just before the
// ranged batch that begins at at, once.
type cutIn struct {
	store.Campaigns
	at    int64
	limit int // the other writer's batch (50 when 0)
	once  sync.Once
	err   error
}

func (c *cutIn) CampaignFanOut(ctx context.Context, p store.CampaignFanOutParams) (store.CampaignFanOutResult, error) {
	if p.Range != nil && p.Range.After == c.at {
		c.once.Do(func() {
			_, c.err = c.Campaigns.CampaignFanOut(ctx, store.CampaignFanOutParams{Tenant: p.Tenant, ID: p.ID, Limit: cmp.Or(c.limit, 50)})
		})
	}
	return c.Campaigns.CampaignFanOut(ctx, p)
}

// TestBoundsReadAheadOfACursorMovedMeanwhileAreReadAgain: when another
// writer moves the cursor between two windows, the next window's bounds,
// read ahead, begin behind it; its first batch is refused
// (store.ErrCampaignBehind, nothing written), and the runner reads the
// bounds again at the cursor and goes on in the same call, with no failure
// reported (an error would count towards CAMPAIGN_STALLED). When the other
// writer took exactly that first batch, the next batch, begun beside it,
// stands at the cursor and commits: its recipients are counted (the quota
// charged for them, the total right), where the sum once stopped at the
// refused batch.
func TestBoundsReadAheadOfACursorMovedMeanwhileAreReadAgain(t *testing.T) {
	t.Parallel()
	const n, size = 2000, 100 // windows of 8 batches (Parallel 2)
	for _, cut := range []int{50, size} {
		t.Run(fmt.Sprint("the other writer takes ", cut), func(t *testing.T) {
			t.Parallel()
			onEachDriver(t, func(t *testing.T, db *testdb.DB, svc *campaign.Service) {
				ctx := context.Background()
				id, st, all := runningInBatches(t, db, svc, n, size)
				c := &cutIn{Campaigns: st, at: all[8].After, limit: cut} // the second window's first batch
				r := campaign.NewRunner(campaign.RunnerConfig{Store: c, Batch: size, Parallel: 2, Logger: slog.New(slog.DiscardHandler)})
				got, err := r.FanOut(ctx, store.CampaignRef{Tenant: "t1", ID: id, Lane: heraldtype.LaneMarketing})
				if c.err != nil {
					t.Fatalf("the other writer's batch: %v", c.err)
				}
				if err != nil || got != n-cut {
					t.Fatalf("FanOut = %d, %v; want the %d recipients the other writer left, no error", got, err, n-cut)
				}
				wantFannedOut(t, db, svc, id, n)
			})
		})
	}
}

// runningInBatches starts newRunning's campaign of n recipients and reads
// the bounds of all its batches of size (n a multiple of size) up front.
func runningInBatches(t *testing.T, db *testdb.DB, svc *campaign.Service, n, size int) (string, store.Campaigns, []store.CampaignRange) {
	t.Helper()
	id := newRunning(t, svc, n)
	st := db.Store.(store.Campaigns)
	all, err := st.CampaignBatches(context.Background(), "t1", id, nil, size, n/size)
	if err != nil || len(all) != n/size {
		t.Fatalf("CampaignBatches = %v, %v", all, err)
	}
	return id, st, all
}

// A campaign's params are held to a notification's 64 KiB, and so is each
// recipient's merged over them; and a page whose merged params would come
// to more than MaxPageParams is refused whole, where a request of a few
// hundred kilobytes once made a copy of the campaign's params per
// recipient without bound.
func TestCampaignParamsAreBounded(t *testing.T) {
	t.Parallel()
	onEachDriver(t, func(t *testing.T, db *testdb.DB, svc *campaign.Service) {
		ctx := context.Background()
		refused := func(err error, param string) {
			t.Helper()
			var ferr *catalog.FieldError
			if !errors.As(err, &ferr) || ferr.Param != param {
				t.Fatalf("%v; want a refusal of %s", err, param)
			}
		}
		pad := func(n int) string { return `"` + strings.Repeat("x", n) + `"` }
		_, _, err := svc.Create(ctx, "t1", "k-big", "h", campaign.Request{Kind: "coupon.expiring",
			Params: []byte(`{"coupon":"C","date":"d","pad":` + pad(catalog.MaxParamsBytes) + `}`)})
		refused(err, "params")
		_, _, err = svc.Create(ctx, "t1", "k-merged", "h", campaign.Request{Kind: "coupon.expiring",
			Params:     []byte(`{"coupon":"C","date":"d","pad":` + pad(40<<10) + `}`),
			Recipients: []campaign.Recipient{{Recipient: "u1"}, {Recipient: "u2", Params: []byte(`{"more":` + pad(40<<10) + `}`)}}})
		refused(err, "recipients[1].params")
		// 4 KiB of campaign params and 10,000 recipients with one param
		// of their own: 40 MiB merged from a body of under 300 KB.
		page := make([]campaign.Recipient, campaign.MaxPage)
		for i := range page {
			page[i] = campaign.Recipient{Recipient: fmt.Sprint("u", i), Params: []byte(`{"coupon":"C` + fmt.Sprint(i) + `"}`)}
		}
		id, _, err := svc.Create(ctx, "t1", "k-page", "h", campaign.Request{Kind: "coupon.expiring",
			Params: []byte(`{"coupon":"C","date":"d","pad":` + pad(4<<10) + `}`)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = svc.AddRecipients(ctx, "t1", id, page)
		refused(err, "recipients")
		// A recipient twice in a page: with the same params it is one
		// notification; with others the page is refused, naming the repeat.
		twice := []campaign.Recipient{{Recipient: "v1", Params: []byte(`{"coupon":"A"}`)}, {Recipient: "v2"},
			{Recipient: "v1", Params: []byte(`{"coupon": "A"}`)}}
		if n, err := svc.AddRecipients(ctx, "t1", id, twice); err != nil || n != 2 {
			t.Fatalf("a recipient twice with the same params: added %d, %v; want 2", n, err)
		}
		// Own params equal to the campaign's are the campaign's: the same.
		same := []campaign.Recipient{{Recipient: "v3"}, {Recipient: "v3", Params: []byte(`{}`)},
			{Recipient: "v3", Params: []byte(`{"coupon":"C","date":"d","pad":` + pad(4<<10) + `}`)}}
		if n, err := svc.AddRecipients(ctx, "t1", id, same); err != nil || n != 1 {
			t.Fatalf("a recipient with no params, {} and the campaign's own: added %d, %v; want 1", n, err)
		}
		twice[2].Params = []byte(`{"coupon":"B"}`)
		_, err = svc.AddRecipients(ctx, "t1", id, twice)
		refused(err, "recipients[2]")
		if _, err := svc.AddRecipients(ctx, "t1", id, page[:1000]); err != nil {
			t.Fatalf("a page of 1,000: %v", err)
		}
	})
}

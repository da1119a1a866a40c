package campaign_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/heraldhq/herald/campaign"
	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testdb"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/postgres"
	"github.com/heraldhq/herald/store/sqlite"
)

const childEnv = "HERALD_CAMPAIGN_CRASH_CHILD"

// crashBatch is the batch size of the crash test.
const crashBatch = 300

// setup opens a store of driver and a service over it with the dev
// catalog.
func setup(t *testing.T, driver string) (*testdb.DB, *campaign.Service) {
	t.Helper()
	db := testdb.Open(t, driver, nil)
	cat, err := catalog.New(config.Dev().Kinds)
	if err != nil {
		t.Fatal(err)
	}
	return db, &campaign.Service{Store: db.Store.(store.Campaigns), Catalog: cat, Clock: clock.Real{}}
}

// onEachDriver runs test on a fresh store of each driver, in parallel.
func onEachDriver(t *testing.T, test func(t *testing.T, db *testdb.DB, svc *campaign.Service)) {
	t.Helper()
	for _, driver := range testdb.Drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			db, svc := setup(t, driver)
			test(t, db, svc)
		})
	}
}

// wantOnePerRecipient fails the test unless each of n recipients of
// campaign id has exactly one notification.
func wantOnePerRecipient(t *testing.T, db *testdb.DB, id string, n int) {
	t.Helper()
	if dup := db.Count(t, "SELECT count(*) FROM (SELECT recipient FROM notifications WHERE campaign_id = '"+id+
		"' GROUP BY recipient HAVING count(*) <> 1) x"); dup != 0 {
		t.Fatalf("%d recipients have other than one notification", dup)
	}
	if got := db.Count(t, "SELECT count(DISTINCT recipient) FROM notifications WHERE campaign_id = '"+id+"'"); got != n {
		t.Fatalf("%d recipients have a notification; want %d", got, n)
	}
}

// wantFannedOut fails the test unless campaign id of tenant t1 is DONE,
// n enqueued, each of its n recipients with one notification.
func wantFannedOut(t *testing.T, db *testdb.DB, svc *campaign.Service, id string, n int) {
	t.Helper()
	wantOnePerRecipient(t, db, id, n)
	if c, err := svc.Get(context.Background(), "t1", id); err != nil || c.Enqueued != int64(n) || c.State != store.CampaignDone {
		t.Fatalf("campaign = %+v, %v; want DONE, enqueued %d", c, err, n)
	}
}

// newRunning creates and starts a campaign of coupon.expiring (push and
// email) to n recipients u0…, in pages of campaign.MaxPage, each sent twice.
func newRunning(t *testing.T, svc *campaign.Service, n int) string {
	t.Helper()
	return startCoupons(t, svc, "t1", "key-1", n)
}

// startCoupons creates and starts tenant's campaign of coupon.expiring to
// n recipients u0…, under idempotency key key, in pages of
// campaign.MaxPage, each sent twice.
func startCoupons(t *testing.T, svc *campaign.Service, tenant, key string, n int) string {
	t.Helper()
	ctx := context.Background()
	id, _, err := svc.Create(ctx, tenant, key, "h1", campaign.Request{Kind: "coupon.expiring", Params: []byte(`{"coupon":"C","date":"d"}`)})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	for from := 0; from < n; from += campaign.MaxPage {
		page := make([]campaign.Recipient, min(campaign.MaxPage, n-from))
		for i := range page {
			page[i].Recipient = fmt.Sprintf("u%d", from+i)
		}
		// Twice: the second proposes other notification ids, which the
		// store drops with the repeated recipients.
		for range 2 {
			if _, err := svc.AddRecipients(ctx, tenant, id, page); err != nil {
				t.Fatalf("AddRecipients: %v", err)
			}
		}
	}
	if _, err := svc.Start(ctx, tenant, id); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return id
}

// hooked passes every call to the store but sets a fan-out batch's
// BeforeCommit: the crash seam.
type hooked struct {
	store.Campaigns
	batches      atomic.Int64
	beforeCommit func(batch int) error
	// onTurn, when set, is told when a batch begins waiting for its turn
	// (store.CampaignFanOutParams.Turn).
	onTurn func(batch int)
	// ranked, when set, numbers a ranged batch by where it begins (the
	// campaign's batches read up front) instead of by the order of the
	// calls, which side by side is the goroutines'.
	ranked map[int64]int
	// onBatches, when set, is told of each read of batch bounds: where it
	// reads after (nil: the cursor).
	onBatches func(after *int64)
}

func (h *hooked) CampaignBatches(ctx context.Context, tenant, id string, after *int64, size, count int) ([]store.CampaignRange, error) {
	if h.onBatches != nil {
		h.onBatches(after)
	}
	return h.Campaigns.CampaignBatches(ctx, tenant, id, after, size, count)
}

// rank reads campaign id's batches of size recipients up front and numbers
// them for ranked.
func (h *hooked) rank(t *testing.T, id string, size int) {
	t.Helper()
	all, err := h.CampaignBatches(context.Background(), "t1", id, nil, size, 1000000)
	if err != nil {
		t.Fatal(err)
	}
	h.ranked = map[int64]int{}
	for i, r := range all {
		h.ranked[r.After] = i + 1
	}
}

func (h *hooked) CampaignFanOut(ctx context.Context, p store.CampaignFanOutParams) (store.CampaignFanOutResult, error) {
	n := int(h.batches.Add(1))
	if p.Range != nil && h.ranked != nil {
		n = h.ranked[p.Range.After]
	}
	p.BeforeCommit = func() error { return h.beforeCommit(n) }
	if turn := p.Turn; turn != nil && h.onTurn != nil {
		p.Turn = func(ctx context.Context) error { h.onTurn(n); return turn(ctx) }
	}
	return h.Campaigns.CampaignFanOut(ctx, p)
}

// TestFanOutSurvivesAKill kills a process in the middle of a fan-out
// batch (inside its transaction, after its writes, before its commit) and
// resumes the fan-out in another: every recipient has exactly one
// notification, with one outbox row per channel, and the counters agree.
// Side by side (Parallel 2) the kill comes in a batch holding the
// campaign's lock, while up to three after it have written their rows or
// are writing them and wait for their turn: they leave nothing either.
// Kills at batches 3, 4 and 6 of the round's window of seven: the ones
// before have committed.
func TestFanOutSurvivesAKill(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ parallel, killAt, committed int }{{1, 3, 2}, {2, 3, 2}, {2, 4, 3}, {2, 6, 5}} {
		t.Run(fmt.Sprintf("parallel=%d,kill=%d", tc.parallel, tc.killAt), func(t *testing.T) {
			t.Parallel()
			fanOutSurvivesAKill(t, tc.parallel, tc.killAt, tc.committed)
		})
	}
}

func fanOutSurvivesAKill(t *testing.T, parallel, killAt, committed int) {
	onEachDriver(t, func(t *testing.T, db *testdb.DB, svc *campaign.Service) {
		const n = 2000
		id := newRunning(t, svc, n)

		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.v")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%s|%d|%d", childEnv, db.Database, id, parallel, killAt))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe() // held open until the kill
		if err != nil {
			t.Fatal(err)
		}
		defer stdin.Close()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		inBatch := false
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "IN BATCH") {
				inBatch = true
				break
			}
		}
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		if !inBatch {
			t.Fatalf("the child never reached batch %d", killAt)
		}

		done := committed * crashBatch
		got := db.Count(t, "SELECT count(*) FROM notifications WHERE campaign_id = '"+id+"'")
		if got != done && strings.HasPrefix(db.Database, "sqlite:") && parallel > 1 && got == done-crashBatch {
			// SQLite's single writer commits the operations waiting
			// together in one transaction (group commit): the batch before
			// the killed one may have shared its transaction, and gone
			// with it.
			done = got
		}
		if got != done {
			t.Fatalf("after the kill: %d notifications; want the %d of the committed batches", got, done)
		}
		c, err := svc.Get(context.Background(), "t1", id)
		if err != nil || c.Enqueued != int64(done) || c.State != store.CampaignRunning {
			t.Fatalf("after the kill: %+v, %v; want RUNNING, enqueued %d", c, err, done)
		}

		r := campaign.NewRunner(campaign.RunnerConfig{Store: db.Store.(store.Campaigns), Batch: crashBatch, Parallel: parallel})
		if got, err := r.Round(context.Background()); err != nil || got != n-done {
			t.Fatalf("resumed round = %d, %v; want the %d left", got, err, n-done)
		}
		wantOnePerRecipient(t, db, id, n)
		if got := db.Count(t, "SELECT count(*) FROM outbox o JOIN notifications n ON n.id = o.notification_id WHERE n.campaign_id = '"+id+"'"); got != 2*n {
			t.Fatalf("%d outbox rows; want %d (push and email each)", got, 2*n)
		}
		c, err = svc.Get(context.Background(), "t1", id)
		if err != nil || c.Enqueued != n || c.Total != n || c.State != store.CampaignDone {
			t.Fatalf("after resuming: %+v, %v; want DONE, %d of %d", c, err, n, n)
		}
	})
}

// TestCrashChild is TestFanOutSurvivesAKill's child: it fans the campaign
// out and, inside batch killAt's transaction, says so and waits to be
// killed.
func TestCrashChild(t *testing.T) {
	v := os.Getenv(childEnv)
	if v == "" {
		t.Skip("run by TestFanOutSurvivesAKill")
	}
	parts := strings.Split(v, "|")
	if len(parts) != 4 {
		t.Fatalf("%s=%q: want database|campaign|parallel|kill", childEnv, v)
	}
	database, id := parts[0], parts[1]
	parallel, _ := strconv.Atoi(parts[2])
	killAt, _ := strconv.Atoi(parts[3])
	ctx := context.Background()
	var st store.Campaigns
	if path, ok := strings.CutPrefix(database, "sqlite:"); ok {
		s, err := sqlite.Open(ctx, path, sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		st = s
	} else {
		s, err := postgres.Open(ctx, database, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		st = s
	}
	h := &hooked{Campaigns: st, beforeCommit: func(batch int) error {
		if batch == killAt {
			fmt.Println("IN BATCH", batch)
			_, _ = io.Copy(io.Discard, os.Stdin) // killed here, inside the transaction: the parent never closes stdin
		}
		return nil
	}}
	if parallel > 1 {
		h.rank(t, id, crashBatch)
	}
	r := campaign.NewRunner(campaign.RunnerConfig{Store: h, Batch: crashBatch, Parallel: parallel})
	_, err := r.FanOut(ctx, store.CampaignRef{Tenant: "t1", ID: id, Lane: heraldtype.LaneMarketing})
	t.Fatalf("the child was not killed: %v", err)
}

// TestFailedBatchesResume fails a batch's commit through the seam, again
// and again, and resumes: exactly one notification per recipient. One
// batch after the other, every other call fails; side by side, each even
// batch fails the first time it is written, with the batches after it in
// the window waiting for their turn.
func TestFailedBatchesResume(t *testing.T) {
	t.Parallel()
	for _, parallel := range []int{1, 2} {
		t.Run(fmt.Sprint("parallel=", parallel), func(t *testing.T) {
			t.Parallel()
			failedBatchesResume(t, parallel)
		})
	}
}

func failedBatchesResume(t *testing.T, parallel int) {
	onEachDriver(t, func(t *testing.T, db *testdb.DB, svc *campaign.Service) {
		const n, size = 1000, 150
		id := newRunning(t, svc, n)
		st := db.Store.(store.Campaigns)
		var mu sync.Mutex
		tries := map[int]int{}
		h := &hooked{Campaigns: st, beforeCommit: func(batch int) error {
			mu.Lock()
			defer mu.Unlock()
			tries[batch]++
			if batch%2 == 0 && (parallel == 1 || tries[batch] == 1) {
				return fmt.Errorf("batch %d: injected failure", batch)
			}
			return nil
		}}
		if parallel > 1 {
			h.rank(t, id, size)
		}
		r := campaign.NewRunner(campaign.RunnerConfig{Store: h, Batch: size, Parallel: parallel})
		for range 20 { // each round gets one batch or more further
			if _, err := r.Round(context.Background()); err == nil {
				break
			}
		}
		wantFannedOut(t, db, svc, id, n)
	})
}

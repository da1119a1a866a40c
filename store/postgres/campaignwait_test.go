package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/store"
)

// twoBatchCampaign opens a store on a fresh schema with campaign id of
// tenant t started, its 20 recipients r0..r19 in two ranged batches of 10.
func twoBatchCampaign(t *testing.T, id string) (*Store, []store.CampaignRange) {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, testpg.Schema(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	rs := make([]store.CampaignRecipient, 20)
	for i := range rs {
		rs[i] = store.CampaignRecipient{Recipient: fmt.Sprint("r", i), NotificationID: fmt.Sprintf("ntf_%s_%d", id, i)}
	}
	if _, err := s.CampaignCreate(ctx, store.CampaignCreateParams{ID: id, Tenant: "t", IdempotencyKey: id, RequestHash: "h",
		Kind: "k", Lane: heraldtype.LaneMarketing, Channels: []heraldtype.Channel{heraldtype.ChannelWebhook}, Params: []byte(`{}`),
		Recipients: rs}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CampaignStart(ctx, "t", id); err != nil {
		t.Fatal(err)
	}
	ranges, err := s.CampaignBatches(ctx, "t", id, nil, 10, 2)
	if err != nil || len(ranges) != 2 {
		t.Fatalf("CampaignBatches = %v, %v; want two", ranges, err)
	}
	return s, ranges
}

// A ranged batch written beside the one before it waits, at its cursor
// move, for that one to end, and then reads the cursor it left: moved to
// its start (the batch commits), or not (it writes nothing). The
// conformance suite runs the two side by side too, but cannot make the
// second wait; here the first holds its commit until the second waits on
// the campaign row's lock. An UPDATE that checked the cursor in its WHERE
// did not wait: it skipped the row as it was before the first's commit,
// and every second batch of a round was refused.
func TestARangedBatchWaitsForTheBatchBeforeIt(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{true, false} {
		t.Run(fmt.Sprint("commit=", commit), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, ranges := twoBatchCampaign(t, "cmp_w")
			var err error
			batch := func(r store.CampaignRange, hook func() error) (store.CampaignFanOutResult, error) {
				return s.CampaignFanOut(ctx, store.CampaignFanOutParams{Tenant: "t", ID: "cmp_w", Limit: 10, Range: &r, BeforeCommit: hook})
			}
			crash := errors.New("crash")
			type result struct {
				res store.CampaignFanOutResult
				err error
			}
			second := make(chan result, 1)
			_, err = batch(ranges[0], func() error {
				go func() { res, err := batch(ranges[1], nil); second <- result{res, err} }()
				testenv.WaitFor(t, "the second batch to wait for the first's lock", testenv.Patience, func() bool {
					var n int
					err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND query LIKE 'SELECT state, fanout_seq%FROM campaigns%FOR UPDATE'`).Scan(&n)
					return err == nil && n > 0
				})
				if !commit {
					return crash
				}
				return nil
			})
			got := <-second
			c, gerr := s.CampaignGet(ctx, "t", "cmp_w")
			if gerr != nil {
				t.Fatal(gerr)
			}
			if commit {
				if err != nil || got.err != nil || got.res.Recipients != 10 || !got.res.Done || c.Enqueued != 20 || c.State != store.CampaignDone {
					t.Fatalf("first %v, second %+v %v, campaign %+v; want both written, DONE with 20", err, got.res, got.err, c)
				}
				return
			}
			if !errors.Is(err, crash) || !errors.Is(got.err, store.ErrCampaignBehind) || c.Enqueued != 0 || c.State != store.CampaignRunning {
				t.Fatalf("first %v, second %+v %v, campaign %+v; want the crash, the second refused, nothing enqueued", err, got.res, got.err, c)
			}
		})
	}
}

// TestOverlappingRunnersUnwindThroughTheLockTimeout: two runners on one
// campaign (a leader that lost its lock without knowing, and the new one;
// campaign/doc.go) whose batches were cut at other bounds (their quotas
// granted other amounts). Runner B's second batch writes its rows before
// it takes the campaign's lock and then waits, in Go (Turn), for B's first
// batch; A's first batch holds the campaign's lock and blocks on B's
// uncommitted notification ids; B's first batch waits for the campaign's
// lock. PostgreSQL sees no cycle. Without fanOutLockTimeout nothing ever
// ended and the campaign's lock was held until a restart (a cancel hung
// too); with it, A's batch gives up (store.ErrCampaignBusy, nothing
// written), and B's batches commit in turn. A's next round starts at the
// cursor and finishes the campaign, one notification per recipient.
func TestOverlappingRunnersUnwindThroughTheLockTimeout(t *testing.T) {
	t.Parallel()
	url := testpg.Schema(t)
	appA, appB := uniqueName("runa"), uniqueName("runb")
	a := setup(t, appURL(url, appA), Options{})
	b := setup(t, appURL(url, appB), Options{})
	ctx := context.Background()
	id := ids.New("cmp", time.Now())
	rs := make([]store.CampaignRecipient, 20)
	nids := ids.Ordered("ntf", time.Now(), len(rs))
	for i := range rs {
		rs[i] = store.CampaignRecipient{Recipient: fmt.Sprintf("r%02d", i), NotificationID: nids[i]}
	}
	if _, err := a.CampaignCreate(ctx, store.CampaignCreateParams{ID: id, Tenant: "t1", IdempotencyKey: id, RequestHash: "h", Kind: "k",
		Lane: heraldtype.LaneMarketing, Channels: []heraldtype.Channel{heraldtype.ChannelWebhook}, Recipients: rs}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CampaignStart(ctx, "t1", id); err != nil {
		t.Fatal(err)
	}
	ra, err := a.CampaignBatches(ctx, "t1", id, nil, 10, 2) // runner A: batches of 10
	if err != nil || len(ra) != 2 {
		t.Fatalf("A's ranges %v, %v", ra, err)
	}
	rb, err := b.CampaignBatches(ctx, "t1", id, nil, 7, 3) // runner B: batches of 7
	if err != nil || len(rb) != 3 {
		t.Fatalf("B's ranges %v, %v", rb, err)
	}
	type result struct {
		res store.CampaignFanOutResult
		err error
	}
	// bound is how long any of the batches may take: A's lock timeout, and
	// as much again for a loaded machine. Only to unwind a failing test.
	bound := 2*fanOutLockTimeout + 10*time.Second
	recv := func(c <-chan result, what string) result {
		t.Helper()
		select {
		case r := <-c:
			return r
		case <-time.After(bound):
			t.Fatalf("%s did not end within %s: a wait PostgreSQL cannot see is unbounded", what, bound)
			return result{}
		}
	}
	run := func(s *Store, p store.CampaignFanOutParams) <-chan result {
		c := make(chan result, 1)
		go func() { res, err := s.CampaignFanOut(ctx, p); c <- result{res, err} }()
		return c
	}

	b1Ended := make(chan struct{})
	b2AtTurn := make(chan struct{})
	// B's second batch, with the runner's Turn: wait for B's first batch.
	b2 := run(b, store.CampaignFanOutParams{Tenant: "t1", ID: id, Limit: 7, Range: &rb[1],
		Turn: func(ctx context.Context) error {
			close(b2AtTurn)
			select {
			case <-b1Ended:
				return nil
			case <-time.After(2 * bound): // past recv's bound: a failing test says what hung
				return errors.New("gave up waiting for B's first batch")
			}
		}})
	<-b2AtTurn
	// A's first batch: the cursor stands at its start, so it locks the
	// campaign at once, then blocks on B's second batch's rows.
	a1 := run(a, store.CampaignFanOutParams{Tenant: "t1", ID: id, Limit: 10, Range: &ra[0]})
	waitBlocked(t, a, appA)
	// B's first batch waits for the campaign's lock.
	b1 := run(b, store.CampaignFanOutParams{Tenant: "t1", ID: id, Limit: 7, Range: &rb[0]})
	waitBlocked(t, b, appB)

	if got := recv(a1, "A's first batch"); !errors.Is(got.err, store.ErrCampaignBusy) || got.res.Recipients != 0 {
		t.Fatalf("A's first batch = %+v, %v; want ErrCampaignBusy, nothing written", got.res, got.err)
	}
	gotB1 := recv(b1, "B's first batch")
	close(b1Ended)
	gotB2 := recv(b2, "B's second batch")
	// B's first waited for the lock a little less long than A's: it gets
	// it when A's batch gives up. On a machine slow enough that its own
	// timeout came first, it and so the second gave up too, writing
	// nothing; the next round would start at the cursor either way.
	if gotB1.err == nil {
		if gotB1.res.Recipients != 7 || gotB2.err != nil || gotB2.res.Recipients != 7 {
			t.Fatalf("B's batches = %+v, %+v, %v; want 7 and 7 written", gotB1.res, gotB2.res, gotB2.err)
		}
	} else if !errors.Is(gotB1.err, store.ErrCampaignBusy) || !errors.Is(gotB2.err, store.ErrCampaignBehind) {
		t.Fatalf("B's batches = %v, %v; want both written, or busy then behind", gotB1.err, gotB2.err)
	}
	// A's next round: one batch after the cursor finishes the campaign.
	if res, err := a.CampaignFanOut(ctx, store.CampaignFanOutParams{Tenant: "t1", ID: id, Limit: 20}); err != nil || !res.Done {
		t.Fatalf("A's next round = %+v, %v; want the rest, DONE", res, err)
	}
	c, err := a.CampaignGet(ctx, "t1", id)
	if err != nil || c.State != store.CampaignDone || c.Enqueued != 20 {
		t.Fatalf("campaign = %+v, %v; want DONE with 20 enqueued", c, err)
	}
	var n, distinct int
	if err := a.pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT recipient) FROM notifications WHERE campaign_id = $1`, id).
		Scan(&n, &distinct); err != nil || n != 20 || distinct != 20 {
		t.Fatalf("%d notifications for %d recipients (%v); want one for each of 20", n, distinct, err)
	}
}

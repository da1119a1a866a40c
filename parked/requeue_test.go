package parked_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/parked"
	"github.com/heraldhq/herald/store"
)

// reparking is a store whose requeued messages park again at once, as they
// do when their cause is not fixed: the sender parks each one again. It
// gives up after 50 requeue statements, so a requeue that would not end
// fails instead of hanging.
type reparking struct {
	store.Store
	t     *testing.T
	calls int
}

var errEndless = errors.New("the requeue did not end")

func (r *reparking) ParkedRequeue(ctx context.Context, p store.ParkedRequeueParams) ([]store.ParkedEntry, error) {
	if r.calls++; r.calls > 50 {
		return nil, errEndless
	}
	rows, err := r.Store.ParkedRequeue(ctx, p)
	if err != nil || len(rows) == 0 {
		return rows, err
	}
	// The claimer offers each requeued row again, the sender parks its
	// message again, and the claimer finishes the row: DONE and PARKED, as
	// before the requeue.
	claimed, err := r.Store.OutboxClaim(ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w", Limit: len(rows), Lease: time.Minute})
	if err != nil || len(claimed) != len(rows) {
		r.t.Fatalf("claim the requeued rows: %d of %d (%v)", len(claimed), len(rows), err)
	}
	for i, e := range rows {
		if ok, err := r.Store.ParkedRestore(ctx, store.ParkedRestoreParams{MessageID: e.MessageID, Reason: e.Reason}); err != nil || !ok {
			r.t.Fatalf("park %s again: %v (%v)", e.MessageID, ok, err)
		}
		if ok, err := r.Store.OutboxComplete(ctx, claimed[i].Fence, heraldtype.OutboxDone, e.Reason); err != nil || !ok {
			r.t.Fatalf("finish %s: %v (%v)", claimed[i].MessageID, ok, err)
		}
	}
	return rows, nil
}

// TestRequeueAllEndsWhenMessagesParkAgain (issue 13): requeueing every
// parked message takes each message parked before it began once, page by
// page, and ends even when every requeued message parks again at once.
func TestRequeueAllEndsWhenMessagesParkAgain(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, c *counting) {
		for i := range 5 {
			c.park(t, "a", fmt.Sprintf("ntf_%d", i), heraldtype.LaneTransactional, heraldtype.ChannelWebhook)
		}
		c.clk.Advance(time.Second) // the requeue begins after they parked
		st := &reparking{Store: c.st, t: t}
		done, err := parked.DB{Store: st, PageSize: 2}.Requeue(c.ctx, parked.Tenant("a"), "")
		if n := done.Total(); err != nil || n != 5 || done["a"] != 5 {
			t.Fatalf("requeued %v (%v) in %d statements, want each of the 5 once", done, err, st.calls)
		}
		if st.calls != 3 {
			t.Fatalf("%d requeue statements, want 3 pages of 2", st.calls)
		}
		// They are all parked again, for the next requeue.
		if l, err := c.st.ParkedList(c.ctx, store.ParkedListParams{Tenant: "a"}); err != nil || len(l) != 5 {
			t.Fatalf("parked after the requeue: %d (%v), want 5", len(l), err)
		}
	})
}

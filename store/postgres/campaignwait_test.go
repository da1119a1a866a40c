package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/store"
)

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
			s, err := Open(ctx, testpg.Schema(t), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			rs := make([]store.CampaignRecipient, 20)
			for i := range rs {
				rs[i] = store.CampaignRecipient{Recipient: fmt.Sprint("r", i), NotificationID: fmt.Sprint("ntf_w", i)}
			}
			if _, err := s.CampaignCreate(ctx, store.CampaignCreateParams{ID: "cmp_w", Tenant: "t", IdempotencyKey: "k", RequestHash: "h",
				Kind: "k", Lane: heraldtype.LaneMarketing, Channels: []heraldtype.Channel{heraldtype.ChannelWebhook}, Params: []byte(`{}`),
				Recipients: rs}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.CampaignStart(ctx, "t", "cmp_w"); err != nil {
				t.Fatal(err)
			}
			ranges, err := s.CampaignBatches(ctx, "t", "cmp_w", 10, 2)
			if err != nil || len(ranges) != 2 {
				t.Fatalf("CampaignBatches = %v, %v; want two", ranges, err)
			}
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
WHERE wait_event_type = 'Lock' AND query LIKE 'SELECT state, fanout_seq FROM campaigns%FOR UPDATE'`).Scan(&n)
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

package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/heraldhq/herald/store"
)

// A ranged batch reads its recipients before it takes the campaign's
// lock (fanOutRange). A recipient erased between the two was deleted from
// campaign_recipients after the batch read it: the batch finds the
// campaign's total changed once it has the lock and writes nothing
// (store.ErrCampaignBusy), and the next round writes the batch without
// the erased recipient. Without the check the batch committed a
// notification for the person just erased, and enqueued passed total.
func TestARangedBatchWritesNothingForARecipientErasedMeanwhile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, ranges := twoBatchCampaign(t, "cmp_e")
	var err error
	// The second batch has written its rows (r15's among them) when its
	// turn comes: r15 is erased then, and the first batch written, before
	// the second takes the lock.
	_, err = s.CampaignFanOut(ctx, store.CampaignFanOutParams{Tenant: "t", ID: "cmp_e", Limit: 10, Range: &ranges[1],
		Turn: func(ctx context.Context) error {
			if _, err := s.RecipientErase(ctx, store.RecipientEraseParams{Tenant: "t", Recipient: "r15", Limit: 100}); err != nil {
				return fmt.Errorf("erase: %w", err)
			}
			if _, err := s.CampaignFanOut(ctx, store.CampaignFanOutParams{Tenant: "t", ID: "cmp_e", Limit: 10, Range: &ranges[0]}); err != nil {
				return fmt.Errorf("first batch: %w", err)
			}
			return nil
		}})
	if !errors.Is(err, store.ErrCampaignBusy) {
		t.Fatalf("the second batch = %v; want ErrCampaignBusy (a recipient erased meanwhile)", err)
	}
	if res, err := s.CampaignFanOut(ctx, store.CampaignFanOutParams{Tenant: "t", ID: "cmp_e", Limit: 20}); err != nil || !res.Done || res.Recipients != 9 {
		t.Fatalf("the next round = %+v, %v; want the 9 left, DONE", res, err)
	}
	c, err := s.CampaignGet(ctx, "t", "cmp_e")
	if err != nil || c.State != store.CampaignDone || c.Total != 19 || c.Enqueued != 19 {
		t.Fatalf("campaign = %+v, %v; want DONE, 19 of 19 enqueued", c, err)
	}
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM notifications WHERE tenant = 't' AND recipient = 'r15'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("notifications for the erased r15: %d, %v; want none", n, err)
	}
}

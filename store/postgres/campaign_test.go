package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/store"
)

// TestCampaignCancelWaitsForTheBatchInFlight holds a fan-out batch open
// after its writes and cancels the campaign from another process: the
// cancel waits for the batch (the campaign row's lock), then sees its
// notifications as enqueued and stops their sends; nothing of the campaign
// is fanned out after it.
func TestCampaignCancelWaitsForTheBatchInFlight(t *testing.T) {
	t.Parallel()
	url := testpg.Schema(t)
	a := setup(t, url, Options{})
	app := uniqueName("cancel")
	b := setup(t, appURL(url, app), Options{})
	ctx := context.Background()
	id := ids.New("cmp", time.Now())
	rs := make([]store.CampaignRecipient, 25)
	for i := range rs {
		rs[i] = store.CampaignRecipient{Recipient: fmt.Sprintf("r%d", i), NotificationID: fmt.Sprintf("ntf_%s_%d", id, i)}
	}
	if _, err := a.CampaignCreate(ctx, store.CampaignCreateParams{ID: id, Tenant: "t1", IdempotencyKey: id, RequestHash: "h", Kind: "k",
		Lane: heraldtype.LaneMarketing, Channels: []heraldtype.Channel{heraldtype.ChannelWebhook}, Recipients: rs}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CampaignStart(ctx, "t1", id); err != nil {
		t.Fatal(err)
	}

	inBatch, release := make(chan struct{}), make(chan struct{})
	batch := async(func() (store.CampaignFanOutResult, error) {
		return a.CampaignFanOut(ctx, store.CampaignFanOutParams{Tenant: "t1", ID: id, Limit: 10, BeforeCommit: func() error {
			close(inBatch)
			<-release
			return nil
		}})
	})
	<-inBatch
	cancel := async(func() (store.CampaignCancelResult, error) { return b.CampaignCancel(ctx, "t1", id) })
	waitBlocked(t, a, app)
	close(release)
	if res := batch(t); res.Recipients != 10 {
		t.Fatalf("the batch = %+v; want 10 recipients", res)
	}
	res := cancel(t)
	if res.Campaign.Enqueued != 10 || res.Cancelled != 10 || res.Campaign.State != store.CampaignCancelled {
		t.Fatalf("cancel = %+v; want the batch's 10 enqueued and their 10 sends cancelled", res)
	}
	if after, err := a.CampaignFanOut(ctx, store.CampaignFanOutParams{Tenant: "t1", ID: id, Limit: 10}); err != nil || !after.Done || after.Recipients != 0 {
		t.Fatalf("fan-out after the cancel = %+v, %v; want done, nothing", after, err)
	}
	var n int
	if err := a.pool.QueryRow(ctx, `SELECT count(*) FROM notifications WHERE campaign_id = $1`, id).Scan(&n); err != nil || n != 10 {
		t.Fatalf("%d notifications (%v); want the batch's 10", n, err)
	}
}

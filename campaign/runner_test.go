package campaign_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/heraldhq/herald/campaign"
	"github.com/heraldhq/herald/internal/testdb"
	"github.com/heraldhq/herald/store"
)

// failFirst fails every fan-out batch of the first campaign it is asked
// to fan out, and passes the others to the store.
type failFirst struct {
	store.Campaigns
	bad string
}

func (f *failFirst) CampaignFanOut(ctx context.Context, p store.CampaignFanOutParams) (store.CampaignFanOutResult, error) {
	if f.bad == "" {
		f.bad = p.ID
	}
	if p.ID == f.bad {
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
			id, _, err := svc.Create(ctx, "t1", fmt.Sprintf("key-%d", k), "h", campaign.Request{Kind: "coupon.expiring",
				Params: []byte(`{"coupon":"C","date":"d"}`), Recipients: []campaign.Recipient{{Recipient: "u1"}, {Recipient: "u2"}}})
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			if _, err := svc.Start(ctx, "t1", id); err != nil {
				t.Fatalf("Start: %v", err)
			}
			cids = append(cids, id)
		}
		f := &failFirst{Campaigns: db.Store.(store.Campaigns)}
		r := campaign.NewRunner(campaign.RunnerConfig{Store: f, Batch: 1})
		if _, err := r.Round(ctx); err == nil {
			t.Fatal("Round: no error; want the failing campaign's")
		}
		for _, id := range cids {
			c, err := svc.Get(ctx, "t1", id)
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]string{true: store.CampaignRunning, false: store.CampaignDone}[id == f.bad]; c.State != want {
				t.Fatalf("campaign %s (failing: %v) is %s; want %s", id, id == f.bad, c.State, want)
			}
		}
	})
}

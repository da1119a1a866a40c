package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// testErasureOfCampaignParams: a recipient's erasure clears its own params
// in its tenant's campaigns (another tenant's campaign with the same
// recipient id keeps them), so a campaign fanned out after the erasure
// writes the campaign's params for it, not the erased person's own.
func testErasureOfCampaignParams(t *testing.T, h Harness) {
	t.Run("ClearsTheRecipientsOwnCampaignParams", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		cs, ok := b.s.(store.Campaigns)
		if !ok {
			t.Skip("the store keeps no campaigns")
		}
		own := json.RawMessage(`{"coupon":"VIP-ONLY-FOR-ME"}`)
		for _, tenant := range []string{"t1", "t2"} {
			id := "cmp_erase_" + tenant
			if _, err := cs.CampaignCreate(b.ctx, store.CampaignCreateParams{ID: id, Tenant: tenant, IdempotencyKey: id, RequestHash: "h",
				Kind: "coupon", Lane: heraldtype.LaneMarketing, Channels: []heraldtype.Channel{heraldtype.ChannelWebhook},
				Params:     json.RawMessage(`{"coupon":"C10"}`),
				Recipients: []store.CampaignRecipient{{Recipient: "r-erased", NotificationID: "ntf_erase_" + tenant, Params: own}}}); err != nil {
				t.Fatal(err)
			}
		}
		eraseAll(t, b, "t1", "r-erased", 500)
		for _, tenant := range []string{"t1", "t2"} {
			id := "cmp_erase_" + tenant
			if _, err := cs.CampaignStart(b.ctx, tenant, id); err != nil {
				t.Fatal(err)
			}
			if _, err := cs.CampaignFanOut(b.ctx, store.CampaignFanOutParams{Tenant: tenant, ID: id, Limit: 10}); err != nil {
				t.Fatal(err)
			}
		}
		b.clk.Advance(time.Second)
		got := map[string]string{}
		for _, r := range claim(t, b, heraldtype.LaneMarketing, 10) {
			got[r.Tenant] = string(r.Params)
		}
		if got["t1"] != `{"coupon":"C10"}` {
			t.Errorf("t1's campaign fanned out the erased recipient with params %s, want the campaign's {\"coupon\":\"C10\"}", got["t1"])
		}
		if got["t2"] != string(own) {
			t.Errorf("t2's campaign (not erased there) has params %s, want %s", got["t2"], own)
		}
	})
}

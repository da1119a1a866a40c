package storetest

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// testErasureOfCampaignParams: a recipient's erasure takes it out of its
// tenant's campaigns that have not fanned it out yet (a draft, a running
// campaign whose cursor has not reached it): no notification is ever
// written for it there, and the campaign's total drops by one, so the
// fan-out still ends with enqueued = total. A campaign that fanned it out
// already keeps its row, its own params cleared (its notification is
// erased as any other). Another tenant's campaign with the same recipient
// id keeps it and its params.
func testErasureOfCampaignParams(t *testing.T, h Harness) {
	t.Run("TakesTheRecipientOutOfCampaignsNotFannedOut", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		cs, ok := b.s.(store.Campaigns)
		if !ok {
			t.Skip("the store keeps no campaigns")
		}
		own := json.RawMessage(`{"coupon":"VIP-ONLY-FOR-ME"}`)
		create := func(tenant, id string, recipients ...string) {
			t.Helper()
			var rs []store.CampaignRecipient
			for _, r := range recipients {
				rp := json.RawMessage(nil)
				if r == "r-erased" {
					rp = own
				}
				rs = append(rs, store.CampaignRecipient{Recipient: r, NotificationID: fmt.Sprintf("ntf_%s_%s", id, r), Params: rp})
			}
			if _, err := cs.CampaignCreate(b.ctx, store.CampaignCreateParams{ID: id, Tenant: tenant, IdempotencyKey: id, RequestHash: "h",
				Kind: "coupon", Lane: heraldtype.LaneMarketing, Channels: []heraldtype.Channel{heraldtype.ChannelWebhook},
				Params: json.RawMessage(`{"coupon":"C10"}`), Recipients: rs}); err != nil {
				t.Fatal(err)
			}
		}
		fanOut := func(tenant, id string, limit int) {
			t.Helper()
			if _, err := cs.CampaignFanOut(b.ctx, store.CampaignFanOutParams{Tenant: tenant, ID: id, Limit: limit}); err != nil {
				t.Fatal(err)
			}
		}
		start := func(tenant, id string) {
			t.Helper()
			if _, err := cs.CampaignStart(b.ctx, tenant, id); err != nil {
				t.Fatal(err)
			}
		}
		create("t1", "cmp_draft", "r-erased", "r-kept")    // a draft
		create("t1", "cmp_running", "r-first", "r-erased") // running, its cursor before the recipient
		create("t1", "cmp_past", "r-erased", "r-last")     // running, the recipient fanned out already
		create("t2", "cmp_other", "r-erased")              // another tenant's
		create("t1", "cmp_done", "r-erased")               // fanned out whole, DONE
		start("t1", "cmp_running")
		fanOut("t1", "cmp_running", 1)
		start("t1", "cmp_past")
		fanOut("t1", "cmp_past", 1)
		start("t1", "cmp_done")
		fanOut("t1", "cmp_done", 10)

		eraseAll(t, b, "t1", "r-erased", 500)

		start("t1", "cmp_draft")
		for _, c := range []struct{ tenant, id string }{{"t1", "cmp_draft"}, {"t1", "cmp_running"}, {"t1", "cmp_past"}, {"t2", "cmp_other"}} {
			if c.id == "cmp_other" {
				start(c.tenant, c.id)
			}
			fanOut(c.tenant, c.id, 10)
		}
		for _, c := range []struct {
			tenant, id      string
			total, enqueued int64
		}{{"t1", "cmp_draft", 1, 1}, {"t1", "cmp_running", 1, 1}, {"t1", "cmp_past", 2, 2}, {"t2", "cmp_other", 1, 1}, {"t1", "cmp_done", 1, 1}} {
			got, err := cs.CampaignGet(b.ctx, c.tenant, c.id)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != store.CampaignDone || got.Total != c.total || got.Enqueued != c.enqueued {
				t.Errorf("%s after the erasure: %s, total %d, enqueued %d; want DONE, total %d, enqueued %d",
					c.id, got.State, got.Total, got.Enqueued, c.total, c.enqueued)
			}
		}
		b.clk.Advance(time.Second)
		var t1 []string
		params := map[string]string{}
		for _, r := range claim(t, b, heraldtype.LaneMarketing, 20) {
			params[r.NotificationID] = string(r.Params)
			if r.Tenant == "t1" {
				t1 = append(t1, r.NotificationID)
			}
		}
		slices.Sort(t1)
		// The erased recipient's notifications written before the erasure
		// (cmp_past's, cmp_done's) are erased ones; none was written after.
		want := []string{"ntf_cmp_done_r-erased", "ntf_cmp_draft_r-kept", "ntf_cmp_past_r-erased", "ntf_cmp_past_r-last", "ntf_cmp_running_r-first"}
		if !slices.Equal(t1, want) {
			t.Errorf("t1's notifications to send: %v; want %v (none for the erased recipient from a campaign not fanned out to it)", t1, want)
		}
		for _, id := range []string{"ntf_cmp_done_r-erased", "ntf_cmp_past_r-erased"} {
			if p, ok := params[id]; ok && p != "{}" {
				t.Errorf("%s, written before the erasure, has params %s; want {}", id, p)
			}
		}
		if got := params["ntf_cmp_other_r-erased"]; got != string(own) {
			t.Errorf("t2's campaign (not erased there) has params %s, want %s", got, own)
		}
	})
}

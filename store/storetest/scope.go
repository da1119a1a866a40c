package storetest

import (
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// A notification's scope (a clinic, a brand inside its tenant) is kept
// on it and on every outbox row it plans, as the claim's fairness needs
// (testFairness): the read API, the list, both claims and a campaign's
// fan-out carry it.
func testScopes(t *testing.T, h Harness) {
	t.Run("ANotificationsScopeIsOnItAndEachOfItsRows", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		p, _ := create(t, b, func(p *store.NotificationCreateParams) {
			p.Scope = "clinic-7"
			p.Channels = []heraldtype.Channel{heraldtype.ChannelWebhook, heraldtype.ChannelSMS}
			p.Fallback = true // a chain: its second step's row is written when the first fails
		})
		plain, _ := create(t, b, nil)
		want := map[string]string{p.ID: "clinic-7", plain.ID: ""}
		v, err := b.s.NotificationGet(b.ctx, "t1", p.ID)
		if err != nil || v.Scope != "clinic-7" {
			t.Fatalf("NotificationGet: scope %q, %v; want clinic-7", v.Scope, err)
		}
		if v, err := b.s.NotificationGet(b.ctx, "t1", plain.ID); err != nil || v.Scope != "" {
			t.Fatalf("NotificationGet of an unscoped one: scope %q, %v; want none", v.Scope, err)
		}
		list, err := b.s.NotificationList(b.ctx, store.NotificationListParams{Tenant: "t1", Limit: 10})
		if err != nil || len(list) != 2 {
			t.Fatalf("NotificationList = %d views, %v; want 2", len(list), err)
		}
		for _, v := range list {
			if v.Scope != want[v.ID] {
				t.Fatalf("NotificationList shows %s with scope %q, want %q", v.ID, v.Scope, want[v.ID])
			}
		}
		claimAll := func(publishing bool) []store.Claimed {
			t.Helper()
			got, err := b.s.OutboxClaim(b.ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w1", Limit: 10,
				Lease: time.Minute, Publishing: publishing})
			if err != nil {
				t.Fatalf("OutboxClaim: %v", err)
			}
			for _, c := range got {
				if c.Scope != want[c.NotificationID] {
					t.Fatalf("claimed %s (publishing %v) with scope %q, want %q", c.MessageID, publishing, c.Scope, want[c.NotificationID])
				}
			}
			return got
		}
		// The relay's claim, put back; then a claimer's.
		relayed := claimAll(true)
		if len(relayed) != 2 {
			t.Fatalf("the relay's claim took %d rows, want the chain's first and the plain one", len(relayed))
		}
		for _, c := range relayed {
			if ok, err := b.s.OutboxRetry(b.ctx, store.OutboxRetryParams{Fence: c.Fence}); err != nil || !ok {
				t.Fatalf("OutboxRetry: %v, %v", ok, err)
			}
		}
		first := claimAll(false)
		if len(first) != 2 {
			t.Fatalf("the claim took %d rows, want 2", len(first))
		}
		for _, c := range first {
			if c.NotificationID == p.ID {
				endSend(t, b, c, heraldtype.DeliveryPermanentFailure, "REJECTED") // the chain moves on to SMS
			}
		}
		next := claimAll(false)
		if len(next) != 1 || next[0].Channel != heraldtype.ChannelSMS {
			t.Fatalf("after the first step failed, the claim took %d rows, want the chain's SMS", len(next))
		}
		if h.Query != nil { // the rows as stored, where the harness can read them
			rows := h.Query(t, b.s, "SELECT channel, scope FROM outbox WHERE notification_id = '"+p.ID+"'")
			for _, r := range rows {
				if r[1] != "clinic-7" {
					t.Fatalf("outbox row %s has scope %q, want clinic-7", r[0], r[1])
				}
			}
			if len(rows) != 2 {
				t.Fatalf("outbox rows %v, want the chain's two", rows)
			}
		}
	})

	t.Run("ACampaignsScopeIsOnEachOfItsNotifications", func(t *testing.T) {
		t.Parallel()
		b := setupCampaigns(t, h)
		if h.Query == nil {
			t.Skip("the harness cannot read the tables")
		}
		p := newCampaign(t, b, func(id string) []store.CampaignRecipient { return recipients(id, 1, 3) },
			func(p *store.CampaignCreateParams) { p.Scope = "brand-a" })
		if c := getCampaign(t, b, p.ID); c.Scope != "brand-a" {
			t.Fatalf("CampaignGet: scope %q, want brand-a", c.Scope)
		}
		startCampaign(t, b, p.ID)
		if res := fanOut(t, b, p.ID, 10); res.Notifications != 3 {
			t.Fatalf("fan-out wrote %d notifications, want 3", res.Notifications)
		}
		for _, q := range []string{
			"SELECT id, scope FROM notifications WHERE campaign_id = '" + p.ID + "'",
			"SELECT o.message_id, o.scope FROM outbox o JOIN notifications n ON n.id = o.notification_id WHERE n.campaign_id = '" + p.ID + "'",
		} {
			rows := h.Query(t, b.s, q)
			if len(rows) != 3 {
				t.Fatalf("%s: %d rows, want 3", q, len(rows))
			}
			for _, r := range rows {
				if r[1] != "brand-a" {
					t.Fatalf("%s has scope %q, want brand-a", r[0], r[1])
				}
			}
		}
		got := claim(t, b.bundle, heraldtype.LaneMarketing, 10)
		if len(got) != 3 {
			t.Fatalf("claimed %d rows, want 3", len(got))
		}
		for _, c := range got {
			if c.Scope != "brand-a" {
				t.Fatalf("claimed %s with scope %q, want brand-a", c.MessageID, c.Scope)
			}
		}
	})
}

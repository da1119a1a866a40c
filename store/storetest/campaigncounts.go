package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// CampaignCountsBeforeMigration is a campaign of tenant t1 whose sends
// have ended in each way a count tells apart, made through s: a driver's
// test of the migration that began keeping the counts (27 on both) makes
// it, takes the schema back to before that migration (or a later one that
// changed how they are kept), migrates again and
// checks (CheckCampaignCountsMigrated) that the counts it starts from are
// the ones the rows give.
type CampaignCountsBeforeMigration struct {
	ID   string
	Want store.CampaignCounts
}

// MakeCampaignCounts writes the campaign: five recipients, one send each,
// ending sent, failed (permanent), unknown, suppressed and under way.
func MakeCampaignCounts(t *testing.T, s store.Store, now time.Time) CampaignCountsBeforeMigration {
	t.Helper()
	ctx := context.Background()
	c, ok := s.(store.Campaigns)
	if !ok {
		t.Fatal("the store does not keep campaigns")
	}
	const id = "cmp_counts"
	rs := recipients(id, 1, 5)
	if _, err := c.CampaignCreate(ctx, store.CampaignCreateParams{ID: id, Tenant: "t1", IdempotencyKey: "k", RequestHash: "h", Kind: "k",
		Lane: heraldtype.LaneMarketing, Channels: []heraldtype.Channel{heraldtype.ChannelWebhook}, Recipients: rs}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CampaignStart(ctx, "t1", id); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CampaignFanOut(ctx, store.CampaignFanOutParams{Tenant: "t1", ID: id, Limit: 10}); err != nil {
		t.Fatal(err)
	}
	for i, state := range []heraldtype.DeliveryState{heraldtype.DeliveryProviderAccepted, heraldtype.DeliveryPermanentFailure, heraldtype.DeliveryUnknown, "", heraldtype.DeliverySending} {
		mid := store.MessageID(rs[i].NotificationID, heraldtype.ChannelWebhook)
		if state == "" {
			if _, err := s.DeliveryDecide(ctx, store.DeliveryDecideParams{MessageID: mid, NotificationID: rs[i].NotificationID, Tenant: "t1",
				Channel: heraldtype.ChannelWebhook, State: heraldtype.DeliverySuppressed, Reason: heraldtype.ReasonConsentDenied}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, err := s.DeliveryClaim(ctx, store.DeliveryClaimParams{MessageID: mid, NotificationID: rs[i].NotificationID, Tenant: "t1",
			Channel: heraldtype.ChannelWebhook, Provider: "p", Owner: "w1"}); err != nil {
			t.Fatal(err)
		}
		if state == heraldtype.DeliverySending {
			continue
		}
		if _, err := s.DeliveryRecord(ctx, store.DeliveryRecordParams{MessageID: mid, Attempt: 1, State: state, Owner: "w1", Class: "c",
			StartedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	return CampaignCountsBeforeMigration{ID: id, Want: store.CampaignCounts{Sent: 1, Failed: 1, Unknown: 1, Suppressed: 1}}
}

// CheckCampaignCountsMigrated checks the campaign's counts on s, opened
// after the migration, and that the counts go on from there: the send
// under way, once accepted, is counted.
func CheckCampaignCountsMigrated(t *testing.T, s store.Store, c CampaignCountsBeforeMigration, now time.Time) {
	t.Helper()
	ctx := context.Background()
	got, err := s.(store.Campaigns).CampaignGet(ctx, "t1", c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Counts != c.Want {
		t.Fatalf("counts after the migration = %+v; want %+v", got.Counts, c.Want)
	}
	mid := store.MessageID(recipients(c.ID, 5, 1)[0].NotificationID, heraldtype.ChannelWebhook)
	if _, err := s.DeliveryRecord(ctx, store.DeliveryRecordParams{MessageID: mid, Attempt: 1, State: heraldtype.DeliveryProviderAccepted,
		Owner: "w1", Class: "c", StartedAt: now}); err != nil {
		t.Fatal(err)
	}
	want := c.Want
	want.Sent++
	if got, err = s.(store.Campaigns).CampaignGet(ctx, "t1", c.ID); err != nil || got.Counts != want {
		t.Fatalf("counts after a send ended = %+v, %v; want %+v", got.Counts, err, want)
	}
}

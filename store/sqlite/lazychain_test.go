package sqlite_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testdb"
	"github.com/heraldhq/herald/store"
)

// createFor creates notification id for t1's r1 over channels, a fallback
// chain when chain is set.
func createFor(t *testing.T, s store.Store, id string, chain bool, channels ...heraldtype.Channel) {
	t.Helper()
	_, err := s.NotificationCreate(context.Background(), store.NotificationCreateParams{
		Tenant: "t1", IdempotencyKey: "key-" + id, RequestHash: "h", IdempotencyTTL: time.Hour, Response: []byte(`{}`),
		ID: id, Recipient: "r1", EventID: "e-" + id, Kind: "k", Lane: heraldtype.LaneTransactional, Params: json.RawMessage(`{}`),
		Channels: channels, Fallback: chain,
	})
	if err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
}

// A lazy chain's later steps have no rows until a definite failure of its
// first step needs them: the first channel accepting (the common path)
// leaves one outbox row, and writes none at its end. The conformance
// suite checks that the read API shows the chain as an eager one's rows
// would; this checks the rows themselves.
func TestALazyChainWritesItsLaterStepsOnlyWhenNeeded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	db := testdb.Open(t, "sqlite", clk)
	s := db.Store
	create := func(id string, channels ...heraldtype.Channel) { createFor(t, s, id, true, channels...) }
	rows := func(id string) int {
		t.Helper()
		return db.Count(t, "SELECT count(*) FROM outbox WHERE notification_id = '"+id+"'")
	}
	create("ntf_ok", heraldtype.ChannelWebhook, heraldtype.ChannelSMS, heraldtype.ChannelAlimTalk)
	create("ntf_fail", heraldtype.ChannelWebhook, heraldtype.ChannelSMS, heraldtype.ChannelAlimTalk)
	// A later push step is written whole at intake: its sends are the
	// devices of then.
	create("ntf_eager", heraldtype.ChannelWebhook, heraldtype.ChannelPush)
	if n := db.Count(t, `SELECT count(*) FROM outbox WHERE notification_id = 'ntf_ok' AND fallback_step = 1
		AND fallback_plan = '["sms","alimtalk"]'`); n != 1 || rows("ntf_ok") != 1 {
		t.Fatalf("intake wrote %d rows for the lazy chain (%d with the plan), want the first step's alone", rows("ntf_ok"), n)
	}
	if n := rows("ntf_eager"); n != 2 {
		t.Fatalf("intake wrote %d rows for a chain with a later push step, want both", n)
	}

	claimed, err := s.OutboxClaim(ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w", Limit: 10, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claimed {
		if c.NotificationID == "ntf_eager" {
			continue
		}
		state := heraldtype.DeliveryProviderAccepted
		if c.NotificationID == "ntf_fail" {
			state = heraldtype.DeliveryPermanentFailure
		}
		cl, err := s.DeliveryClaim(ctx, store.DeliveryClaimParams{MessageID: c.MessageID, NotificationID: c.NotificationID,
			Tenant: "t1", Channel: c.Channel, Provider: "p", Owner: "w"})
		if err != nil || !cl.Claimed {
			t.Fatalf("claim %s: %+v (%v)", c.MessageID, cl, err)
		}
		if _, err := s.DeliveryRecord(ctx, store.DeliveryRecordParams{MessageID: c.MessageID, Attempt: cl.Attempt, State: state,
			Owner: "w", Class: "x", StartedAt: clk.Now(), Outbox: &c.Fence}); err != nil {
			t.Fatal(err)
		}
	}
	if n := rows("ntf_ok"); n != 1 {
		t.Fatalf("the accepted chain has %d rows, want 1: its end wrote the steps it no longer needs", n)
	}
	if n := db.Count(t, `SELECT count(*) FROM outbox WHERE notification_id = 'ntf_fail'
		AND ((fallback_step = 2 AND state = 'PENDING' AND fallback_after = 'PERMANENT_FAILURE') OR (fallback_step = 3 AND state = 'WAITING'))`); n != 2 {
		t.Fatalf("after the failure %d of the later steps' rows are as expected, want SMS released and AlimTalk waiting", n)
	}
}

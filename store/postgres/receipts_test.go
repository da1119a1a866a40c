package postgres_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/postgres"
)

// A receipt reads the delivery and settles it in one statement, whose
// update is conditional on the state it read: a write that commits
// between the read and the update (here another settlement, held open in
// a transaction until the receipt waits for its row lock) leaves the
// receipt's update nothing to take, and the receipt reads again and
// answers what it finds, writing nothing over it. Without that condition
// it would write DELIVERED over the other write and count a second
// settlement. (SQLite's single writer cannot interleave them at all.)
func TestReceiptRereadsARowChangedUnderIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testpg.Schema(t)
	s, err := postgres.Open(ctx, url, postgres.Options{Clock: clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	const nid = "ntf_receipt_race"
	mid := store.MessageID(nid, heraldtype.ChannelPush)
	if _, err := s.NotificationCreate(ctx, store.NotificationCreateParams{Tenant: "t1", ID: nid, Recipient: "r1", EventID: "e1", Kind: "k",
		Lane: heraldtype.LaneTransactional, Params: json.RawMessage(`{}`), Channels: []heraldtype.Channel{heraldtype.ChannelPush}}); err != nil {
		t.Fatal(err)
	}
	if res, err := s.DeliveryClaim(ctx, store.DeliveryClaimParams{MessageID: mid, NotificationID: nid, Tenant: "t1",
		Channel: heraldtype.ChannelPush, Provider: "p", Owner: "w"}); err != nil || !res.Claimed {
		t.Fatalf("claim: %+v, %v", res, err)
	}
	if res, err := s.DeliveryRecord(ctx, store.DeliveryRecordParams{MessageID: mid, Attempt: 1, State: heraldtype.DeliveryProviderAccepted,
		Owner: "w", Class: "accepted"}); err != nil || !res.Recorded {
		t.Fatalf("record: %+v, %v", res, err)
	}

	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `UPDATE deliveries SET state = 'DELIVERED', reason = 'OTHER' WHERE message_id = $1`, mid); err != nil {
		t.Fatal(err)
	}
	var holder int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&holder); err != nil {
		t.Fatal(err)
	}

	type result struct {
		out store.ReceiptOutcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := s.DeliveryReceipt(ctx, "t1", "r1", mid)
		done <- result{out, err}
	}()
	// The receipt has read PROVIDER_ACCEPTED and waits for the row.
	watcher, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close(ctx)
	testenv.WaitFor(t, "the receipt to wait for the held row", testenv.Patience, func() bool {
		var n int
		err := watcher.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))`, holder).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := testenv.Recv(t, done, "the receipt's answer")
	want := store.ReceiptOutcome{Result: store.ReceiptAlready, From: heraldtype.DeliveryDelivered, Lane: heraldtype.LaneTransactional, Channel: heraldtype.ChannelPush}
	if r.err != nil || r.out != want {
		t.Fatalf("receipt: %+v, %v; want %+v", r.out, r.err, want)
	}
	if d, err := s.DeliveryGet(ctx, mid); err != nil || d.State != heraldtype.DeliveryDelivered || d.Reason != "OTHER" {
		t.Fatalf("delivery %s(%s), %v; want the other write's DELIVERED(OTHER) kept", d.State, d.Reason, err)
	}
}

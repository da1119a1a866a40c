package fallback_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testdb"
	"github.com/heraldhq/herald/store"
)

// refuseMoves makes the database refuse any write that takes an outbox row
// out of WAITING (a release or a skip), as a fault in the chain's write
// would; allow drops that again. On PostgreSQL a lazy chain's end writes
// its later steps' rows already moved (an insert of step 2 released, or of
// the steps skipped: store/postgres/fallback.go), so an insert of a later
// step other than WAITING is refused too.
var refuseMoves = map[string]struct{ refuse, allow []string }{
	"sqlite": {
		refuse: []string{`CREATE TRIGGER refuse_moves BEFORE UPDATE OF state ON outbox
WHEN OLD.state = 'WAITING' AND NEW.state <> 'WAITING' BEGIN SELECT RAISE(ABORT, 'refused'); END`},
		allow: []string{`DROP TRIGGER refuse_moves`},
	},
	"postgres": {
		refuse: []string{
			`CREATE FUNCTION refuse_moves() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused'; END $$`,
			`CREATE TRIGGER refuse_moves BEFORE UPDATE ON outbox FOR EACH ROW
WHEN (OLD.state = 'WAITING' AND NEW.state <> 'WAITING') EXECUTE FUNCTION refuse_moves()`,
			`CREATE TRIGGER refuse_moved_inserts BEFORE INSERT ON outbox FOR EACH ROW
WHEN (NEW.fallback_step > 1 AND NEW.state <> 'WAITING') EXECUTE FUNCTION refuse_moves()`,
		},
		allow: []string{`DROP TRIGGER refuse_moves ON outbox`, `DROP TRIGGER refuse_moved_inserts ON outbox`, `DROP FUNCTION refuse_moves()`},
	},
}

// The chain moves on in the very transaction that ends the send: when the
// move fails, the send's end is not written either (the delivery stays
// SENDING, or has no row, and every copy still sees it so), and writing it
// again once the fault is gone moves the chain. Nothing is ever half
// written: an ended send whose chain did not move, or a moved chain whose
// send did not end.
func TestTheChainMovesInTheTransactionThatEndsTheSend(t *testing.T) {
	for _, driver := range testdb.Drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
			db := testdb.Open(t, driver, clk)
			s, ctx := db.Store, context.Background()
			create := func(id string) {
				t.Helper()
				if _, err := s.NotificationCreate(ctx, store.NotificationCreateParams{Tenant: "t1", ID: id, Recipient: "r1",
					EventID: id, Kind: "k", Lane: heraldtype.LaneTransactional, Params: json.RawMessage(`{}`), Fallback: true,
					Channels: []heraldtype.Channel{heraldtype.ChannelPush, heraldtype.ChannelSMS}}); err != nil {
					t.Fatal(err)
				}
			}
			sms := func(id string) store.DeliveryView {
				t.Helper()
				v, err := s.NotificationGet(ctx, "t1", id)
				if err != nil || len(v.Deliveries) != 2 {
					t.Fatalf("NotificationGet %s: %+v (%v)", id, v, err)
				}
				return v.Deliveries[1]
			}
			run := func(qs []string) {
				t.Helper()
				for _, q := range qs {
					db.Exec(t, q)
				}
			}
			// recorded: push's result (a definite failure) after a claim;
			// decided: a pre-check's decision (no address) without one.
			create("ntf_recorded")
			create("ntf_decided")
			recorded := store.MessageID("ntf_recorded", heraldtype.ChannelPush)
			if res, err := s.DeliveryClaim(ctx, store.DeliveryClaimParams{MessageID: recorded, NotificationID: "ntf_recorded", Tenant: "t1",
				Channel: heraldtype.ChannelPush, Provider: "p", Owner: "w"}); err != nil || !res.Claimed {
				t.Fatalf("claim: %+v (%v)", res, err)
			}
			record := func() (store.RecordResult, error) {
				return s.DeliveryRecord(ctx, store.DeliveryRecordParams{MessageID: recorded, Attempt: 1, State: heraldtype.DeliveryPermanentFailure,
					Reason: "BAD", Owner: "w", Class: "permanent", StartedAt: clk.Now()})
			}
			decide := func() (bool, error) {
				return s.DeliveryDecide(ctx, store.DeliveryDecideParams{MessageID: store.MessageID("ntf_decided", heraldtype.ChannelPush),
					NotificationID: "ntf_decided", Tenant: "t1", Channel: heraldtype.ChannelPush, State: heraldtype.DeliverySuppressed,
					Reason: heraldtype.ReasonDestinationUnavailable})
			}

			run(refuseMoves[driver].refuse)
			if _, err := record(); err == nil {
				t.Fatal("the result was written though the release failed")
			}
			if d, err := s.DeliveryGet(ctx, recorded); err != nil || d.State != heraldtype.DeliverySending {
				t.Fatalf("after the failed write push is %+v (%v), want SENDING still", d, err)
			}
			if _, err := decide(); err == nil {
				t.Fatal("the decision was written though the release failed")
			}
			if _, err := s.DeliveryGet(ctx, store.MessageID("ntf_decided", heraldtype.ChannelPush)); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("after the failed decision push has a delivery row (%v)", err)
			}
			for _, id := range []string{"ntf_recorded", "ntf_decided"} {
				if got := sms(id); got.OutboxState != heraldtype.OutboxWaiting {
					t.Fatalf("%s: SMS is %s, want WAITING", id, got.OutboxState)
				}
			}

			run(refuseMoves[driver].allow)
			if rec, err := record(); err != nil || !rec.Recorded {
				t.Fatalf("record again: %+v (%v)", rec, err)
			}
			if ok, err := decide(); err != nil || !ok {
				t.Fatalf("decide again: %v (%v)", ok, err)
			}
			for id, after := range map[string]string{"ntf_recorded": "PERMANENT_FAILURE", "ntf_decided": heraldtype.ReasonDestinationUnavailable} {
				if got := sms(id); got.OutboxState != heraldtype.OutboxPending || got.Fallback == nil || got.Fallback.After != after {
					t.Fatalf("%s: SMS is %s %+v, want PENDING after %s", id, got.OutboxState, got.Fallback, after)
				}
			}
		})
	}
}

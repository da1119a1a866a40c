package postgres

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/store"
)

// Tests of the lazy fallback chain's rows (fallback.go). The conformance
// suite checks that the read API shows a lazy chain as an eager one's rows
// would; these check the rows themselves, and the orders in which two
// writes of one chain can meet.

// lazyStore opens a store on a fresh schema whose connections are named
// app, on a fake clock.
func lazyStore(t *testing.T, app string) (*Store, *clock.Fake, string) {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	url := testpg.Schema(t)
	return setup(t, appURL(url, app), Options{Clock: clk}), clk, url
}

// chain creates a notification of a first kind for recipient over
// channels (after registering a push device per token) and returns its id.
func chain(t *testing.T, s *Store, recipient string, channels []heraldtype.Channel, tokens ...string) string {
	t.Helper()
	for _, tok := range tokens {
		if _, _, err := s.DevicePut(context.Background(), store.Device{Tenant: "t1", Recipient: recipient,
			DeviceID: store.DeviceID("t1", recipient, tok), Token: tok, Platform: store.PlatformFCM}); err != nil {
			t.Fatal(err)
		}
	}
	p := params(func(p *store.NotificationCreateParams) {
		p.Recipient, p.Channels, p.Fallback = recipient, channels, true
	})
	if res := mustCreate(t, s, p); res.Outcome != store.Created {
		t.Fatalf("create: %+v", res)
	}
	return p.ID
}

// count runs a query on s that answers one number.
func count(t *testing.T, s *Store, q string, args ...any) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// claimAll claims every due row of the transactional lane and its
// delivery, by message id.
func claimAll(t *testing.T, s *Store) map[string]store.Claimed {
	t.Helper()
	ctx := context.Background()
	rows, err := s.OutboxClaim(ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w", Limit: 100, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]store.Claimed{}
	for _, c := range rows {
		cl, err := s.DeliveryClaim(ctx, store.DeliveryClaimParams{MessageID: c.MessageID, NotificationID: c.NotificationID,
			Tenant: "t1", Channel: c.Channel, Provider: "p", Owner: "w"})
		if err != nil || !cl.Claimed {
			t.Fatalf("claim %s: %+v (%v)", c.MessageID, cl, err)
		}
		out[c.MessageID] = c
	}
	return out
}

// record writes the first attempt's result of the claimed c, settling its
// row as the db transport does.
func record(s *Store, clk clock.Clock, c store.Claimed, state heraldtype.DeliveryState) (store.RecordResult, error) {
	return s.DeliveryRecord(context.Background(), store.DeliveryRecordParams{MessageID: c.MessageID, Attempt: 1, State: state,
		Owner: "w", Class: "x", StartedAt: clk.Now(), Outbox: &c.Fence})
}

// laterRows reads the later steps' rows of notification id as
// "channel:state:fails:after" in step order.
func laterRows(t *testing.T, s *Store, id string) []string {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), `SELECT channel || ':' || state || ':' || fallback_fails || ':' || coalesce(fallback_after, '')
FROM outbox WHERE notification_id = $1 AND fallback_step > 1 ORDER BY fallback_step`, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

var webhookSMSAlimTalk = []heraldtype.Channel{heraldtype.ChannelWebhook, heraldtype.ChannelSMS, heraldtype.ChannelAlimTalk}

// A lazy chain's later steps have no rows until a definite failure of its
// first step needs them: the first channel accepting (the common path)
// leaves one outbox row and writes none at its end, in one statement.
func TestALazyChainWritesItsLaterStepsOnlyWhenNeeded(t *testing.T) {
	t.Parallel()
	s, clk, _ := lazyStore(t, "lazy_rows")
	ok := chain(t, s, "r1", webhookSMSAlimTalk)
	failed := chain(t, s, "r2", webhookSMSAlimTalk)
	// A later push step is written whole at intake: its sends are the
	// devices of then.
	eager := chain(t, s, "r3", []heraldtype.Channel{heraldtype.ChannelWebhook, heraldtype.ChannelPush})
	// A send on no chain: its claim says so, and its end runs no chain CTE.
	plain := params(func(p *store.NotificationCreateParams) { p.Recipient = "r5" })
	mustCreate(t, s, plain)
	// CreateTx's statement writes a lazy chain as intake does.
	tx, err := s.pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	inTx := params(func(p *store.NotificationCreateParams) {
		p.IdempotencyKey, p.Recipient, p.Channels, p.Fallback = "", "r4", webhookSMSAlimTalk, true
	})
	if _, err := CreateTxNoWake(context.Background(), tx, inTx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{ok, failed, inTx.ID} {
		all := count(t, s, `SELECT count(*) FROM outbox WHERE notification_id = $1`, id)
		planned := count(t, s, `SELECT count(*) FROM outbox WHERE notification_id = $1 AND fallback_step = 1
			AND fallback_plan = '{sms,alimtalk}'`, id)
		if all != 1 || planned != 1 {
			t.Fatalf("intake wrote %d rows for the lazy chain %s (%d with the plan), want the first step's alone", all, id, planned)
		}
	}
	if n := count(t, s, `SELECT count(*) FROM outbox WHERE notification_id = $1`, eager); n != 2 {
		t.Fatalf("intake wrote %d rows for a chain with a later push step, want both", n)
	}

	claimed := claimAll(t, s)
	for mid, c := range claimed {
		if want := c.NotificationID != eager && c.NotificationID != plain.ID; c.Fence.LazyChain != want {
			t.Errorf("%s: the claim read LazyChain %v, want %v", mid, c.Fence.LazyChain, want)
		}
		if want := c.NotificationID == plain.ID; c.Fence.OffChain != want {
			t.Errorf("%s: the claim read OffChain %v, want %v", mid, c.Fence.OffChain, want)
		}
	}
	for _, c := range claimed {
		state := heraldtype.DeliveryProviderAccepted
		if c.NotificationID == failed {
			state = heraldtype.DeliveryPermanentFailure
		}
		if res, err := record(s, clk, c, state); err != nil || !res.Recorded || !res.OutboxSettled {
			t.Fatalf("record %s: %+v (%v)", c.MessageID, res, err)
		}
	}
	if got := laterRows(t, s, ok); len(got) != 0 {
		t.Fatalf("the accepted chain's end wrote the steps it no longer needs: %v", got)
	}
	if got, want := fmt.Sprint(laterRows(t, s, failed)), "[sms:PENDING:1:PERMANENT_FAILURE alimtalk:WAITING:0:]"; got != want {
		t.Fatalf("after the failure the later steps are %s, want %s", got, want)
	}
}

// Two devices of a lazy chain's first step ending at once, one accepted
// and one failed, come out as an eager chain's in either order: the later
// steps SKIPPED after the acceptance, nothing left WAITING or released.
func TestTwoDevicesOfALazyFirstStepAcceptedAndFailedAtOnce(t *testing.T) {
	t.Parallel()
	s, clk, _ := lazyStore(t, "lazy_pair")
	const n = 10
	channels := []heraldtype.Channel{heraldtype.ChannelPush, heraldtype.ChannelSMS, heraldtype.ChannelAlimTalk}
	var nids []string
	for i := range n {
		nids = append(nids, chain(t, s, fmt.Sprintf("r%d", i), channels, "tok-a", "tok-b"))
	}
	claimed := claimAll(t, s)
	if len(claimed) != 2*n {
		t.Fatalf("claimed %d rows, want %d", len(claimed), 2*n)
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range claimed {
		if c.Fence.LazyChain {
			t.Fatalf("%s: a step with two sends read LazyChain", c.MessageID)
		}
		// Device a fails on the even chains, b on the odd ones.
		state := heraldtype.DeliveryProviderAccepted
		var i int
		fmt.Sscanf(c.Recipient, "r%d", &i)
		if (c.Channel == heraldtype.Channel("push."+store.DeviceID("t1", c.Recipient, "tok-a"))) == (i%2 == 0) {
			state = heraldtype.DeliveryPermanentFailure
		}
		wg.Go(func() { // every result written at once, each in its own write
			<-start
			if res, err := record(s, clk, c, state); err != nil || !res.Recorded {
				t.Errorf("record %s: %+v (%v)", c.MessageID, res, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, id := range nids {
		// A step with two sends writes its later steps at either end
		// (qFallbackMove's fl): SKIPPED by the acceptance, or counted by the
		// failure and then skipped.
		got := laterRows(t, s, id)
		want := []string{"sms:SKIPPED:0:PROVIDER_ACCEPTED", "alimtalk:SKIPPED:0:PROVIDER_ACCEPTED"}
		if got[0] == "sms:SKIPPED:1:PROVIDER_ACCEPTED" { // the failure counted first, as on an eager chain
			want[0] = got[0]
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: later steps %v, want %v", id, got, want)
		}
		v, err := s.NotificationGet(context.Background(), "t1", id)
		if err != nil {
			t.Fatal(err)
		}
		for _, dv := range v.Deliveries {
			if dv.Fallback != nil && dv.Fallback.Step > 1 && dv.OutboxState != heraldtype.OutboxSkipped {
				t.Errorf("%s: %s reads %s, want SKIPPED", id, dv.MessageID, dv.OutboxState)
			}
		}
	}
	if got := claimAll(t, s); len(got) != 0 {
		t.Fatalf("claimed %d rows after the chains ended, want none", len(got))
	}
}

// The orders a single statement's snapshot cannot see, made one at a time
// by holding the other transaction open: the end of a send must meet the
// rows a transaction wrote while the end waited for them.
func TestALazyChainsEndMeetsRowsWrittenWhileItWaited(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// A device's acceptance while another device's failure has written
	// the later steps and not committed: the acceptance's insert waits for
	// it and then skips the rows it wrote.
	t.Run("AcceptanceAfterAnotherDevicesFailure", func(t *testing.T) {
		t.Parallel()
		const app = "lazy_wait_dev"
		s, clk, _ := lazyStore(t, app)
		id := chain(t, s, "r1", []heraldtype.Channel{heraldtype.ChannelPush, heraldtype.ChannelSMS, heraldtype.ChannelAlimTalk}, "tok-a", "tok-b")
		claimed := claimAll(t, s)
		var accepted store.Claimed
		for _, c := range claimed {
			accepted = c
		}
		// What the other device's failure writes (qFallbackMove's fl).
		commit := holdTx(t, s, `INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, created_at, updated_at,
            fallback_step, fallback_fails)
SELECT $1::text, $1::text || '.' || c, 't1', 'transactional', c, 'WAITING', now(), now(), now(), st, CASE WHEN st = 2 THEN 1 ELSE 0 END
FROM (VALUES ('sms', 2), ('alimtalk', 3)) AS v (c, st)`, id)
		acceptWhileHeld(t, s, clk, app, accepted, func() { commit(true) },
			"[sms:SKIPPED:1:PROVIDER_ACCEPTED alimtalk:SKIPPED:0:PROVIDER_ACCEPTED]")
	})

	// The only send's acceptance under Fence.LazyChain while a cancel has
	// written the later steps (WAITING, the plan cleared) and not
	// committed: its settle waits for the row, finds the plan gone, and the
	// end then skips the rows as an eager chain's end would.
	t.Run("LazyAcceptanceAfterACancelsWrite", func(t *testing.T) {
		t.Parallel()
		const app = "lazy_wait_cancel"
		s, clk, _ := lazyStore(t, app)
		id := chain(t, s, "r1", webhookSMSAlimTalk)
		var c store.Claimed
		for _, x := range claimAll(t, s) {
			c = x
		}
		if !c.Fence.LazyChain {
			t.Fatal("the only send of a lazy first step read LazyChain false")
		}
		tx, err := s.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if err := s.materialize(ctx, tx, []string{id}); err != nil {
			t.Fatal(err)
		}
		acceptWhileHeld(t, s, clk, app, c, func() {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}, "[sms:SKIPPED:0:PROVIDER_ACCEPTED alimtalk:SKIPPED:0:PROVIDER_ACCEPTED]")
	})

	// The other order: the acceptance settled first, then an erasure
	// locks the row and reads the end, and writes nothing to suppress.
	t.Run("ErasureAfterALazyAcceptance", func(t *testing.T) {
		t.Parallel()
		s, clk, _ := lazyStore(t, "lazy_erase")
		id := chain(t, s, "r1", webhookSMSAlimTalk)
		for _, c := range claimAll(t, s) {
			if res, err := record(s, clk, c, heraldtype.DeliveryProviderAccepted); err != nil || !res.OutboxSettled {
				t.Fatalf("record: %+v (%v)", res, err)
			}
		}
		if _, err := s.RecipientErase(ctx, store.RecipientEraseParams{Tenant: "t1", Recipient: "r1"}); err != nil {
			t.Fatal(err)
		}
		if got := laterRows(t, s, id); len(got) != 0 {
			t.Fatalf("the erasure wrote %v for a chain its first step had ended", got)
		}
	})
}

// acceptWhileHeld records c's acceptance while another transaction holds
// what it needs, waits until it blocks on it (its sessions are named app),
// lets the holder commit, and checks that the record took and left the
// later steps' rows as want (laterRows).
func acceptWhileHeld(t *testing.T, s *Store, clk clock.Clock, app string, c store.Claimed, commit func(), want string) {
	t.Helper()
	wait := async(func() (store.RecordResult, error) { return record(s, clk, c, heraldtype.DeliveryProviderAccepted) })
	waitBlocked(t, s, app)
	commit()
	if res := wait(t); !res.Recorded || !res.OutboxSettled {
		t.Fatalf("record: %+v", res)
	}
	if got := fmt.Sprint(laterRows(t, s, c.NotificationID)); got != want {
		t.Fatalf("later steps %s, want %s", got, want)
	}
}

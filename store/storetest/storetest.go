// Package storetest is the conformance suite every store driver runs. A
// driver's test calls Run with a Harness that opens a fresh, migrated store;
// adding a driver means adding that one call.
//
// The suite moves time with a clock.Fake, which every driver must honour for
// the times that decide ownership (leases, due times, staleness).
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/store"
)

// Harness opens stores for the suite.
type Harness struct {
	// Open returns a fresh, empty, migrated store whose clock is clk. The
	// harness closes it when the test ends.
	Open func(t *testing.T, clk clock.Clock) store.Store
	// Exec, when set, runs one statement on s's database outside the
	// store (SQL both drivers accept), so a test can break a row on
	// purpose; tests that need it skip without it.
	Exec func(t *testing.T, s store.Store, query string)
	// Query, when set, runs one read-only query on s's database outside
	// the store (SQL both drivers accept: literals, no placeholders) and
	// returns its rows, each column as text (NULL as "NULL"), so a test
	// can show what the tables hold afterwards (erasure); tests that need
	// it skip without it.
	Query func(t *testing.T, s store.Store, query string) [][]string
	// TryExec, when set, runs one statement as Exec does but returns its
	// error instead of failing the test (the audit log's triggers);
	// tests that need it skip without it.
	TryExec func(t *testing.T, s store.Store, query string) error
	// Reopen, when set, opens a second store on s's database, as a second
	// process would (closed when the test ends); tests that need it skip
	// without it.
	Reopen func(t *testing.T, s store.Store, clk clock.Clock) store.Store
}

// Epoch is where every test's fake clock starts.
var Epoch = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

type bundle struct {
	s   store.Store
	clk *clock.Fake
	ctx context.Context
}

func setup(t *testing.T, h Harness) bundle {
	t.Helper()
	clk := clock.NewFake(Epoch)
	return bundle{s: h.Open(t, clk), clk: clk, ctx: context.Background()}
}

// Run runs every conformance test against the harness's driver.
func Run(t *testing.T, h Harness) {
	t.Run("Intake", func(t *testing.T) { testIntake(t, h) })
	t.Run("Outbox", func(t *testing.T) { testOutbox(t, h) })
	t.Run("Deliveries", func(t *testing.T) { testDeliveries(t, h) })
	t.Run("Watchdog", func(t *testing.T) { testWatchdog(t, h) })
	t.Run("Profiles", func(t *testing.T) { testProfiles(t, h) })
	t.Run("Parked", func(t *testing.T) { testParked(t, h) })
	t.Run("Listing", func(t *testing.T) { testListing(t, h) })
	t.Run("Attempts", func(t *testing.T) { testAttempts(t, h) })
	t.Run("Cancel", func(t *testing.T) { testCancel(t, h) })
	t.Run("Reconcile", func(t *testing.T) { testReconcile(t, h) })
	t.Run("Expiry", func(t *testing.T) { testExpiry(t, h) })
	t.Run("Inbox", func(t *testing.T) { testInbox(t, h) })
	t.Run("InboxHeads", func(t *testing.T) { testInboxHeads(t, h) })
	t.Run("Receipts", func(t *testing.T) { testReceipts(t, h) })
	t.Run("Reports", func(t *testing.T) { testReports(t, h) })
	t.Run("Devices", func(t *testing.T) { testDevices(t, h) })
	t.Run("Erasure", func(t *testing.T) { testErasure(t, h) })
	t.Run("RateBuckets", func(t *testing.T) { testRateBuckets(t, h) })
	t.Run("ConsentHistory", func(t *testing.T) { testConsentHistory(t, h) })
	t.Run("EventKeys", func(t *testing.T) { testEventKeys(t, h) })
	t.Run("ClaimTakes", func(t *testing.T) { testClaimTakes(t, h) })
	t.Run("Fallback", func(t *testing.T) { testFallback(t, h) })
	t.Run("Deferrals", func(t *testing.T) { testDeferrals(t, h) })
	t.Run("APIKeys", func(t *testing.T) { testAPIKeys(t, h) })
	t.Run("Audit", func(t *testing.T) { testAudit(t, h) })
	t.Run("Campaigns", func(t *testing.T) { testCampaigns(t, h) })
	t.Run("Fairness", func(t *testing.T) { testFairness(t, h) })
	t.Run("Scopes", func(t *testing.T) { testScopes(t, h) })
	t.Run("DeferredRows", func(t *testing.T) { testDeferredRows(t, h) })
	t.Run("Handed", func(t *testing.T) { testHanded(t, h) })
	t.Run("ErasureOfCampaignParams", func(t *testing.T) { testErasureOfCampaignParams(t, h) })
	t.Run("Sealed", func(t *testing.T) { testSealed(t, h) })
}

// create is a NotificationCreate with sensible defaults; mutate adjusts it.
func create(t *testing.T, b bundle, mutate func(p *store.NotificationCreateParams)) (store.NotificationCreateParams, store.NotificationCreateResult) {
	t.Helper()
	id := ids.New("ntf", b.clk.Now())
	p := store.NotificationCreateParams{
		Tenant: "t1", IdempotencyKey: "key-" + id, RequestHash: "h1", IdempotencyTTL: 24 * time.Hour,
		Response: []byte(`{"id":"` + id + `"}`), ID: id, Recipient: "r1", EventID: "e1", Kind: "k",
		Lane: heraldtype.LaneTransactional, Params: json.RawMessage(`{"a":1}`),
		Channels: []heraldtype.Channel{heraldtype.ChannelWebhook},
	}
	if mutate != nil {
		mutate(&p)
	}
	res, err := b.s.NotificationCreate(b.ctx, p)
	if err != nil {
		t.Fatalf("NotificationCreate: %v", err)
	}
	return p, res
}

func claim(t *testing.T, b bundle, lane heraldtype.Lane, limit int) []store.Claimed {
	t.Helper()
	return claimSkipping(t, b, lane, limit, "")
}

// claimSkipping is claim leaving tenant skip's rows (OutboxClaimParams.Skip).
func claimSkipping(t *testing.T, b bundle, lane heraldtype.Lane, limit int, skip string) []store.Claimed {
	t.Helper()
	rows, err := b.s.OutboxClaim(b.ctx, store.OutboxClaimParams{Lane: lane, Owner: "w1", Limit: limit, Lease: time.Minute, Skip: skip})
	if err != nil {
		t.Fatalf("OutboxClaim: %v", err)
	}
	return rows
}

// entry reads the first planned send of tenant t1's notification id; any
// error fails the test.
func entry(t *testing.T, b bundle, id string) store.DeliveryView {
	t.Helper()
	v, err := b.s.NotificationGet(b.ctx, "t1", id)
	if err != nil {
		t.Fatalf("NotificationGet %s: %v", id, err)
	}
	if len(v.Deliveries) == 0 {
		t.Fatalf("notification %s has no planned sends", id)
	}
	return v.Deliveries[0]
}

// delivery reads a delivery row; any error fails the test.
func delivery(t *testing.T, b bundle, messageID string) store.Delivery {
	t.Helper()
	d, err := b.s.DeliveryGet(b.ctx, messageID)
	if err != nil {
		t.Fatalf("DeliveryGet %s: %v", messageID, err)
	}
	return d
}

// claimDelivery runs DeliveryClaim; any error fails the test, so a check on
// Claimed cannot pass because the store failed.
func claimDelivery(t *testing.T, b bundle, p store.DeliveryClaimParams) store.DeliveryClaimResult {
	t.Helper()
	res, err := b.s.DeliveryClaim(b.ctx, p)
	if err != nil {
		t.Fatalf("DeliveryClaim %s: %v", p.MessageID, err)
	}
	return res
}

// Receive waits for a value from c; after 30 s it fails the test, saying
// what it waited for. The drivers' own tests wait with it too.
func Receive[T any](t testing.TB, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("waited 30s for: %s", what)
		panic("unreachable")
	}
}

// wait waits for wg as Receive waits for a value.
func wait(t *testing.T, wg *sync.WaitGroup, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	Receive(t, done, what)
}

func testIntake(t *testing.T, h Harness) {
	t.Run("CreatedIsReadableWithOneEntryPerChannel", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		p, res := create(t, b, func(p *store.NotificationCreateParams) {
			p.Channels = []heraldtype.Channel{heraldtype.ChannelWebhook, heraldtype.ChannelPush}
		})
		if res.Outcome != store.Created || res.ID != p.ID {
			t.Fatalf("outcome %v id %q, want Created %q", res.Outcome, res.ID, p.ID)
		}
		v, err := b.s.NotificationGet(b.ctx, "t1", p.ID)
		if err != nil {
			t.Fatal(err)
		}
		if v.Kind != "k" || v.Recipient != "r1" || v.EventID != "e1" || len(v.Deliveries) != 2 {
			t.Fatalf("view = %+v", v)
		}
		for _, d := range v.Deliveries {
			if d.OutboxState != heraldtype.OutboxPending || d.Delivery != nil {
				t.Errorf("entry %+v, want PENDING without delivery", d)
			}
			if d.MessageID != store.MessageID(p.ID, d.Channel) {
				t.Errorf("message id %q", d.MessageID)
			}
		}
	})
	t.Run("OtherTenantCannotRead", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		p, _ := create(t, b, nil)
		if _, err := b.s.NotificationGet(b.ctx, "t2", p.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("err = %v, want ErrNotFound", err)
		}
	})
	t.Run("SameKeySameHashReplays", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		first, _ := create(t, b, func(p *store.NotificationCreateParams) { p.IdempotencyKey = "k" })
		_, res := create(t, b, func(p *store.NotificationCreateParams) { p.IdempotencyKey = "k" })
		if res.Outcome != store.Replayed || string(res.Response) != string(first.Response) {
			t.Fatalf("got %v %s, want Replayed %s", res.Outcome, res.Response, first.Response)
		}
	})
	t.Run("SameKeyDifferentHashConflicts", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		create(t, b, func(p *store.NotificationCreateParams) { p.IdempotencyKey = "k" })
		p, res := create(t, b, func(p *store.NotificationCreateParams) { p.IdempotencyKey = "k"; p.RequestHash = "h2" })
		if res.Outcome != store.Conflict {
			t.Fatalf("outcome %v, want Conflict", res.Outcome)
		}
		if _, err := b.s.NotificationGet(b.ctx, "t1", p.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("conflicting request wrote a notification (err %v)", err)
		}
	})
	t.Run("KeysAreScopedPerTenant", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		create(t, b, func(p *store.NotificationCreateParams) { p.IdempotencyKey = "k" })
		_, res := create(t, b, func(p *store.NotificationCreateParams) { p.IdempotencyKey = "k"; p.Tenant = "t2" })
		if res.Outcome != store.Created {
			t.Fatalf("outcome %v, want Created", res.Outcome)
		}
	})
	t.Run("ExpiredKeyIsFreeAgain", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		create(t, b, func(p *store.NotificationCreateParams) { p.IdempotencyKey = "k"; p.IdempotencyTTL = time.Hour })
		b.clk.Advance(time.Hour + time.Second)
		_, res := create(t, b, func(p *store.NotificationCreateParams) { p.IdempotencyKey = "k"; p.RequestHash = "h2" })
		if res.Outcome != store.Created {
			t.Fatalf("outcome %v, want Created after expiry", res.Outcome)
		}
	})
	t.Run("SweepDeletesOnlyExpiredKeys", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		create(t, b, func(p *store.NotificationCreateParams) { p.IdempotencyKey = "old"; p.IdempotencyTTL = time.Hour })
		b.clk.Advance(30 * time.Minute)
		create(t, b, func(p *store.NotificationCreateParams) { p.IdempotencyKey = "new"; p.IdempotencyTTL = time.Hour })
		b.clk.Advance(31 * time.Minute)
		n, err := b.s.IdempotencyKeysSweep(b.ctx)
		if err != nil || n != 1 {
			t.Fatalf("swept %d (%v), want 1", n, err)
		}
		_, res := create(t, b, func(p *store.NotificationCreateParams) { p.IdempotencyKey = "new" })
		if res.Outcome != store.Replayed {
			t.Fatalf("live key: outcome %v, want Replayed", res.Outcome)
		}
	})
	t.Run("ConcurrentIdenticalRequestsCreateOne", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		const n = 50
		start := make(chan struct{})
		var wg sync.WaitGroup
		var created atomic.Int32
		responses := make([]string, n)
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := ids.New("ntf", b.clk.Now())
				<-start
				res, err := b.s.NotificationCreate(b.ctx, store.NotificationCreateParams{
					Tenant: "t1", IdempotencyKey: "same", RequestHash: "h", IdempotencyTTL: time.Hour,
					Response: []byte(id), ID: id, Recipient: "r", EventID: "e", Kind: "k",
					Lane: heraldtype.LaneTransactional, Channels: []heraldtype.Channel{heraldtype.ChannelWebhook},
				})
				errs[i] = err
				if res.Outcome == store.Created {
					created.Add(1)
				}
				responses[i] = string(res.Response)
			}()
		}
		close(start)
		wait(t, &wg, "the 50 concurrent creates returned")
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if created.Load() != 1 {
			t.Fatalf("%d requests created a notification, want 1", created.Load())
		}
		for _, r := range responses {
			if r != responses[0] {
				t.Fatalf("responses differ: %q vs %q", r, responses[0])
			}
		}
		if rows := claim(t, b, heraldtype.LaneTransactional, 100); len(rows) != 1 {
			t.Fatalf("%d outbox rows, want 1", len(rows))
		}
	})
	t.Run("DedupKeyAddsNothingTheSecondTime", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		first, _ := create(t, b, func(p *store.NotificationCreateParams) { p.IdempotencyKey = ""; p.DedupKey = "booking-1:confirm" })
		_, res := create(t, b, func(p *store.NotificationCreateParams) { p.IdempotencyKey = ""; p.DedupKey = "booking-1:confirm" })
		if res.Outcome != store.Deduplicated || res.ID != first.ID {
			t.Fatalf("got %v %q, want Deduplicated %q", res.Outcome, res.ID, first.ID)
		}
		if rows := claim(t, b, heraldtype.LaneTransactional, 100); len(rows) != 1 {
			t.Fatalf("%d outbox rows, want 1", len(rows))
		}
	})
	t.Run("DedupHitWritesNothingNotEvenTheKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		first, _ := create(t, b, func(p *store.NotificationCreateParams) { p.DedupKey = "booking-1:confirm" })
		second, res := create(t, b, func(p *store.NotificationCreateParams) { p.DedupKey = "booking-1:confirm" })
		if res.Outcome != store.Deduplicated || res.ID != first.ID {
			t.Fatalf("got %v %q, want Deduplicated %q", res.Outcome, res.ID, first.ID)
		}
		// Had the deduplicated request kept its idempotency key, this would
		// replay an answer naming a notification that was never written.
		_, res = create(t, b, func(p *store.NotificationCreateParams) {
			p.IdempotencyKey, p.DedupKey = second.IdempotencyKey, "booking-2:confirm"
		})
		if res.Outcome != store.Created {
			t.Fatalf("outcome %v, want Created: the deduplicated request kept its key", res.Outcome)
		}
	})
}

func testOutbox(t *testing.T, h Harness) {
	t.Run("ClaimReturnsTheJob", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		exp := Epoch.Add(time.Hour)
		p, _ := create(t, b, func(p *store.NotificationCreateParams) { p.ExpiresAt = &exp })
		rows := claim(t, b, heraldtype.LaneTransactional, 10)
		if len(rows) != 1 {
			t.Fatalf("claimed %d, want 1", len(rows))
		}
		j := rows[0].Job
		if j.MessageID != store.MessageID(p.ID, heraldtype.ChannelWebhook) || j.NotificationID != p.ID || j.Tenant != "t1" ||
			j.Recipient != "r1" || j.EventID != "e1" || j.Kind != "k" || j.Lane != heraldtype.LaneTransactional ||
			j.Channel != heraldtype.ChannelWebhook || j.ExpiresAt == nil || !j.ExpiresAt.Equal(exp) {
			t.Fatalf("job = %+v", j)
		}
		var params map[string]any
		if err := json.Unmarshal(j.Params, &params); err != nil || params["a"] != float64(1) {
			t.Fatalf("params %s (%v)", j.Params, err)
		}
		if rows[0].Fence.Token == 0 || rows[0].Attempts != 0 {
			t.Fatalf("fence %+v attempts %d", rows[0].Fence, rows[0].Attempts)
		}
	})
	t.Run("ClaimKnowsDeliveryAndProfile", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		create(t, b, nil)
		row := claim(t, b, heraldtype.LaneTransactional, 1)[0]
		if k := row.Known; k == nil || k.Delivery || !k.ProfileRead || k.Profile != nil {
			t.Fatalf("fresh claim known %+v, want no delivery and no profile", k)
		}
		// A delivery row and a profile appear; the lease runs out and the
		// row is claimed again: the new claim sees both.
		if _, err := b.s.DeliveryClaim(b.ctx, claimParams(row.MessageID)); err != nil {
			t.Fatal(err)
		}
		prof := store.Profile{Tenant: "t1", Recipient: "r1", Consent: map[heraldtype.Channel]bool{heraldtype.ChannelSMS: true}, TimeZone: "Asia/Seoul"}
		if err := b.s.ProfilePut(b.ctx, prof); err != nil {
			t.Fatal(err)
		}
		b.clk.Advance(2 * time.Minute)
		if n, err := b.s.OutboxReclaimExpired(b.ctx); err != nil || n != 1 {
			t.Fatalf("reclaimed %d (%v)", n, err)
		}
		again := claim(t, b, heraldtype.LaneTransactional, 1)[0]
		k := again.Known
		if k == nil || !k.Delivery || !k.ProfileRead || k.Profile == nil {
			t.Fatalf("second claim known %+v, want a delivery and a profile", k)
		}
		want, err := b.s.ProfileGet(b.ctx, "t1", "r1")
		if err != nil {
			t.Fatal(err)
		}
		got, err := store.DecodeProfile("t1", "r1", k.Profile, k.ProfileUpdatedAt)
		if err != nil || !got.Consent[heraldtype.ChannelSMS] || got.TimeZone != "Asia/Seoul" || !got.UpdatedAt.Equal(want.UpdatedAt) {
			t.Fatalf("known profile %+v (%v), stored %+v", got, err, want)
		}
		// The relay's claim reads nothing for a sender.
		create(t, b, nil)
		pub, err := b.s.OutboxClaim(b.ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "r", Limit: 1, Lease: time.Minute, Publishing: true})
		if err != nil || len(pub) != 1 || pub[0].Known != nil {
			t.Fatalf("relay claim %+v (%v), want one row without Known", pub, err)
		}
	})
	t.Run("ClaimsSayWhichRowsAreOnNoChain", func(t *testing.T) {
		t.Parallel()
		// Both claims read it: the relay's travels in the message
		// (heraldtype.Job.OffChain), so the consumer's result write need not
		// look for a chain.
		for _, publishing := range []bool{false, true} {
			b := setup(t, h)
			off, _ := create(t, b, nil)
			on := chainCreate(t, b, "r2", nil)
			rows, err := b.s.OutboxClaim(b.ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w", Limit: 10,
				Lease: time.Minute, Publishing: publishing})
			if err != nil {
				t.Fatal(err)
			}
			seen := 0
			for _, r := range rows {
				switch r.NotificationID {
				case off.ID:
					seen++
					if !r.Fence.OffChain {
						t.Errorf("publishing %v: %s, on no chain, claimed without OffChain", publishing, r.MessageID)
					}
				case on.ID:
					seen++
					if r.Fence.OffChain {
						t.Errorf("publishing %v: %s, a chain's first step, claimed OffChain", publishing, r.MessageID)
					}
				}
			}
			if seen < 2 {
				t.Fatalf("publishing %v: claimed %+v; want both notifications' rows", publishing, rows)
			}
		}
	})
	t.Run("ClaimedRowIsNotClaimedAgain", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		create(t, b, nil)
		if n := len(claim(t, b, heraldtype.LaneTransactional, 10)); n != 1 {
			t.Fatalf("first claim %d", n)
		}
		if n := len(claim(t, b, heraldtype.LaneTransactional, 10)); n != 0 {
			t.Fatalf("second claim took %d rows", n)
		}
	})
	t.Run("LanesAreSeparate", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		create(t, b, func(p *store.NotificationCreateParams) { p.Lane = heraldtype.LaneMarketing })
		if n := len(claim(t, b, heraldtype.LaneTransactional, 10)); n != 0 {
			t.Fatalf("transactional claimer took %d marketing rows", n)
		}
		if n := len(claim(t, b, heraldtype.LaneMarketing, 10)); n != 1 {
			t.Fatalf("marketing claimer took %d", n)
		}
	})
	t.Run("LimitAndOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		var want []string
		for range 5 {
			p, _ := create(t, b, nil)
			want = append(want, p.ID)
			b.clk.Advance(time.Millisecond)
		}
		rows := claim(t, b, heraldtype.LaneTransactional, 3)
		if len(rows) != 3 {
			t.Fatalf("claimed %d, want 3", len(rows))
		}
		for i, r := range rows {
			if r.NotificationID != want[i] {
				t.Fatalf("row %d is %s, want oldest first %s", i, r.NotificationID, want[i])
			}
		}
	})
	t.Run("ConcurrentClaimersTakeDisjointRows", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		for range 40 {
			create(t, b, nil)
		}
		var mu sync.Mutex
		seen := map[int64]int{}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for {
					rows, err := b.s.OutboxClaim(b.ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: fmt.Sprint("w", w), Limit: 3, Lease: time.Minute})
					if err != nil {
						t.Error(err)
						return
					}
					if len(rows) == 0 {
						return
					}
					mu.Lock()
					for _, r := range rows {
						seen[r.Fence.ID]++
					}
					mu.Unlock()
				}
			}()
		}
		close(start)
		wait(t, &wg, "the 4 claimers ran out of rows")
		if len(seen) != 40 {
			t.Fatalf("claimed %d distinct rows, want 40", len(seen))
		}
		for id, n := range seen {
			if n != 1 {
				t.Fatalf("row %d claimed %d times", id, n)
			}
		}
	})
	t.Run("SendAtDefersTheClaim", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		at := Epoch.Add(10 * time.Minute)
		create(t, b, func(p *store.NotificationCreateParams) { p.SendAt = &at })
		if n := len(claim(t, b, heraldtype.LaneTransactional, 10)); n != 0 {
			t.Fatalf("claimed %d before send_at", n)
		}
		b.clk.Advance(10 * time.Minute)
		if n := len(claim(t, b, heraldtype.LaneTransactional, 10)); n != 1 {
			t.Fatalf("claimed %d at send_at, want 1", n)
		}
	})
	t.Run("CompleteIsFenced", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		create(t, b, nil)
		row := claim(t, b, heraldtype.LaneTransactional, 1)[0]
		stale := row.Fence
		stale.Token--
		if ok, err := b.s.OutboxComplete(b.ctx, stale, heraldtype.OutboxDone, ""); err != nil || ok {
			t.Fatalf("wrong token completed the row (ok %v, err %v)", ok, err)
		}
		if ok, err := b.s.OutboxComplete(b.ctx, row.Fence, heraldtype.OutboxDone, ""); err != nil || !ok {
			t.Fatalf("owner could not complete (ok %v, err %v)", ok, err)
		}
		if ok, err := b.s.OutboxComplete(b.ctx, row.Fence, heraldtype.OutboxDone, ""); err != nil || ok {
			t.Fatalf("completed twice (ok %v, err %v)", ok, err)
		}
	})
	t.Run("WriteAfterLeaseRanOutIsRefusedEvenUntaken", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		create(t, b, nil)
		row := claim(t, b, heraldtype.LaneTransactional, 1)[0]
		b.clk.Advance(time.Minute + time.Second)
		if ok, err := b.s.OutboxComplete(b.ctx, row.Fence, heraldtype.OutboxDone, ""); err != nil || ok {
			t.Fatalf("write after the lease ran out succeeded (ok %v, err %v)", ok, err)
		}
	})
	t.Run("ExtendKeepsOnlyAHeldLease", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		create(t, b, nil)
		create(t, b, nil)
		create(t, b, nil)
		rows := claim(t, b, heraldtype.LaneTransactional, 3) // leased for a minute
		held, stale, lapsed := rows[0].Fence, rows[1].Fence, rows[2].Fence
		stale.Token--
		extend := func(lease time.Duration, fences ...store.Fence) int {
			t.Helper()
			n, err := b.s.OutboxExtend(b.ctx, fences, lease)
			if err != nil {
				t.Fatalf("OutboxExtend: %v", err)
			}
			return n
		}
		b.clk.Advance(50 * time.Second)
		if n := extend(time.Minute, held, stale); n != 1 {
			t.Fatalf("extended %d leases, want 1: a stale token holds nothing", n)
		}
		// A shorter lease never brings the end of one forward.
		if n := extend(time.Second, held); n != 1 {
			t.Fatalf("extended %d leases with a short lease, want 1", n)
		}
		// Past the first lease's end: the extended lease holds, the other
		// ran out and is refused, and the reclaim sweep takes only that one.
		b.clk.Advance(30 * time.Second)
		if n := extend(time.Minute, lapsed); n != 0 {
			t.Fatalf("extended %d leases that ran out, want 0", n)
		}
		if n, err := b.s.OutboxReclaimExpired(b.ctx); err != nil || n != 2 {
			t.Fatalf("reclaimed %d (%v), want the 2 leases not extended", n, err)
		}
		if e := entry(t, b, rows[0].NotificationID); e.OutboxState != heraldtype.OutboxClaimed {
			t.Fatalf("extended row is %s after the reclaim sweep, want CLAIMED", e.OutboxState)
		}
		if ok, err := b.s.OutboxComplete(b.ctx, held, heraldtype.OutboxDone, ""); err != nil || !ok {
			t.Fatalf("owner of the extended lease could not complete (ok %v, err %v)", ok, err)
		}
		if n := extend(time.Minute); n != 0 {
			t.Fatalf("extended %d leases of no fence", n)
		}
	})
	t.Run("StalledClaimerIsFencedAndRowIsClaimedAgain", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		create(t, b, nil)
		first := claim(t, b, heraldtype.LaneTransactional, 1)[0]
		b.clk.Advance(2 * time.Minute)
		n, err := b.s.OutboxReclaimExpired(b.ctx)
		if err != nil || n != 1 {
			t.Fatalf("reclaimed %d (%v), want 1", n, err)
		}
		if e := entry(t, b, first.NotificationID); e.OutboxState != heraldtype.OutboxPending || e.OutboxReason != heraldtype.ReasonClaimExpired {
			t.Fatalf("after reclaim: %+v", e)
		}
		second := claim(t, b, heraldtype.LaneTransactional, 1)
		if len(second) != 1 || second[0].Fence.Token == first.Fence.Token {
			t.Fatalf("second claim %+v", second)
		}
		// The first claimer wakes up and tries to settle with its old token.
		if ok, err := b.s.OutboxComplete(b.ctx, first.Fence, heraldtype.OutboxDone, ""); err != nil || ok {
			t.Fatalf("stalled claimer's write (ok %v, err %v), want refused", ok, err)
		}
		if ok, err := b.s.OutboxRetry(b.ctx, store.OutboxRetryParams{Fence: first.Fence}); err != nil || ok {
			t.Fatalf("stalled claimer's retry (ok %v, err %v), want refused", ok, err)
		}
		if ok, err := b.s.OutboxComplete(b.ctx, second[0].Fence, heraldtype.OutboxDone, ""); !ok || err != nil {
			t.Fatalf("new owner could not complete (ok %v, err %v)", ok, err)
		}
	})
	t.Run("RetryDelaysAndCountsFailures", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		create(t, b, nil)
		row := claim(t, b, heraldtype.LaneTransactional, 1)[0]
		ok, err := b.s.OutboxRetry(b.ctx, store.OutboxRetryParams{Fence: row.Fence, Delay: time.Minute, Reason: "X", Failed: true})
		if err != nil || !ok {
			t.Fatalf("retry: ok %v err %v", ok, err)
		}
		if n := len(claim(t, b, heraldtype.LaneTransactional, 1)); n != 0 {
			t.Fatal("claimed before the delay passed")
		}
		b.clk.Advance(time.Minute)
		again := claim(t, b, heraldtype.LaneTransactional, 1)
		if len(again) != 1 || again[0].Attempts != 1 {
			t.Fatalf("after delay: %+v", again)
		}
		// A retry the sender scheduled does not count as a dispatch failure.
		if ok, err := b.s.OutboxRetry(b.ctx, store.OutboxRetryParams{Fence: again[0].Fence, Delay: 0, Reason: "RETRY_WAIT"}); err != nil || !ok {
			t.Fatalf("uncounted retry: ok %v err %v", ok, err)
		}
		third := claim(t, b, heraldtype.LaneTransactional, 1)
		if len(third) != 1 || third[0].Attempts != 1 {
			t.Fatalf("after uncounted retry: %+v", third)
		}
	})
	t.Run("ExpiredRowsAreNotClaimedAndBecomeExpired", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		exp := Epoch.Add(time.Minute)
		p, _ := create(t, b, func(p *store.NotificationCreateParams) { p.ExpiresAt = &exp })
		b.clk.Advance(time.Minute)
		if n := len(claim(t, b, heraldtype.LaneTransactional, 1)); n != 0 {
			t.Fatal("claimed an expired row")
		}
		expired, err := b.s.OutboxExpire(b.ctx, 1000)
		if err != nil || len(expired) != 1 || expired[0].MessageID != store.MessageID(p.ID, heraldtype.ChannelWebhook) {
			t.Fatalf("expired %+v (%v)", expired, err)
		}
		if e := entry(t, b, p.ID); e.OutboxState != heraldtype.OutboxExpired {
			t.Fatalf("state %s", e.OutboxState)
		}
	})
	t.Run("BacklogCountsDueRowsPerLane", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		later := Epoch.Add(time.Hour)
		create(t, b, nil)
		create(t, b, nil)
		create(t, b, func(p *store.NotificationCreateParams) { p.SendAt = &later })
		create(t, b, func(p *store.NotificationCreateParams) { p.Lane = heraldtype.LaneAlert })
		got, err := b.s.OutboxBacklog(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got[heraldtype.LaneTransactional] != 2 || got[heraldtype.LaneAlert] != 1 || got[heraldtype.LaneMarketing] != 0 {
			t.Fatalf("backlog %v", got)
		}
	})
	t.Run("RelayClaimsArePublishingAndMarkPublishedIsFenced", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		for range 3 {
			create(t, b, nil)
		}
		rows, err := b.s.OutboxClaim(b.ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "relay", Limit: 10, Lease: time.Minute, Publishing: true})
		if err != nil || len(rows) != 3 {
			t.Fatalf("relay claimed %d (%v)", len(rows), err)
		}
		if e := entry(t, b, rows[0].NotificationID); e.OutboxState != heraldtype.OutboxPublishing {
			t.Fatalf("state %s, want PUBLISHING", e.OutboxState)
		}
		if n := len(claim(t, b, heraldtype.LaneTransactional, 10)); n != 0 {
			t.Fatalf("a claimer took %d rows the relay holds", n)
		}
		stale := rows[1].Fence
		stale.Token--
		n, err := b.s.OutboxMarkPublished(b.ctx, []store.Fence{rows[0].Fence, stale})
		if err != nil || n != 1 {
			t.Fatalf("marked %d (%v), want only the fenced-in row", n, err)
		}
		if e := entry(t, b, rows[0].NotificationID); e.OutboxState != heraldtype.OutboxPublished {
			t.Fatalf("state %s, want PUBLISHED", e.OutboxState)
		}
		if n, err := b.s.OutboxMarkPublished(b.ctx, []store.Fence{rows[0].Fence}); err != nil || n != 0 {
			t.Fatalf("marked a published row again: %d (%v), want 0", n, err)
		}
		// A nacked publish goes back to PENDING through the same fence.
		if ok, err := b.s.OutboxRetry(b.ctx, store.OutboxRetryParams{Fence: rows[1].Fence, Delay: time.Minute, Reason: "NACK", Failed: true}); !ok || err != nil {
			t.Fatalf("retry after nack: %v %v", ok, err)
		}
		// A relay that stalled past its lease marks nothing; the row is reclaimed.
		b.clk.Advance(2 * time.Minute)
		if n, err := b.s.OutboxMarkPublished(b.ctx, []store.Fence{rows[2].Fence}); err != nil || n != 0 {
			t.Fatalf("marked %d (%v) after the lease ran out, want 0", n, err)
		}
		if n, err := b.s.OutboxReclaimExpired(b.ctx); err != nil || n != 1 {
			t.Fatalf("reclaimed %d (%v), want 1", n, err)
		}
		if n := len(claim(t, b, heraldtype.LaneTransactional, 10)); n != 2 {
			t.Fatalf("after reclaim and backoff %d rows are due, want 2", n)
		}
	})
	t.Run("CreateWakesTheLane", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		create(t, b, func(p *store.NotificationCreateParams) { p.Lane = heraldtype.LaneAlert })
		select {
		case <-b.s.Wakeups().C(heraldtype.LaneAlert):
		case <-time.After(10 * time.Second):
			t.Fatal("no wake-up for the alert lane")
		}
	})
}

func claimParams(id string) store.DeliveryClaimParams {
	return store.DeliveryClaimParams{MessageID: id, NotificationID: "n", Tenant: "t1", Channel: heraldtype.ChannelSMS, Provider: "p", Owner: "w"}
}

// decideOn runs DeliveryDecide for id (of notification "n", tenant t1, on
// sms) and reports whether it was written; an error fails the test.
func decideOn(t *testing.T, b bundle, id string, state heraldtype.DeliveryState, reason string) bool {
	t.Helper()
	ok, err := b.s.DeliveryDecide(b.ctx, store.DeliveryDecideParams{MessageID: id, NotificationID: "n", Tenant: "t1", Channel: heraldtype.ChannelSMS, State: state, Reason: reason})
	if err != nil {
		t.Fatalf("DeliveryDecide %s %s: %v", id, state, err)
	}
	return ok
}

// waitingRetry claims id (claimParams) and records its first attempt as a
// definite non-send: RETRY_WAIT, due in a minute.
func waitingRetry(t *testing.T, b bundle, id string) {
	t.Helper()
	if res := claimDelivery(t, b, claimParams(id)); !res.Claimed {
		t.Fatalf("claim %s: %+v", id, res)
	}
	if !record(t, b, id, 1, heraldtype.DeliveryRetryWait, time.Minute) {
		t.Fatalf("record RETRY_WAIT for %s", id)
	}
}

func record(t *testing.T, b bundle, id string, attempt int, state heraldtype.DeliveryState, delay time.Duration) bool {
	t.Helper()
	res, err := b.s.DeliveryRecord(b.ctx, store.DeliveryRecordParams{
		MessageID: id, Attempt: attempt, State: state, RetryDelay: delay, Owner: "w", Class: "x", StartedAt: b.clk.Now(),
	})
	if err != nil {
		t.Fatalf("DeliveryRecord: %v", err)
	}
	if res.OutboxSettled {
		t.Fatal("settled an outbox row it was not given")
	}
	return res.Recorded
}

func testDeliveries(t *testing.T, h Harness) {
	t.Run("OnlyOneConcurrentClaimWins", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		const n = 20
		var wins atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				res, err := b.s.DeliveryClaim(b.ctx, claimParams("m1"))
				if err != nil {
					t.Error(err)
					return
				}
				if res.Claimed {
					wins.Add(1)
				} else if res.Current == nil || res.Current.State != heraldtype.DeliverySending {
					t.Errorf("loser saw %+v", res.Current)
				}
			}()
		}
		close(start)
		wait(t, &wg, "the 20 concurrent delivery claims returned")
		if wins.Load() != 1 {
			t.Fatalf("%d claims won, want 1", wins.Load())
		}
	})
	t.Run("RecordIsConditionalOnSending", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		res := claimDelivery(t, b, claimParams("m1"))
		if !res.Claimed || res.Attempt != 1 {
			t.Fatalf("claim %+v", res)
		}
		if record(t, b, "m1", 2, heraldtype.DeliveryProviderAccepted, 0) {
			t.Fatal("recorded with the wrong attempt")
		}
		if !record(t, b, "m1", 1, heraldtype.DeliveryProviderAccepted, 0) {
			t.Fatal("could not record the claimed attempt")
		}
		if record(t, b, "m1", 1, heraldtype.DeliveryUnknown, 0) {
			t.Fatal("overwrote a terminal result")
		}
		d, err := b.s.DeliveryGet(b.ctx, "m1")
		if err != nil || d.State != heraldtype.DeliveryProviderAccepted || d.Attempts != 1 {
			t.Fatalf("delivery %+v (%v)", d, err)
		}
		if res := claimDelivery(t, b, claimParams("m1")); res.Claimed {
			t.Fatal("claimed a finished message again")
		}
	})
	t.Run("RecordSettlesTheClaimedOutboxRow", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		// recordOn claims the job's delivery and records state with the
		// outbox row's fence, as the db transport's sender does.
		recordOn := func(row store.Claimed, attempt int, state heraldtype.DeliveryState, f store.Fence) store.RecordResult {
			t.Helper()
			if res, err := b.s.DeliveryClaim(b.ctx, store.DeliveryClaimParams{MessageID: row.MessageID, NotificationID: row.NotificationID,
				Tenant: "t1", Channel: row.Channel, Provider: "p", Owner: "w"}); err != nil || !res.Claimed || res.Attempt != attempt {
				t.Fatalf("delivery claim %+v (%v)", res, err)
			}
			res, err := b.s.DeliveryRecord(b.ctx, store.DeliveryRecordParams{MessageID: row.MessageID, Attempt: attempt, State: state,
				Reason: "R", RetryDelay: time.Second, Owner: "w", Class: "x", StartedAt: b.clk.Now(), Outbox: &f})
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		p, _ := create(t, b, nil)
		row := claim(t, b, heraldtype.LaneTransactional, 1)[0]
		// RETRY_WAIT: the row is PENDING again, due after the delay.
		if res := recordOn(row, 1, heraldtype.DeliveryRetryWait, row.Fence); !res.Recorded || !res.OutboxSettled {
			t.Fatalf("retry %+v", res)
		}
		if e := entry(t, b, p.ID); e.OutboxState != heraldtype.OutboxPending || !e.AvailableAt.Equal(b.clk.Now().Add(time.Second)) || e.OutboxReason != "R" {
			t.Fatalf("after RETRY_WAIT: %+v", e)
		}
		b.clk.Advance(time.Second)
		row = claim(t, b, heraldtype.LaneTransactional, 1)[0]
		// A stale fence settles nothing, though the result is recorded.
		stale := row.Fence
		stale.Token--
		if res := recordOn(row, 2, heraldtype.DeliveryProviderAccepted, stale); !res.Recorded || res.OutboxSettled {
			t.Fatalf("stale fence %+v", res)
		}
		if e := entry(t, b, p.ID); e.OutboxState != heraldtype.OutboxClaimed {
			t.Fatalf("stale fence moved the row: %+v", e)
		}
		// A result that is not recorded settles nothing either.
		if res, err := b.s.DeliveryRecord(b.ctx, store.DeliveryRecordParams{MessageID: row.MessageID, Attempt: 2,
			State: heraldtype.DeliveryUnknown, Owner: "w", Class: "x", StartedAt: b.clk.Now(), Outbox: &row.Fence}); err != nil || res.Recorded || res.OutboxSettled {
			t.Fatalf("second record of a settled attempt %+v (%v)", res, err)
		}
		if e := entry(t, b, p.ID); e.OutboxState != heraldtype.OutboxClaimed {
			t.Fatalf("unrecorded result moved the row: %+v", e)
		}
		// A terminal result with the live fence: DONE with its reason.
		p2, _ := create(t, b, nil)
		row2 := claim(t, b, heraldtype.LaneTransactional, 1)[0]
		if res := recordOn(row2, 1, heraldtype.DeliveryProviderAccepted, row2.Fence); !res.Recorded || !res.OutboxSettled {
			t.Fatalf("accepted %+v", res)
		}
		if e := entry(t, b, p2.ID); e.OutboxState != heraldtype.OutboxDone || e.OutboxReason != "R" {
			t.Fatalf("after PROVIDER_ACCEPTED: %+v", e)
		}
	})
	t.Run("RetryWaitIsClaimedAgainOnlyWhenDue", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		if res := claimDelivery(t, b, claimParams("m1")); !res.Claimed {
			t.Fatalf("claim %+v", res)
		}
		if !record(t, b, "m1", 1, heraldtype.DeliveryRetryWait, time.Second) {
			t.Fatal("record RETRY_WAIT")
		}
		d := delivery(t, b, "m1")
		if d.State != heraldtype.DeliveryRetryWait || d.NextAttemptAt == nil || !d.NextAttemptAt.Equal(Epoch.Add(time.Second)) {
			t.Fatalf("delivery %+v", d)
		}
		res := claimDelivery(t, b, claimParams("m1"))
		if res.Claimed || res.Current == nil || res.Current.State != heraldtype.DeliveryRetryWait {
			t.Fatalf("early claim %+v", res)
		}
		b.clk.Advance(time.Second)
		res = claimDelivery(t, b, claimParams("m1"))
		if !res.Claimed || res.Attempt != 2 {
			t.Fatalf("due claim %+v", res)
		}
		if res := claimDelivery(t, b, claimParams("m1")); res.Claimed {
			t.Fatal("a second copy claimed the retry too")
		}
	})
	t.Run("DecideNeverOverwritesAClaimOrResult", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		if !decideOn(t, b, "new", heraldtype.DeliverySuppressed, heraldtype.ReasonConsentDenied) {
			t.Fatal("could not suppress a new message")
		}
		if decideOn(t, b, "new", heraldtype.DeliveryParked, "X") {
			t.Fatal("overwrote SUPPRESSED")
		}
		if res := claimDelivery(t, b, claimParams("sending")); !res.Claimed {
			t.Fatalf("claim %+v", res)
		}
		if decideOn(t, b, "sending", heraldtype.DeliverySuppressed, "X") {
			t.Fatal("overwrote SENDING")
		}
		waitingRetry(t, b, "waiting")
		if !decideOn(t, b, "waiting", heraldtype.DeliverySuppressed, heraldtype.ReasonConsentDenied) {
			t.Fatal("could not suppress a waiting retry")
		}
		d := delivery(t, b, "waiting")
		if d.State != heraldtype.DeliverySuppressed || d.Reason != heraldtype.ReasonConsentDenied || d.Attempts != 1 {
			t.Fatalf("delivery %+v", d)
		}
	})
	t.Run("DecideNeverParksAParkedDelivery", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		// A waiting retry may be parked.
		waitingRetry(t, b, "m1")
		if !decideOn(t, b, "m1", heraldtype.DeliveryParked, heraldtype.ReasonUnknownKind) {
			t.Fatal("could not park a waiting retry")
		}
		parked := delivery(t, b, "m1")
		// A second copy that parks it again (a relay's re-publish that
		// skipped the peek) writes nothing: the row keeps its reason and time.
		b.clk.Advance(time.Minute)
		for _, reason := range []string{heraldtype.ReasonUnknownKind, heraldtype.ReasonTemplateMissing} {
			if decideOn(t, b, "m1", heraldtype.DeliveryParked, reason) {
				t.Fatalf("PARKED(%s) was written over PARKED", reason)
			}
			if d := delivery(t, b, "m1"); d.State != parked.State || d.Reason != parked.Reason || !d.UpdatedAt.Equal(parked.UpdatedAt) || d.Attempts != parked.Attempts {
				t.Fatalf("after a second park the row is %s(%s) at %s, attempts %d; want it unchanged: %s(%s) at %s, attempts %d",
					d.State, d.Reason, d.UpdatedAt, d.Attempts, parked.State, parked.Reason, parked.UpdatedAt, parked.Attempts)
			}
		}
		// A parked message may still be suppressed (a cancel, a discard).
		if !decideOn(t, b, "m1", heraldtype.DeliverySuppressed, heraldtype.ReasonCancelled) {
			t.Fatal("could not suppress a parked message")
		}
		if d := delivery(t, b, "m1"); d.State != heraldtype.DeliverySuppressed || d.Reason != heraldtype.ReasonCancelled {
			t.Fatalf("delivery %s(%s), want SUPPRESSED(CANCELLED)", d.State, d.Reason)
		}
	})
	t.Run("StaleSendingBecomesUnknown", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		n, _ := create(t, b, func(p *store.NotificationCreateParams) { p.Lane = heraldtype.LaneAlert })
		for _, id := range []string{"old", "young"} {
			p := claimParams(id)
			p.Tenant, p.NotificationID, p.Channel = "tenant-of-"+id, n.ID, heraldtype.ChannelPush
			if res := claimDelivery(t, b, p); !res.Claimed {
				t.Fatalf("claim %s: %+v", id, res)
			}
			if id == "old" {
				b.clk.Advance(9 * time.Minute)
			}
		}
		b.clk.Advance(time.Minute + time.Second)
		// Each turned claim is returned with its notification's lane and
		// its channel, once: a second sweep returns nothing more.
		want := store.StaleClaim{MessageID: "old", Tenant: "tenant-of-old", Lane: heraldtype.LaneAlert, Channel: heraldtype.ChannelPush}
		for i, wantN := range []int{1, 0} {
			stale, err := b.s.DeliverySweepStale(b.ctx, 10*time.Minute)
			if err != nil || len(stale) != wantN || (wantN == 1 && stale[0] != want) {
				t.Fatalf("sweep %d: %+v (%v), want %d like %+v", i+1, stale, err, wantN, want)
			}
		}
		d := delivery(t, b, "old")
		if d.State != heraldtype.DeliveryUnknown || d.Reason != heraldtype.ReasonStaleClaim {
			t.Fatalf("old = %+v", d)
		}
		if d := delivery(t, b, "young"); d.State != heraldtype.DeliverySending {
			t.Fatalf("young = %+v", d)
		}
		// The crashed sender's late result is refused.
		if record(t, b, "old", 1, heraldtype.DeliveryProviderAccepted, 0) {
			t.Fatal("late record overwrote UNKNOWN")
		}
		// The claim's attempt is logged, whatever became of its call: the
		// one trace a crash between the claim and the result leaves.
		log, err := b.s.AttemptList(b.ctx, []string{"old", "young"})
		claimed := b.clk.Now().Add(-10*time.Minute - time.Second)
		if err != nil || len(log) != 1 || log[0].MessageID != "old" || log[0].Attempt != 1 || log[0].Class != "unknown" ||
			log[0].Reason != heraldtype.ReasonStaleClaim || !log[0].StartedAt.Equal(claimed) || log[0].Duration != 10*time.Minute+time.Second {
			t.Fatalf("attempt log %+v (%v); want old's attempt 1, unknown STALE_CLAIM, from its claim at %s to the sweep", log, err, claimed)
		}
	})
	t.Run("GetMissingIsNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		if _, err := b.s.DeliveryGet(b.ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("ViewJoinsTheDelivery", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		p, _ := create(t, b, nil)
		row := claim(t, b, heraldtype.LaneTransactional, 1)[0]
		if res := claimDelivery(t, b, store.DeliveryClaimParams{MessageID: row.MessageID, NotificationID: p.ID, Tenant: "t1", Channel: row.Channel, Provider: "p", Owner: "w"}); !res.Claimed {
			t.Fatalf("claim %+v", res)
		}
		if !record(t, b, row.MessageID, 1, heraldtype.DeliveryProviderAccepted, 0) {
			t.Fatal("record PROVIDER_ACCEPTED")
		}
		d := entry(t, b, p.ID).Delivery
		if d == nil || d.State != heraldtype.DeliveryProviderAccepted || d.Attempts != 1 || d.Provider != "p" {
			t.Fatalf("view delivery %+v", d)
		}
	})
}

func testProfiles(t *testing.T, h Harness) {
	t.Run("PutThenGet", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		if _, err := b.s.ProfileGet(b.ctx, "t1", "r1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("missing profile: %v", err)
		}
		p := store.Profile{Tenant: "t1", Recipient: "r1",
			Addresses: map[heraldtype.Channel]string{heraldtype.ChannelSMS: "+821000000000"},
			Consent:   map[heraldtype.Channel]bool{heraldtype.ChannelSMS: true}, Language: "ko", TimeZone: "Asia/Seoul"}
		if err := b.s.ProfilePut(b.ctx, p); err != nil {
			t.Fatal(err)
		}
		got, err := b.s.ProfileGet(b.ctx, "t1", "r1")
		if err != nil || got.Addresses[heraldtype.ChannelSMS] != "+821000000000" || !got.Consent[heraldtype.ChannelSMS] || got.TimeZone != "Asia/Seoul" {
			t.Fatalf("profile %+v (%v)", got, err)
		}
		if _, err := b.s.ProfileGet(b.ctx, "t2", "r1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatal("profile leaked to another tenant")
		}
		p.Consent[heraldtype.ChannelSMS] = false
		if err := b.s.ProfilePut(b.ctx, p); err != nil {
			t.Fatal(err)
		}
		if got, err := b.s.ProfileGet(b.ctx, "t1", "r1"); err != nil || got.Consent[heraldtype.ChannelSMS] {
			t.Fatalf("consent withdrawal not stored: %+v (%v)", got, err)
		}
	})
}

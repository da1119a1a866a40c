package sqlite_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testdb"
	"github.com/heraldhq/herald/store"
)

// Rows written PENDING and due more than store.DeferHorizon after their
// write are written deferred, out of the claim's index (store/promote.go).
// The conformance suite checks what the store interface shows of it (a row
// is claimed once due, not before); these check the flag the rows carry.

// deferredRows opens a store on a fake clock at t0 and returns it with a
// read of a message's deferred flag (-1: no row).
func deferredRows(t *testing.T, t0 time.Time) (*clock.Fake, *testdb.DB, func(message string) int) {
	t.Helper()
	clk := clock.NewFake(t0)
	db := testdb.Open(t, "sqlite", clk)
	return clk, db, func(message string) int {
		t.Helper()
		return db.Count(t, `SELECT coalesce((SELECT deferred FROM outbox WHERE message_id = '`+message+`'), -1)`)
	}
}

// createDue creates notification id of lane, due after (none for 0), on
// channels (a fallback chain with chain).
func createDue(t *testing.T, s store.Store, id string, lane heraldtype.Lane, after time.Duration, now time.Time, chain bool,
	channels ...heraldtype.Channel) {
	t.Helper()
	var sendAt *time.Time
	if after != 0 {
		at := now.Add(after)
		sendAt = &at
	}
	_, err := s.NotificationCreate(context.Background(), store.NotificationCreateParams{
		Tenant: "t1", IdempotencyKey: "key-" + id, RequestHash: "h", IdempotencyTTL: time.Hour, Response: []byte(`{}`),
		ID: id, Recipient: "r1", EventID: "e-" + id, Kind: "k", Lane: lane, Params: json.RawMessage(`{}`),
		Channels: channels, Fallback: chain, SendAt: sendAt,
	})
	if err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
}

// claimed claims lane's due rows and returns their message ids, sorted.
func claimed(t *testing.T, s store.Store, lane heraldtype.Lane, publishing bool) ([]string, []store.Claimed) {
	t.Helper()
	rows, err := s.OutboxClaim(context.Background(), store.OutboxClaimParams{Lane: lane, Owner: "w", Limit: 100, Lease: time.Hour,
		Publishing: publishing})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.MessageID
	}
	slices.Sort(ids)
	return ids, rows
}

// TestRowsDueBeyondTheHorizonAreWrittenDeferred: intake, a fallback
// chain's first step, a campaign's fan-out and a reconciliation's
// recreate write a row due beyond the horizon deferred, and one due
// within it (or a chain's WAITING step) not; the claim does not take a
// deferred row before it is due, promotes it within the horizon of its
// time, and claims it once due. A re-drive of a row ended while deferred
// puts it back in the claim's index.
func TestRowsDueBeyondTheHorizonAreWrittenDeferred(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	clk, db, deferred := deferredRows(t, t0)
	s := db.Store
	tx := heraldtype.LaneTransactional
	if _, _, err := s.DevicePut(ctx, store.Device{Tenant: "t1", Recipient: "r1", DeviceID: "d1", Token: "tok", Platform: store.PlatformFCM,
		Active: true}); err != nil {
		t.Fatal(err)
	}
	createDue(t, s, "ntf_later", tx, time.Hour, t0, false, heraldtype.ChannelWebhook)
	createDue(t, s, "ntf_horizon", tx, store.DeferHorizon, t0, false, heraldtype.ChannelWebhook)
	createDue(t, s, "ntf_soon", tx, 4*time.Minute, t0, false, heraldtype.ChannelWebhook)
	createDue(t, s, "ntf_now", tx, 0, t0, false, heraldtype.ChannelWebhook)
	// An eager chain (push after the first step): its WAITING push row
	// is written at intake, and is never deferred (its release makes it
	// due at once).
	createDue(t, s, "ntf_chain", tx, time.Hour, t0, true, heraldtype.ChannelWebhook, heraldtype.ChannelPush)
	createDue(t, s, "ntf_recreate", tx, time.Hour, t0, false, heraldtype.ChannelWebhook)
	createDue(t, s, "ntf_redrive", tx, time.Hour, t0, false, heraldtype.ChannelWebhook)
	for _, c := range []struct {
		id    string
		after time.Duration
	}{{"cmp_later", time.Hour}, {"cmp_now", 0}} {
		var sendAt *time.Time
		if c.after != 0 {
			at := t0.Add(c.after)
			sendAt = &at
		}
		cs := s.(store.Campaigns)
		if _, err := cs.CampaignCreate(ctx, store.CampaignCreateParams{ID: c.id, Tenant: "t1", IdempotencyKey: c.id, RequestHash: "h",
			Kind: "k", Lane: tx, Channels: []heraldtype.Channel{heraldtype.ChannelWebhook}, SendAt: sendAt,
			Recipients: []store.CampaignRecipient{{Recipient: "r2", NotificationID: "ntf_" + c.id}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CampaignStart(ctx, "t1", c.id); err != nil {
			t.Fatal(err)
		}
		if res, err := cs.CampaignFanOut(ctx, store.CampaignFanOutParams{Tenant: "t1", ID: c.id, Limit: 10}); err != nil || res.Outbox != 1 {
			t.Fatalf("fan out %s: %+v, %v; want one outbox row", c.id, res, err)
		}
	}
	db.Exec(t, `DELETE FROM outbox WHERE notification_id = 'ntf_recreate'`)
	if n, err := s.(store.Reconciler).ReconcileOutboxRecreate(ctx, store.ReconcileOutboxRecreateParams{NotificationID: "ntf_recreate",
		Channels: []heraldtype.Channel{heraldtype.ChannelWebhook}}); err != nil || n != 1 {
		t.Fatalf("recreate: %d rows, %v; want 1", n, err)
	}
	for message, want := range map[string]int{
		"ntf_later.webhook": 1, "ntf_horizon.webhook": 0, "ntf_soon.webhook": 0, "ntf_now.webhook": 0,
		"ntf_chain.webhook": 1, "ntf_chain.push.d1": 0, "ntf_cmp_later.webhook": 1, "ntf_cmp_now.webhook": 0,
		"ntf_recreate.webhook": 1, "ntf_redrive.webhook": 1,
	} {
		if got := deferred(message); got != want {
			t.Errorf("%s written with deferred %d, want %d", message, got, want)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// A row ended while deferred (here by hand, as a discard or a cancel
	// would) and re-driven is due now, in the claim's index.
	db.Exec(t, `UPDATE outbox SET state = 'DONE' WHERE message_id = 'ntf_redrive.webhook'`)
	if moved, err := s.(store.Reconciler).ReconcileOutboxRedrive(ctx, []store.ReconcileFinding{{NotificationID: "ntf_redrive",
		MessageID: "ntf_redrive.webhook"}}); err != nil || len(moved) != 1 {
		t.Fatalf("re-drive: %v, %v; want the row moved", moved, err)
	}
	if d := deferred("ntf_redrive.webhook"); d != 0 {
		t.Errorf("a re-driven row is written with deferred %d, want 0", d)
	}

	step := func(at time.Duration, want ...string) {
		t.Helper()
		clk.Advance(t0.Add(at).Sub(clk.Now()))
		if got, _ := claimed(t, s, tx, false); !slices.Equal(got, want) {
			t.Fatalf("claim at +%s: %v, want %v", at, got, want)
		}
	}
	step(0, "ntf_cmp_now.webhook", "ntf_now.webhook", "ntf_redrive.webhook")
	step(4*time.Minute, "ntf_soon.webhook")
	step(store.DeferHorizon, "ntf_horizon.webhook")
	step(time.Hour - store.DeferHorizon - store.PromoteEvery - time.Second) // before the horizon of the rows due at +1h
	for _, m := range []string{"ntf_later.webhook", "ntf_chain.webhook", "ntf_cmp_later.webhook", "ntf_recreate.webhook"} {
		if d := deferred(m); d != 1 {
			t.Fatalf("%s promoted before it fell due within the horizon (deferred %d)", m, d)
		}
	}
	step(time.Hour - store.DeferHorizon + time.Second) // the claim promotes them, and claims none
	for _, m := range []string{"ntf_later.webhook", "ntf_chain.webhook", "ntf_cmp_later.webhook", "ntf_recreate.webhook"} {
		if d := deferred(m); d != 0 {
			t.Fatalf("%s not promoted by a claim within the horizon of its time (deferred %d)", m, d)
		}
	}
	step(time.Hour, "ntf_chain.webhook", "ntf_cmp_later.webhook", "ntf_later.webhook", "ntf_recreate.webhook")
}

// TestRetriesAndDeferralsBeyondTheHorizonAreDeferred: the db transport's
// retry and a publication's deferral write the row deferred when its delay
// passes the horizon, and not when it does not.
func TestRetriesAndDeferralsBeyondTheHorizonAreDeferred(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	_, db, deferred := deferredRows(t, t0)
	s := db.Store
	for _, id := range []string{"ntf_retry_long", "ntf_retry_short"} {
		createDue(t, s, id, heraldtype.LaneTransactional, 0, t0, false, heraldtype.ChannelWebhook)
	}
	for _, id := range []string{"ntf_defer_long", "ntf_defer_short"} {
		createDue(t, s, id, heraldtype.LaneMarketing, 0, t0, false, heraldtype.ChannelWebhook)
	}
	delay := map[string]time.Duration{"ntf_retry_long": time.Hour, "ntf_retry_short": time.Minute,
		"ntf_defer_long": 11 * time.Hour, "ntf_defer_short": store.DeferHorizon}
	_, rows := claimed(t, s, heraldtype.LaneTransactional, false)
	for _, r := range rows {
		if ok, err := s.OutboxRetry(ctx, store.OutboxRetryParams{Fence: r.Fence, Delay: delay[r.NotificationID], Reason: "r"}); err != nil || !ok {
			t.Fatalf("retry %s: %v, %v", r.MessageID, ok, err)
		}
	}
	_, rows = claimed(t, s, heraldtype.LaneMarketing, true)
	fences := make([]store.Fence, len(rows))
	for i, r := range rows {
		fences[i] = r.Fence
	}
	if n, err := s.OutboxMarkPublished(ctx, fences); err != nil || n != len(rows) {
		t.Fatalf("mark published: %d, %v", n, err)
	}
	for _, r := range rows {
		res, err := s.(store.Deferrals).OutboxDefer(ctx, store.OutboxDeferParams{Fence: r.Fence, Delay: delay[r.NotificationID], Reason: "QUIET_HOURS"})
		if err != nil || !res.Deferred {
			t.Fatalf("defer %s: %+v, %v", r.MessageID, res, err)
		}
	}
	if len(delay) != 4 || db.Count(t, `SELECT count(*) FROM outbox WHERE state = 'PENDING'`) != 4 {
		t.Fatal("the four rows are not back PENDING")
	}
	for id, d := range delay {
		want := 0
		if d > store.DeferHorizon {
			want = 1
		}
		if got := deferred(id + ".webhook"); got != want {
			t.Errorf("%s, put back %s ahead, has deferred %d, want %d", id, d, got, want)
		}
	}
}

// TestTheBacklogCountsDueDeferredRows: a deferred row whose promotion has
// not come (no claim of its lane ran) is counted in the lane's backlog
// once due, beside the due rows in the claim's index; one not yet due is
// not.
func TestTheBacklogCountsDueDeferredRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	clk, db, deferred := deferredRows(t, t0)
	s := db.Store
	mk := heraldtype.LaneMarketing
	createDue(t, s, "ntf_later", mk, time.Hour, t0, false, heraldtype.ChannelWebhook, heraldtype.ChannelSMS)
	createDue(t, s, "ntf_tomorrow", mk, 24*time.Hour, t0, false, heraldtype.ChannelWebhook)
	createDue(t, s, "ntf_soon", mk, time.Minute, t0, false, heraldtype.ChannelWebhook)
	createDue(t, s, "ntf_now", heraldtype.LaneTransactional, 0, t0, false, heraldtype.ChannelWebhook)
	backlog := func() map[heraldtype.Lane]int {
		t.Helper()
		b, err := s.OutboxBacklog(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if b := backlog(); len(b) != 1 || b[heraldtype.LaneTransactional] != 1 {
		t.Fatalf("backlog at first: %v, want transactional 1", b)
	}
	clk.Advance(2 * time.Hour)
	if deferred("ntf_later.webhook") != 1 || deferred("ntf_later.sms") != 1 {
		t.Fatal("the rows due in an hour are not deferred")
	}
	if b := backlog(); len(b) != 2 || b[mk] != 3 || b[heraldtype.LaneTransactional] != 1 {
		t.Fatalf("backlog two hours on, nothing promoted: %v, want marketing 3 (two deferred), transactional 1", b)
	}
	// The first claim after them promotes them and claims them.
	if got, _ := claimed(t, s, mk, false); !slices.Equal(got, []string{"ntf_later.sms", "ntf_later.webhook", "ntf_soon.webhook"}) {
		t.Fatalf("claim two hours on: %v", got)
	}
	if b := backlog(); len(b) != 1 || b[heraldtype.LaneTransactional] != 1 {
		t.Fatalf("backlog after the claim: %v, want transactional 1", b)
	}
}

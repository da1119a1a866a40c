package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/internal/claimbench"
	"github.com/heraldhq/herald/store/storetest"
)

// Rows due beyond the horizon cost the claim nothing, however many
// (tenant, scope) pairs they are spread over: the claim's loose scan
// probes only the pairs with rows in outbox_fair, and deferred rows are
// not there (store/promote.go). Before, 2,000 clinics with tomorrow's
// reminders made every claim probe 2,000 pairs (30 ms a claim of 32 at
// 5,000, against 2.3 ms with none).
func TestTomorrowsRowsOfManyScopesAreNotProbedByTheClaim(t *testing.T) {
	t.Parallel()
	const scopes = 2000
	// 100 due rows of the scope "due", and a row due tomorrow in each of
	// 2,000 other scopes, written as herald writes such a row.
	_, conn := planConn(t, clinicsBesideTomorrow(100, scopes)...)
	ctx := context.Background()
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE deferred`).Scan(&n); err != nil || n != scopes {
		t.Fatalf("%d rows deferred (%v), want %d", n, err, scopes)
	}
	plan, raw := analyzeClaim(t, conn, "transactional", 32, clinicsDay)
	groups := plan.find(func(n planNode) bool { return n.Type == "Recursive Union" })
	if len(groups) != 1 || groups[0].Rows != 1 {
		t.Fatalf("the claim's loose scan found %v pairs, want the one with due rows:\n%s", groups, raw)
	}
	// Nor does the backlog's count read them: its deferred part is a range
	// of outbox_deferred up to now, lane by lane.
	if err := conn.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+qOutboxBacklog, clinicsDay, []string{"transactional", "marketing"}).Scan(&raw); err != nil {
		t.Fatalf("explain the backlog: %v", err)
	}
	var out []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out) != 1 {
		t.Fatalf("read the plan: %v", err)
	}
	reads := out[0].Plan.find(func(n planNode) bool { return n.Index == "outbox_deferred" })
	if len(reads) != 1 || !strings.Contains(reads[0].Cond, "available_at <=") || reads[0].Rows != 0 {
		t.Fatalf("the backlog does not count the deferred rows by a range of outbox_deferred up to now:\n%s", raw)
	}
}

// Each path that writes a PENDING row writes it deferred exactly when it
// is due more than store.DeferHorizon after the write: intake (single and
// merged statements), the Go API's two statements, the campaign fan-out,
// and a retry or a deferral (OutboxRetry, OutboxDefer); a row due within
// the horizon is not, nor a retry due soon.
func TestRowsDueBeyondTheHorizonAreWrittenDeferred(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC))
	s := setup(t, "", Options{Clock: clk, PipelineWorkers: 1}) // one worker, held below to merge
	far, near := clk.Now().Add(store.DeferHorizon+time.Second), clk.Now().Add(store.DeferHorizon-time.Second)
	deferred := func(id string) bool {
		t.Helper()
		var n, d int
		if err := s.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE deferred) FROM outbox WHERE notification_id = $1`, id).
			Scan(&n, &d); err != nil || n == 0 || d != 0 && d != n {
			t.Fatalf("%s: %d rows, %d deferred (%v)", id, n, d, err)
		}
		return d > 0
	}
	want := func(what, id string, w bool) {
		t.Helper()
		if got := deferred(id); got != w {
			t.Errorf("%s: deferred %v, want %v", what, got, w)
		}
	}
	at := func(when *time.Time) func(p *store.NotificationCreateParams) {
		return func(p *store.NotificationCreateParams) { p.SendAt = when }
	}

	// Intake, one create at a time.
	for _, c := range []struct {
		name string
		when *time.Time
		w    bool
	}{{"intake, due beyond the horizon", &far, true}, {"intake, due within it", &near, false}, {"intake, due now", nil, false}} {
		p := params(at(c.when))
		mustCreate(t, s, p)
		want(c.name, p.ID, c.w)
		if c.when == nil {
			claimOf(t, s, p.ID, false) // out of the way of the claims below
		}
	}
	// Intake, merged: two creates held in one pipeline batch.
	merged := []store.NotificationCreateParams{params(at(&far)), params(at(&near))}
	var mu sync.Mutex
	var sizes []int
	s.pipe.merged = func(n int) { mu.Lock(); sizes = append(sizes, n); mu.Unlock() }
	queued, release := hold(t, s.pipe, s.pool, 4344)
	done := make(chan error, len(merged))
	for _, p := range merged {
		go func() { _, err := s.NotificationCreate(ctx, p); done <- err }()
		storetest.Receive(t, queued, "a create was queued")
	}
	release()
	for range merged {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	if len(sizes) == 0 || sizes[0] != 2 {
		t.Fatalf("merged statements stood for %v creates, want one for 2", sizes)
	}
	mu.Unlock()
	want("merged intake, due beyond the horizon", merged[0].ID, true)
	want("merged intake, due within it", merged[1].ID, false)

	// The Go API: qEnqueue (with push) and qEnqueuePlain. Their rows are
	// written at the database's time, not the store's clock.
	realFar, realNear := time.Now().Add(store.DeferHorizon+time.Minute), time.Now().Add(store.DeferHorizon-time.Minute)
	for _, c := range []struct {
		name     string
		channels []heraldtype.Channel
	}{{"Go API", []heraldtype.Channel{heraldtype.ChannelSMS, heraldtype.ChannelPush}}, {"Go API, plain", []heraldtype.Channel{heraldtype.ChannelSMS}}} {
		for _, when := range []*time.Time{&realFar, &realNear} {
			p := params(func(p *store.NotificationCreateParams) { p.SendAt, p.Channels, p.IdempotencyKey = when, c.channels, "" })
			tx, err := s.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := CreateTx(ctx, tx, p); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			want(fmt.Sprintf("%s, due at %s", c.name, when.Format(time.TimeOnly)), p.ID, when == &realFar)
		}
	}

	// The campaign fan-out.
	for _, when := range []*time.Time{&far, &near} {
		id, nid := ids.New("cmp", clk.Now()), ids.New("ntf", clk.Now())
		if _, err := s.CampaignCreate(ctx, store.CampaignCreateParams{ID: id, Tenant: "t1", IdempotencyKey: id, RequestHash: "h", Kind: "coupon",
			Lane: heraldtype.LaneMarketing, Channels: []heraldtype.Channel{heraldtype.ChannelWebhook}, Params: []byte(`{}`), SendAt: when,
			Recipients: []store.CampaignRecipient{{Recipient: "r1", NotificationID: nid}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CampaignStart(ctx, "t1", id); err != nil {
			t.Fatal(err)
		}
		if res, err := s.CampaignFanOut(ctx, store.CampaignFanOutParams{Tenant: "t1", ID: id, Limit: 10}); err != nil || res.Outbox != 1 {
			t.Fatalf("fan-out: %+v, %v", res, err)
		}
		want("campaign fan-out, due at "+when.Format(time.TimeOnly), nid, when == &far)
	}

	// A retry or a deferral of a claimed row, long and short.
	for _, delay := range []time.Duration{time.Hour, time.Minute} {
		p := params(nil)
		mustCreate(t, s, p)
		rows := claimOf(t, s, p.ID, false)
		if ok, err := s.OutboxRetry(ctx, store.OutboxRetryParams{Fence: rows.Fence, Delay: delay, Reason: "QUIET_HOURS"}); err != nil || !ok {
			t.Fatalf("retry: %v %v", ok, err)
		}
		want("a retry in "+delay.String(), p.ID, delay > store.DeferHorizon)

		p = params(nil)
		mustCreate(t, s, p)
		rows = claimOf(t, s, p.ID, true)
		if n, err := s.OutboxMarkPublished(ctx, []store.Fence{rows.Fence}); err != nil || n != 1 {
			t.Fatalf("mark published: %d %v", n, err)
		}
		if _, err := s.OutboxDefer(ctx, store.OutboxDeferParams{Fence: rows.Fence, Delay: delay, Reason: "QUIET_HOURS"}); err != nil {
			t.Fatal(err)
		}
		want("a deferral of "+delay.String(), p.ID, delay > store.DeferHorizon)
	}

	// A provider's retry, settled by the sender with its result (the db
	// transport's usual path): alone (qDeliveryRecordOffChain) and merged
	// (qDeliveryRecordOffChainMany), an hour and a minute on.
	claimDelivery := func(row store.Claimed) {
		t.Helper()
		if res, err := s.DeliveryClaim(ctx, store.DeliveryClaimParams{MessageID: row.MessageID, NotificationID: row.NotificationID,
			Tenant: "t1", Channel: row.Channel, Provider: "p", Owner: "w"}); err != nil || !res.Claimed {
			t.Fatalf("delivery claim %+v (%v)", res, err)
		}
	}
	retryIn := func(row store.Claimed, delay time.Duration) error {
		res, err := s.DeliveryRecord(ctx, store.DeliveryRecordParams{MessageID: row.MessageID, Attempt: 1, State: heraldtype.DeliveryRetryWait,
			Reason: "HTTP_503", RetryDelay: delay, Owner: "w", Class: "x", StartedAt: clk.Now(), Outbox: &row.Fence})
		if err == nil && !res.OutboxSettled {
			err = fmt.Errorf("the retry settled no outbox row: %+v", res)
		}
		return err
	}
	alone := params(nil)
	mustCreate(t, s, alone)
	row := claimOf(t, s, alone.ID, false)
	claimDelivery(row)
	if err := retryIn(row, time.Hour); err != nil {
		t.Fatal(err)
	}
	want("a provider's retry in 1h", alone.ID, true)

	pair := []store.NotificationCreateParams{params(nil), params(nil)}
	for _, p := range pair {
		mustCreate(t, s, p)
	}
	rows, err := s.OutboxClaim(ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w", Limit: 10, Lease: time.Minute})
	if err != nil || len(rows) != 2 {
		t.Fatalf("claim: %d rows (%v), want the pair", len(rows), err)
	}
	for _, r := range rows {
		claimDelivery(r)
	}
	sizes = nil
	queued, release = hold(t, s.pipe, s.pool, 4345)
	for i, r := range rows {
		go func() { done <- retryIn(r, []time.Duration{time.Hour, time.Minute}[i]) }()
		storetest.Receive(t, queued, "a result was queued")
	}
	release()
	for range rows {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	if len(sizes) == 0 || sizes[0] != 2 {
		t.Fatalf("merged statements stood for %v results, want one for 2", sizes)
	}
	mu.Unlock()
	want("a provider's retry in 1h, merged", rows[0].NotificationID, true)
	want("a provider's retry in 1m, merged", rows[1].NotificationID, false)
}

// A promotion that fails (its connection cut) fails that claim and loses
// nothing: the next claim promotes again and takes the row at its time.
// One that meets a row another promotion holds skips it (SKIP LOCKED)
// and leaves it to the next, which is due again PromoteEvery on.
func TestAPromotionCutOrSkippingAHeldRowLeavesItToTheNext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC))
	app := uniqueName("hp")
	url := testpg.Schema(t)
	s := setup(t, appURL(url, app), Options{Clock: clk})
	at := clk.Now().Add(time.Hour)
	p := params(func(p *store.NotificationCreateParams) { p.SendAt = &at })
	mustCreate(t, s, p)
	claimNow := func() ([]store.Claimed, error) {
		return s.OutboxClaim(ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w", Limit: 10, Lease: time.Minute})
	}

	// Cut: the store's sessions end as the promotion begins, the claim's
	// connection opened by a claim before (which promoted nothing).
	if rows, err := claimNow(); err != nil || len(rows) != 0 {
		t.Fatalf("first claim: %d rows (%v), want none", len(rows), err)
	}
	clk.Advance(time.Hour - time.Minute)
	s.promoting = func() { testpg.TerminateBackends(t, app) }
	if rows, err := claimNow(); err == nil {
		t.Fatalf("the claim whose promotion was cut returned %d rows and no error", len(rows))
	}
	s.promoting = nil
	if n := queryInt(t, url, `SELECT count(*) FROM outbox WHERE deferred`); n != 1 {
		t.Fatalf("%d rows deferred after the cut promotion, want the one still", n)
	}

	// Held: at the row's time, another transaction holds the row while a
	// promotion runs; it skips the row, so the claim cannot take it.
	clk.Advance(time.Minute)
	other, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM outbox WHERE notification_id = $1 FOR UPDATE`, p.ID); err != nil {
		t.Fatal(err)
	}
	if rows, err := claimNow(); err != nil || len(rows) != 0 {
		t.Fatalf("claim beside the held row: %d rows (%v), want none", len(rows), err)
	}
	if n := queryInt(t, url, `SELECT count(*) FROM outbox WHERE deferred`); n != 1 {
		t.Fatalf("%d rows deferred after the promotion met the held row, want the one still", n)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// The next promotion, PromoteEvery on, takes it.
	if rows, err := claimNow(); err != nil || len(rows) != 0 {
		t.Fatalf("claim right after: %d rows (%v), want none before the next promotion", len(rows), err)
	}
	clk.Advance(store.PromoteEvery)
	if rows, err := claimNow(); err != nil || len(rows) != 1 || rows[0].NotificationID != p.ID {
		t.Fatalf("claim at the next promotion: %d rows (%v), want the row", len(rows), err)
	}
}

// A promotion that fills its batch (store.PromoteBatch) is followed at
// the next claim by another, not PromoteEvery later: a night's backlog
// due at 08:00 is promoted claim after claim.
func TestAFullPromotionIsFollowedByAnotherAtTheNextClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 5, 1, 7, 58, 0, 0, time.UTC))
	s := setup(t, "", Options{Clock: clk})
	const n = store.PromoteBatch + 50
	for _, q := range []string{
		fmt.Sprintf(`INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at)
SELECT 'n' || g, 't1', 'r', 'e' || g, 'k', 'marketing', '{}', '2026-04-30 21:00:00+00' FROM generate_series(1, %d) g`, n),
		`INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, created_at, updated_at, deferred)
SELECT id, id || '.webhook', tenant, 'marketing', 'webhook', 'PENDING', '2026-05-01 08:00:00+00', created_at, created_at, true FROM notifications`,
	} {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	deferred := func() int {
		t.Helper()
		var d int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE deferred`).Scan(&d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	claimNow := func() {
		t.Helper()
		if rows, err := s.OutboxClaim(ctx, store.OutboxClaimParams{Lane: heraldtype.LaneMarketing, Owner: "w", Limit: 10, Lease: time.Minute}); err != nil || len(rows) != 0 {
			t.Fatalf("claim two minutes before the rows' time: %d rows (%v), want none", len(rows), err)
		}
	}
	claimNow()
	if d := deferred(); d != 50 {
		t.Fatalf("%d rows deferred after the first promotion, want the 50 past its batch", d)
	}
	claimNow() // at the same instant
	if d := deferred(); d != 0 {
		t.Fatalf("%d rows deferred after the second claim, want none: a full batch is followed at once", d)
	}
}

// claimOf claims the transactional lane's due rows (for the relay, with
// publishing) and returns notification id's; the test holds no other due
// row.
func claimOf(t *testing.T, s *Store, id string, publishing bool) store.Claimed {
	t.Helper()
	rows, err := s.OutboxClaim(context.Background(), store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w", Limit: 10,
		Lease: time.Minute, Publishing: publishing})
	if err != nil || len(rows) != 1 || rows[0].NotificationID != id {
		t.Fatalf("claim: %d rows (%v), want %s's alone", len(rows), err, id)
	}
	return rows[0]
}

// TestDeferHorizonIsTheStores: the SQL horizon is store.DeferHorizon.
func TestDeferHorizonIsTheStores(t *testing.T) {
	if want := fmt.Sprintf("interval '%d seconds'", int(store.DeferHorizon.Seconds())); qDeferHorizon != want {
		t.Fatalf("qDeferHorizon = %s, want %s (store.DeferHorizon)", qDeferHorizon, want)
	}
}

// BenchmarkClaimBesideTomorrowsScopes: one op is a claim of 32 due rows
// of one scope (each claim takes new ones) beside a row due tomorrow in
// each of 0 or 5,000 other scopes of the lane, written as herald writes
// them (deferred). Measured on the 2-core development machine: 1.6 ms at
// none, 1.9 ms at 5,000; with those rows left in the claim's index (as
// before deferred rows), 39-52 ms at 5,000.
//
//	go test ./store/postgres -run '^$' -bench ClaimBesideTomorrowsScopes -benchtime 200x
func BenchmarkClaimBesideTomorrowsScopes(b *testing.B) {
	for _, scopes := range []int{0, 5000} {
		b.Run(fmt.Sprintf("scopes=%d", scopes), func(b *testing.B) {
			claimbench.Claims(b, clinicsStore(b, clinicsBesideTomorrow(32*(b.N+5), scopes)))
		})
	}
}

package postgres

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/storetest"
)

// TestMergedResultWritesCountEachCampaignBySum: the db transport's result
// writes waiting in one pipeline batch run as one UPDATE (recordMerge), and
// a campaign's counts move once for that statement (migration 28's
// statement-level trigger), by the sum of its own sends: two campaigns and
// a notification of none in one batch, a send of each outcome, a retry
// that is no outcome yet, and a late copy of a send whose outbox row had
// failed unsent (its count moves from failed to sent).
func TestMergedResultWritesCountEachCampaignBySum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t, "", Options{PipelineWorkers: 1})
	type send struct {
		campaign int // -1: a notification of no campaign
		nid      string
		state    heraldtype.DeliveryState
	}
	var sends []send
	var campaigns []string
	for c, outcomes := range [][]heraldtype.DeliveryState{
		{heraldtype.DeliveryProviderAccepted, heraldtype.DeliveryProviderAccepted, heraldtype.DeliveryPermanentFailure, heraldtype.DeliveryProviderAccepted},
		{heraldtype.DeliveryUnknown, heraldtype.DeliveryProviderAccepted, heraldtype.DeliveryRetryWait},
	} {
		id, rs := runningCampaign(t, s, len(outcomes))
		for i, r := range rs {
			sends = append(sends, send{c, r.NotificationID, outcomes[i]})
		}
		if _, err := s.CampaignFanOut(ctx, store.CampaignFanOutParams{Tenant: "t1", ID: id, Limit: 10}); err != nil {
			t.Fatal(err)
		}
		campaigns = append(campaigns, id)
	}
	off := params(func(p *store.NotificationCreateParams) { p.Lane = heraldtype.LaneMarketing })
	mustCreate(t, s, off)
	sends = append(sends, send{-1, off.ID, heraldtype.DeliveryProviderAccepted})

	claimed, err := s.OutboxClaim(ctx, store.OutboxClaimParams{Lane: heraldtype.LaneMarketing, Owner: "d1", Limit: 20, Lease: time.Hour})
	if err != nil || len(claimed) != len(sends) {
		t.Fatalf("OutboxClaim: %d rows, %v; want %d", len(claimed), err, len(sends))
	}
	fences := map[string]store.Fence{}
	for _, c := range claimed {
		fences[c.MessageID] = c.Fence
	}
	// The first campaign's last send fails unsent, and a copy of it is
	// then met and sent as the others are.
	late := store.MessageID(sends[3].nid, heraldtype.ChannelWebhook)
	if ok, err := s.OutboxComplete(ctx, fences[late], heraldtype.OutboxFailed, "MAX_ATTEMPTS"); err != nil || !ok {
		t.Fatalf("OutboxComplete FAILED: %v, %v", ok, err)
	}
	for _, sd := range sends {
		mid := store.MessageID(sd.nid, heraldtype.ChannelWebhook)
		if res, err := s.DeliveryClaim(ctx, store.DeliveryClaimParams{MessageID: mid, NotificationID: sd.nid, Tenant: "t1",
			Channel: heraldtype.ChannelWebhook, Provider: "p", Owner: "w1"}); err != nil || !res.Claimed {
			t.Fatalf("DeliveryClaim %s: %+v, %v", mid, res, err)
		}
	}
	if got, err := s.CampaignGet(ctx, "t1", campaigns[0]); err != nil || got.Counts != (store.CampaignCounts{Failed: 1}) {
		t.Fatalf("the first campaign before the results: %+v, %v; want its failed send", got.Counts, err)
	}

	var sizes []int
	var mu sync.Mutex
	s.pipe.merged = func(n int) { mu.Lock(); sizes = append(sizes, n); mu.Unlock() }
	s.pipe.rerun = func(n int) { t.Errorf("a batch of %d was rerun statement by statement", n) }
	queued, release := hold(t, s.pipe, s.pool, 4346)
	errs := make(chan error, len(sends))
	for _, sd := range sends {
		mid := store.MessageID(sd.nid, heraldtype.ChannelWebhook)
		fence := fences[mid]
		go func() {
			_, err := s.DeliveryRecord(ctx, store.DeliveryRecordParams{MessageID: mid, Attempt: 1, State: sd.state, RetryDelay: time.Minute,
				Owner: "w1", Class: "c", StartedAt: time.Now(), Outbox: &fence})
			errs <- err
		}()
		storetest.Receive(t, queued, "a result write was queued")
	}
	release()
	for range sends {
		if err := storetest.Receive(t, errs, "a result write returned"); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	if !slices.Equal(sizes, []int{len(sends)}) {
		t.Errorf("merged statements stood for %v result writes; want one for all %d", sizes, len(sends))
	}
	mu.Unlock()
	for i, want := range []store.CampaignCounts{{Sent: 3, Failed: 1}, {Sent: 1, Unknown: 1}} {
		if got, err := s.CampaignGet(ctx, "t1", campaigns[i]); err != nil || got.Counts != want {
			t.Errorf("campaign %d's counts = %+v, %v; want %+v", i+1, got.Counts, err, want)
		}
	}
	var rows int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM campaign_counts WHERE campaign_id <> ALL($1)`, campaigns).Scan(&rows); err != nil || rows != 0 {
		t.Errorf("%d counter rows of no campaign here (%v)", rows, err)
	}
}

// TestMigration28CountsOnFromTheCountsKept: a schema at migration 27, its
// counts kept row by row by 27's trigger, goes on counting from the same
// counts once its trigger counts per statement.
func TestMigration28CountsOnFromTheCountsKept(t *testing.T) {
	t.Parallel()
	url := testpg.Schema(t)
	s := setup(t, url, Options{})
	testpg.Exec(t, url, undoMigration28)
	// This schema's trigger only: tests beside it take other schemas back
	// to migration 27 too.
	if n := queryInt(t, url, `SELECT count(*) FROM pg_trigger WHERE tgname = 'campaign_count_delivery_update' AND tgtype & 1 = 1
  AND tgrelid = 'deliveries'::regclass`); n != 1 {
		t.Fatalf("after the undo, %d row-level update triggers; want migration 27's", n)
	}
	c := storetest.MakeCampaignCounts(t, s, time.Now()) // counted by migration 27's row trigger
	s.Close()
	if _, err := Migrate(context.Background(), url); err != nil {
		t.Fatal(err)
	}
	storetest.CheckCampaignCountsMigrated(t, setup(t, url, Options{MustExist: true}), c, time.Now())
}

// TestACancelOfManyWaitingSendsAfterOneResultTakesLinearTime: the
// statement-level trigger (migration 28) is planned once per backend, with
// the sizes of the transition tables of the first statement that ran it
// there (PL/pgSQL caches the plan). A first version joined the old and new
// rows, and on a backend whose first counted statement ended one send, as
// a single result write does, every later statement joined them with a
// nested loop: time in n², 6.5 s for 10,000 sends and 207 s for 50,000 on
// the development machine, where the row trigger took about a second. Here
// a campaign's 20,000 sends wait in RETRY_WAIT (a provider outage), one
// send's result is written, and the campaign is cancelled on the same
// backend (a pool of one connection): the cancel's one statement ends the
// 19,999 waiting sends. It guards against that growth, not a speed: 0.3–0.4
// s here against 75 s for the quadratic plan, the bound 10 s.
func TestACancelOfManyWaitingSendsAfterOneResultTakesLinearTime(t *testing.T) {
	// Not parallel: it times a statement.
	ctx := context.Background()
	s := setup(t, "", Options{MaxConns: 1, PipelineWorkers: 1})
	const n = 20000
	id, rs := fannedOutCampaign(t, s, n)
	// Every send claimed and tried once, as the sender leaves them: the
	// first one in flight, the others waiting for a retry.
	first := store.MessageID(rs[0].NotificationID, heraldtype.ChannelWebhook)
	if _, err := s.pool.Exec(ctx, `INSERT INTO deliveries (message_id, notification_id, tenant, channel, provider, state, attempts, claimed_by,
    claimed_at, next_attempt_at, created_at, updated_at, campaign_id)
SELECT o.message_id, o.notification_id, o.tenant, o.channel, 'p', CASE WHEN o.message_id = $2 THEN 'SENDING' ELSE 'RETRY_WAIT' END, 1,
       CASE WHEN o.message_id = $2 THEN 'w1' END, now(), CASE WHEN o.message_id = $2 THEN NULL ELSE now() + interval '1 hour' END,
       now(), now(), cr.campaign_id
FROM campaign_recipients cr JOIN outbox o ON o.notification_id = cr.notification_id
WHERE cr.campaign_id = $1`, id, first); err != nil {
		t.Fatal(err)
	}
	// The first statement on the backend that moves a campaign's delivery:
	// one send's result.
	if res, err := s.DeliveryRecord(ctx, store.DeliveryRecordParams{MessageID: first, Attempt: 1, State: heraldtype.DeliveryProviderAccepted,
		Owner: "w1", Class: "c", StartedAt: time.Now()}); err != nil || !res.Recorded {
		t.Fatalf("DeliveryRecord: %+v, %v", res, err)
	}
	start := time.Now()
	res, err := s.CampaignCancel(ctx, "t1", id)
	took := time.Since(start)
	if err != nil || res.Cancelled != n-1 {
		t.Fatalf("CampaignCancel: %d cancelled, %v; want %d", res.Cancelled, err, n-1)
	}
	t.Logf("the cancel of %d waiting sends took %s", n-1, took)
	if took > 10*time.Second {
		t.Errorf("the cancel of %d waiting sends took %s; the row trigger took about a second", n-1, took)
	}
	if got, err := s.CampaignGet(ctx, "t1", id); err != nil || got.Counts != (store.CampaignCounts{Sent: 1, Suppressed: n - 1}) {
		t.Errorf("counts after the cancel = %+v, %v; want 1 sent, %d suppressed", got.Counts, err, n-1)
	}
}

// TestALateCopyBesideItsRowsFailIsCountedOnce: a relay fails a campaign
// row whose publish went unconfirmed (FAILED: counted, and marked so)
// while a copy of its message is being sent, or decided, in another
// transaction. Under READ COMMITTED neither saw the other's write, and
// the send was counted twice (failed and sent, failed and suppressed).
// Migration 36 has the delivery's side lock the row first: it waits for
// the fail and then takes the fail's count out, or the fail waits for it
// and counts nothing. Each order is run with the first transaction held
// open; the counts end one outcome a send, and no row with a delivery is
// left marked.
func TestALateCopyBesideItsRowsFailIsCountedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t, "", Options{})
	id, rs := fannedOutCampaign(t, s, 3)
	claimed, err := s.OutboxClaim(ctx, store.OutboxClaimParams{Lane: heraldtype.LaneMarketing, Owner: "relay", Limit: 10, Lease: time.Hour, Publishing: true})
	if err != nil || len(claimed) != 3 {
		t.Fatalf("OutboxClaim: %d rows, %v; want 3", len(claimed), err)
	}
	fence := map[string]store.Fence{}
	for _, c := range claimed {
		fence[c.NotificationID] = c.Fence
	}
	mid := func(i int) string { return store.MessageID(rs[i].NotificationID, heraldtype.ChannelWebhook) }
	failOpen := func(i int) (func(bool), int) {
		f := fence[rs[i].NotificationID]
		return holdPid(t, s, qOutboxFail, nil, "FAILED", "NO_CONFIRM", f.NotificationID, "webhook", f.Token)
	}
	decide := func(i int) store.DeliveryDecideParams {
		return store.DeliveryDecideParams{MessageID: mid(i), NotificationID: rs[i].NotificationID, Tenant: "t1",
			Channel: heraldtype.ChannelWebhook, State: heraldtype.DeliverySuppressed, Reason: "CONSENT_DENIED"}
	}
	// beside runs write while the transaction of pid is open: until write
	// returns, or waits for that transaction (the fix), then commits it and
	// waits for write.
	beside := func(what string, commit func(bool), pid int, write func() error) {
		done := make(chan error, 1)
		go func() { done <- write() }()
		var err error
		finished := false
		waitFor(t, 10*time.Second, what+" returns or waits for the open transaction", func() bool {
			select {
			case err = <-done:
				finished = true
				return true
			default:
			}
			return waitsFor(t, s, pid)
		})
		commit(true)
		if !finished {
			err = storetest.Receive(t, done, what)
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	// 0: the fail open while a copy is claimed and sent.
	commit, pid := failOpen(0)
	if res, err := s.DeliveryClaim(ctx, store.DeliveryClaimParams{MessageID: mid(0), NotificationID: rs[0].NotificationID, Tenant: "t1",
		Channel: heraldtype.ChannelWebhook, Provider: "p", Owner: "w1"}); err != nil || !res.Claimed {
		t.Fatalf("DeliveryClaim: %+v, %v", res, err)
	}
	beside("the copy's result write", commit, pid, func() error {
		_, err := s.DeliveryRecord(ctx, store.DeliveryRecordParams{MessageID: mid(0), Attempt: 1, State: heraldtype.DeliveryProviderAccepted,
			Owner: "w1", Class: "c", StartedAt: time.Now()})
		return err
	})
	// 1: the fail open while a copy is decided (suppressed).
	commit, pid = failOpen(1)
	beside("the copy's decision", commit, pid, func() error { _, err := s.DeliveryDecide(ctx, decide(1)); return err })
	// 2: a copy's decision open while the row fails.
	commit, pid = holdPid(t, s, qDeliveryDecide, nil, mid(2), rs[2].NotificationID, "t1", "webhook", "SUPPRESSED", "CONSENT_DENIED")
	beside("the row's fail", commit, pid, func() error {
		_, err := s.OutboxComplete(ctx, fence[rs[2].NotificationID], heraldtype.OutboxFailed, "NO_CONFIRM")
		return err
	})

	if got, err := s.CampaignGet(ctx, "t1", id); err != nil || got.Counts != (store.CampaignCounts{Sent: 1, Suppressed: 2}) {
		t.Fatalf("counts %+v, %v; want one sent and two suppressed, each send once", got.Counts, err)
	}
	var marked int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM outbox o JOIN deliveries d ON d.message_id = o.message_id
WHERE o.campaign_counted`).Scan(&marked); err != nil || marked != 0 {
		t.Fatalf("%d rows with a delivery still marked counted (%v)", marked, err)
	}
}

// TestACancelMovesTheCountsOncePerStatement: a cancel inserts a decision
// for every waiting send in one statement, and the campaign's counter row
// moves once for it (migration 36's statement trigger), not once a send:
// a row updated again in its own transaction is found by walking all its
// versions, so the row trigger's n-th upsert walked n of them (a cancel of
// 200,000 took 7.6 minutes). The counter row of a fresh table written
// once is its page's first tuple; 2,000 versions of it would fill pages.
func TestACancelMovesTheCountsOncePerStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t, "", Options{})
	const n = 2000
	id, _ := fannedOutCampaign(t, s, n)
	res, err := s.CampaignCancel(ctx, "t1", id)
	if err != nil || res.Cancelled != n {
		t.Fatalf("CampaignCancel: %+v, %v; want %d cancelled", res, err, n)
	}
	if got, err := s.CampaignGet(ctx, "t1", id); err != nil || got.Counts != (store.CampaignCounts{Suppressed: n}) {
		t.Fatalf("counts %+v, %v; want %d suppressed", got.Counts, err, n)
	}
	var rows int
	var where string
	if err := s.pool.QueryRow(ctx, `SELECT count(*), min(ctid::text) FROM campaign_counts`).Scan(&rows, &where); err != nil {
		t.Fatal(err)
	}
	if rows != 1 || where != "(0,1)" {
		t.Fatalf("%d counter rows, the first at %s; want one, written once at (0,1)", rows, where)
	}
}

// TestADecisionBesideAHeldRowsFailIsCountedOnce: a relay's held claim
// (hold.go) shows its rows PENDING to every other transaction until it
// commits, so migration 36's lock, which took rows CLAIMED or PUBLISHING,
// let a copy's decision pass a held row unlocked. If the broker did not
// confirm the row, the relay fails it after the hold commits, and a
// decision still open then was counted twice: the fail saw no delivery
// (not committed), the decision no mark (not yet written). Migration 41
// has the decision share a PENDING row (FOR KEY SHARE), which does not
// wait for the hold, and the fail lock its row FOR UPDATE first, which
// waits for the share: the fail then finds the decision and counts
// nothing.
func TestADecisionBesideAHeldRowsFailIsCountedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t, "", Options{})
	id, rs := fannedOutCampaign(t, s, 1)
	p := holdParams(10)
	p.Lane = heraldtype.LaneMarketing
	held, h, err := claimHold(t, s, p, nil)
	if err != nil || len(held) != 1 {
		t.Fatalf("held claim: %d rows, %v; want 1", len(held), err)
	}
	f := held[0].Fence

	// The copy's decision, in a transaction left open.
	tx, pid := openTx(t, s)
	decided := make(chan error, 1)
	go func() { decided <- decideIn(ctx, tx, rs[0]) }()
	// returnsOrWaits waits until done has a result or pid waits for a
	// lock, and keeps the result.
	returnsOrWaits := func(what string, pid int, done chan error) {
		waitFor(t, 10*time.Second, what+" returns or waits", func() bool {
			select {
			case err := <-done:
				done <- err
				return true
			default:
			}
			return waiting(t, s, pid)
		})
	}
	returnsOrWaits("the decision", pid, decided)

	// The hold commits with the row not confirmed, and the relay's fail
	// (its own connection) waits for the decision.
	if err := h.Commit(ctx, []store.Fence{f}, nil); err != nil {
		t.Fatal(err)
	}
	if err := storetest.Receive(t, decided, "the decision"); err != nil {
		t.Fatalf("decision: %v", err)
	}
	failed := make(chan error, 1)
	var failPid int
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&failPid); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := conn.Exec(ctx, qOutboxFail, nil, "FAILED", "NO_CONFIRM", f.NotificationID, "webhook", f.Token)
		failed <- err
	}()
	returnsOrWaits("the fail", failPid, failed)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := storetest.Receive(t, failed, "the fail"); err != nil {
		t.Fatalf("fail: %v", err)
	}

	if got, err := s.CampaignGet(ctx, "t1", id); err != nil || got.Counts != (store.CampaignCounts{Suppressed: 1}) {
		t.Fatalf("counts %+v, %v; want the one send suppressed, once", got.Counts, err)
	}
}

// fannedOutCampaign is a running campaign of n recipients (runningCampaign)
// whose sends are all written: notifications and PENDING outbox rows.
func fannedOutCampaign(t *testing.T, s *Store, n int) (string, []store.CampaignRecipient) {
	t.Helper()
	id, rs := runningCampaign(t, s, n)
	if res, err := s.CampaignFanOut(context.Background(), store.CampaignFanOutParams{Tenant: "t1", ID: id, Limit: n + 1}); err != nil || res.Recipients != n {
		t.Fatalf("CampaignFanOut: %+v, %v", res, err)
	}
	return id, rs
}

// TestACancelThatADeadlockEndsIsRunAgain: a cancel inserts its decisions
// in the order of their rows' keys, but a pipeline batch of several
// decisions writes them in the batch's order, so the two can wait for
// each other in a cycle: the cancel holds the first send's decision and
// waits for the batch's on the second, which then waits for the cancel's
// on the first. PostgreSQL ends one of them after deadlock_timeout; the
// batch would run again statement by statement, and the cancel, ended
// here (the batch's session waits longer before it looks), runs again
// too, instead of failing the caller's request; run again beside the
// still open batch, it reports both sends in flight.
func TestACancelThatADeadlockEndsIsRunAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t, "", Options{})
	id, rs := fannedOutCampaign(t, s, 2)
	slices.SortFunc(rs, func(a, b store.CampaignRecipient) int { return strings.Compare(a.NotificationID, b.NotificationID) })
	tx, pid := openTx(t, s)
	if _, err := tx.Exec(ctx, `SET LOCAL deadlock_timeout = '30s'`); err != nil {
		t.Fatal(err)
	}
	decide := func(r store.CampaignRecipient) error { return decideIn(ctx, tx, r) }
	if err := decide(rs[1]); err != nil {
		t.Fatal(err)
	}
	type cancelled struct {
		res store.CampaignCancelResult
		err error
	}
	done := make(chan cancelled, 1)
	go func() {
		res, err := s.CampaignCancel(ctx, "t1", id)
		done <- cancelled{res, err}
	}()
	cancelWaits := func(what string) {
		waitFor(t, 10*time.Second, what, func() bool { return waitsFor(t, s, pid) })
	}
	cancelWaits("the cancel waits for the batch's decision")
	if err := decide(rs[0]); err != nil { // waits for the cancel until PostgreSQL ends it
		t.Fatalf("the batch's second decision: %v", err)
	}
	cancelWaits("the cancel, run again, waits for the batch")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	c := storetest.Receive(t, done, "the cancel")
	if c.err != nil {
		t.Fatalf("CampaignCancel: %v; want it run again after the deadlock", c.err)
	}
	// Run again beside the open batch, the cancel found both sends ending
	// under way: in flight, neither its own.
	if c.res.Cancelled != 0 || c.res.InFlight != 2 || c.res.Campaign.Counts != (store.CampaignCounts{}) {
		t.Fatalf("CampaignCancel: %d cancelled, %d in flight, counts %+v; want both sends in flight, the batch's",
			c.res.Cancelled, c.res.InFlight, c.res.Campaign.Counts)
	}
	if got, err := s.CampaignGet(ctx, "t1", id); err != nil || got.Counts != (store.CampaignCounts{Suppressed: 2}) {
		t.Fatalf("counts %+v, %v; want both sends suppressed, once", got.Counts, err)
	}
}

// openTx begins a transaction on s's pool, rolled back at the test's end
// unless committed, and returns it with its session's pid.
func openTx(t *testing.T, s *Store) (pgx.Tx, int) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(ctx) })
	var pid int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return tx, pid
}

// decideIn writes, in tx, a copy's decision on r's webhook send:
// SUPPRESSED for want of consent.
func decideIn(ctx context.Context, tx pgx.Tx, r store.CampaignRecipient) error {
	_, err := tx.Exec(ctx, qDeliveryDecide, nil, store.MessageID(r.NotificationID, heraldtype.ChannelWebhook),
		r.NotificationID, "t1", "webhook", "SUPPRESSED", "CONSENT_DENIED")
	return err
}

package postgres

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/storetest"
)

// recordCase is one result write of TestMergedRecordsMatchSingleOnes, on
// the claim of notification n (0..4).
type recordCase struct {
	name  string
	n     int
	edit  func(p *store.DeliveryRecordParams)
	state heraldtype.DeliveryState
}

var recordCases = []recordCase{
	{"accepted", 1, func(p *store.DeliveryRecordParams) { p.ProviderRef = "ref-1" }, heraldtype.DeliveryProviderAccepted},
	{"retry", 2, func(p *store.DeliveryRecordParams) { p.Reason, p.RetryDelay = "HTTP_503", 30*time.Second }, heraldtype.DeliveryRetryWait},
	{"another attempt's", 3, func(p *store.DeliveryRecordParams) { p.Attempt = 2 }, heraldtype.DeliveryProviderAccepted},
	{"a stale token", 4, func(p *store.DeliveryRecordParams) { p.Outbox.Token++; p.Reason = "HTTP_400" }, heraldtype.DeliveryPermanentFailure},
	{"a lease run out", 0, nil, heraldtype.DeliveryUnknown},
	{"a second copy of the first", 1, nil, heraldtype.DeliveryUnknown},
}

// runMode is how runRecordCases and runClaimTakeCases send their writes:
// one by one, merged in one batch, or merged in a batch that a failing
// statement among them aborts, so each is run again alone.
type runMode int

const (
	alone runMode = iota
	merged
	aborted
)

// queueBatch runs n calls of write behind a held pipeline worker, in order,
// so they share one batch (with a statement that fails on the server in
// its middle if mode is aborted), and checks what the pipeline did with
// them: merged as one statement, and rerun one by one if aborted. later
// says the writes are marked later (result writes): the failing statement
// is then marked so too, to share their transaction (splitLater).
func queueBatch(t *testing.T, s *Store, mode runMode, lock int64, later bool, n int, write func(i int) error) {
	t.Helper()
	var sizes, reruns []int
	var mu sync.Mutex
	s.pipe.merged = func(n int) { mu.Lock(); sizes = append(sizes, n); mu.Unlock() }
	s.pipe.rerun = func(n int) { mu.Lock(); reruns = append(reruns, n); mu.Unlock() }
	queued, release := hold(t, s.pipe, s.pool, lock+int64(mode)) // a lock of its own: the tests run at once
	errs := make([]error, n)
	done := make(chan struct{}, n+1)
	var failed error
	for i := range n {
		go func() { errs[i] = write(i); done <- struct{}{} }()
		storetest.Receive(t, queued, fmt.Sprintf("write %d was queued", i)) // in order
		if mode == aborted && i == n/2 {
			go func() {
				var x int
				var m *merge
				if later {
					m = &merge{later: true} // alone in its kind: never merged
				}
				failed = s.pipe.QueryRowMerged(context.Background(), m, nil, `SELECT 1/0`).Scan(&x)
				done <- struct{}{}
			}()
			storetest.Receive(t, queued, "the failing statement was queued")
		}
	}
	release()
	for range n {
		storetest.Receive(t, done, "a write returned")
	}
	if mode == aborted {
		storetest.Receive(t, done, "the failing statement returned")
		if failed == nil {
			t.Fatal("SELECT 1/0 did not fail")
		}
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	wantReruns := []int(nil)
	if mode == aborted {
		wantReruns = []int{n + 1}
	}
	if len(sizes) == 0 || sizes[0] != n || fmt.Sprint(reruns) != fmt.Sprint(wantReruns) {
		t.Fatalf("merged statements stood for %v writes and batches of %v were rerun; want one for %d, reruns %v", sizes, reruns, n, wantReruns)
	}
}

// mergeStore returns a fresh store on a fake clock with one pipeline
// worker (so a held batch holds every statement), and the ids of n
// notifications created on it, one webhook send each.
func mergeStore(t *testing.T, n int) (*Store, *clock.Fake, []string) {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC))
	s := setup(t, "", Options{Clock: clk, PipelineWorkers: 1})
	ids := make([]string, n)
	for i := range ids {
		p := params(nil)
		ids[i] = p.ID
		mustCreate(t, s, p)
	}
	return s, clk, ids
}

// runRecordCases writes recordCases on a fresh store, in mode, and returns
// each result and what the tables hold afterwards, named by case.
func runRecordCases(t *testing.T, mode runMode) ([]store.RecordResult, []string) {
	t.Helper()
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC))
	s := setup(t, "", Options{Clock: clk, PipelineWorkers: 1})
	ids := make([]string, 5)
	claims := make([]store.Claimed, 5)
	claim := func(lease time.Duration, from, to int) {
		for i := from; i < to; i++ {
			p := params(nil)
			ids[i] = p.ID
			mustCreate(t, s, p)
		}
		rows, err := s.OutboxClaim(ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w", Limit: 100, Lease: lease})
		if err != nil || len(rows) != to-from {
			t.Fatalf("claim: %d rows (%v), want %d", len(rows), err, to-from)
		}
		for _, c := range rows {
			for i := from; i < to; i++ {
				if ids[i] == c.NotificationID {
					claims[i] = c
				}
			}
		}
	}
	claim(time.Minute, 0, 1) // notification 0's lease runs out before the results
	clk.Advance(2 * time.Minute)
	claim(10*time.Minute, 1, 5)
	for _, c := range claims {
		cl, err := s.DeliveryClaim(ctx, store.DeliveryClaimParams{MessageID: c.MessageID, NotificationID: c.NotificationID,
			Tenant: "t1", Channel: c.Channel, Provider: "p", Owner: "w"})
		if err != nil || !cl.Claimed {
			t.Fatalf("claim %s: %+v (%v)", c.MessageID, cl, err)
		}
	}
	write := func(i int) (store.RecordResult, error) {
		c := recordCases[i]
		fence := claims[c.n].Fence
		p := store.DeliveryRecordParams{MessageID: claims[c.n].MessageID, Attempt: 1, State: c.state, Owner: "w", Class: "x",
			StartedAt: clk.Now(), Duration: 40 * time.Millisecond, Outbox: &fence}
		if c.edit != nil {
			c.edit(&p)
		}
		return s.DeliveryRecord(ctx, p)
	}
	results := make([]store.RecordResult, len(recordCases))
	if mode != alone {
		queueBatch(t, s, mode, 4344, true, len(recordCases), func(i int) (err error) { results[i], err = write(i); return err })
	} else {
		for i := range recordCases {
			var err error
			if results[i], err = write(i); err != nil {
				t.Fatalf("%s: %v", recordCases[i].name, err)
			}
		}
	}
	var tables []string
	for n, id := range ids {
		var d, o, a string
		if err := s.pool.QueryRow(ctx, `SELECT concat_ws(' ', state, reason, attempts, coalesce(next_attempt_at::text, '-'),
    coalesce(provider_ref, '-'), coalesce(claimed_by, '-'), updated_at)
FROM deliveries WHERE notification_id = $1`, id).Scan(&d); err != nil {
			t.Fatal(err)
		}
		if err := s.pool.QueryRow(ctx, `SELECT concat_ws(' ', state, last_reason, available_at, coalesce(claimed_by, '-'),
    coalesce(claimed_until::text, '-'), token, updated_at)
FROM outbox WHERE notification_id = $1`, id).Scan(&o); err != nil {
			t.Fatal(err)
		}
		if err := s.pool.QueryRow(ctx, `SELECT coalesce(string_agg(concat_ws(' ', attempt, owner, started_at, finished_at, class, reason, duration_ms), '; '
    ORDER BY attempt), '-') FROM delivery_attempts WHERE message_id LIKE $1 || '.%'`, id).Scan(&a); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, fmt.Sprintf("notification %d: delivery %s | outbox %s | attempts %s", n, d, o, a))
	}
	return results, tables
}

// Result writes waiting in one batch run as one merged statement, and each
// gets, and writes, exactly what it would have alone, in the batch's order:
// a result and its outbox row settled, a retry's due times, another
// attempt's result and a stale token's settle refused by their fences, a
// lease run out, a second copy of a result refused as the first's fence
// would refuse it. A batch that another statement's failure aborts leaves
// nothing of the merged statement, and each result, run again alone,
// writes the same.
func TestMergedRecordsMatchSingleOnes(t *testing.T) {
	t.Parallel()
	single, singleTables := runRecordCases(t, alone)
	settled, recorded, refused := store.RecordResult{Recorded: true, OutboxSettled: true}, store.RecordResult{Recorded: true}, store.RecordResult{}
	want := []store.RecordResult{settled, settled, refused, recorded, recorded, refused}
	for _, mode := range []runMode{merged, aborted} {
		t.Run(map[runMode]string{merged: "Merged", aborted: "Aborted"}[mode], func(t *testing.T) {
			t.Parallel()
			got, tables := runRecordCases(t, mode)
			for i, c := range recordCases {
				if single[i] != want[i] || got[i] != want[i] {
					t.Errorf("%s: alone %+v, here %+v; want %+v", c.name, single[i], got[i], want[i])
				}
			}
			for i := range singleTables {
				if singleTables[i] != tables[i] {
					t.Errorf("the tables differ:\n alone: %s\n here:  %s", singleTables[i], tables[i])
				}
			}
		})
	}
}

// A job that came as a message has no outbox row to settle; when its row
// is on no chain (Job.OffChain) its result is merged too
// (qDeliveryRecordNoChainMany). Each result gets and writes what the
// chain-aware single statement (qDeliveryRecord) gives it alone: a result,
// a retry's due time, another attempt's refused, a second copy refused;
// and the same when the batch is aborted and each runs again alone.
func TestMergedNoChainRecordsMatchChainAwareOnes(t *testing.T) {
	t.Parallel()
	cases := []recordCase{
		{"accepted", 0, func(p *store.DeliveryRecordParams) { p.ProviderRef = "ref-0" }, heraldtype.DeliveryProviderAccepted},
		{"retry", 1, func(p *store.DeliveryRecordParams) { p.Reason, p.RetryDelay = "HTTP_503", 30*time.Second }, heraldtype.DeliveryRetryWait},
		{"another attempt's", 2, func(p *store.DeliveryRecordParams) { p.Attempt = 2 }, heraldtype.DeliveryProviderAccepted},
		{"a second copy of the first", 0, nil, heraldtype.DeliveryUnknown},
	}
	run := func(t *testing.T, mode runMode, offChain bool) ([]store.RecordResult, []string) {
		t.Helper()
		ctx := context.Background()
		s, clk, ids := mergeStore(t, 3)
		for i, id := range ids {
			if res, err := s.DeliveryClaim(ctx, store.DeliveryClaimParams{MessageID: id + ".webhook", NotificationID: id,
				Tenant: "t1", Channel: heraldtype.ChannelWebhook, Provider: "p", Owner: "w"}); err != nil || !res.Claimed {
				t.Fatalf("claim %d: %+v (%v)", i, res, err)
			}
		}
		clk.Advance(time.Minute)
		write := func(i int) (store.RecordResult, error) {
			c := cases[i]
			p := store.DeliveryRecordParams{MessageID: ids[c.n] + ".webhook", Attempt: 1, State: c.state, Owner: "w", Class: "x",
				StartedAt: clk.Now(), Duration: 40 * time.Millisecond, OffChain: offChain}
			if c.edit != nil {
				c.edit(&p)
			}
			return s.DeliveryRecord(ctx, p)
		}
		results := make([]store.RecordResult, len(cases))
		if mode == alone {
			for i := range cases {
				var err error
				if results[i], err = write(i); err != nil {
					t.Fatalf("%s: %v", cases[i].name, err)
				}
			}
		} else {
			queueBatch(t, s, mode, 4360, false, len(cases), func(i int) (err error) { results[i], err = write(i); return err })
		}
		var tables []string
		for n, id := range ids {
			var d, a string
			if err := s.pool.QueryRow(ctx, `SELECT concat_ws(' ', state, reason, attempts, coalesce(next_attempt_at::text, '-'),
    coalesce(provider_ref, '-'), coalesce(claimed_by, '-'), updated_at) FROM deliveries WHERE notification_id = $1`, id).Scan(&d); err != nil {
				t.Fatal(err)
			}
			if err := s.pool.QueryRow(ctx, `SELECT coalesce(string_agg(concat_ws(' ', attempt, owner, started_at, finished_at, class, reason, duration_ms), '; '
    ORDER BY attempt), '-') FROM delivery_attempts WHERE message_id LIKE $1 || '.%'`, id).Scan(&a); err != nil {
				t.Fatal(err)
			}
			tables = append(tables, fmt.Sprintf("notification %d: delivery %s | attempts %s", n, d, a))
		}
		return results, tables
	}
	chainAware, wantTables := run(t, alone, false)
	recorded, refused := store.RecordResult{Recorded: true}, store.RecordResult{}
	want := []store.RecordResult{recorded, recorded, refused, refused}
	for _, mode := range []runMode{alone, merged, aborted} {
		t.Run(map[runMode]string{alone: "Alone", merged: "Merged", aborted: "Aborted"}[mode], func(t *testing.T) {
			t.Parallel()
			got, tables := run(t, mode, true)
			for i, c := range cases {
				if chainAware[i] != want[i] || got[i] != want[i] {
					t.Errorf("%s: chain-aware %+v, here %+v; want %+v", c.name, chainAware[i], got[i], want[i])
				}
			}
			if fmt.Sprint(tables) != fmt.Sprint(wantTables) {
				t.Errorf("the tables differ:\n chain-aware: %v\n here:        %v", wantTables, tables)
			}
		})
	}
}

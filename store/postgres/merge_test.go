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

// Creates waiting in one batch run as one merged statement, and each request
// gets exactly what it would have got alone: new ones (one channel, two,
// deferred), replays and conflicts of earlier keys, an expired key taken
// again, a dedup hit inside the batch, and a NOTIFY for the lane.
func TestMergedCreatesMatchSingleOnes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC))
	s := setup(t, "", Options{Clock: clk, PipelineWorkers: 1, NotifyInterval: time.Nanosecond})

	replayed := params(nil)
	mustCreate(t, s, replayed)
	conflicting := params(nil)
	mustCreate(t, s, conflicting)
	conflicting.RequestHash = "other"
	expired := params(func(p *store.NotificationCreateParams) { p.IdempotencyTTL = time.Minute })
	mustCreate(t, s, expired)
	clk.Advance(2 * time.Minute) // expired's key has run out; the others' have not
	retaken := params(func(p *store.NotificationCreateParams) { p.IdempotencyKey = expired.IdempotencyKey })

	later := clk.Now().Add(time.Hour)
	batch := []struct {
		name string
		p    store.NotificationCreateParams
		want store.CreateOutcome
	}{
		{"new", params(nil), store.Created},
		{"two channels, deferred", params(func(p *store.NotificationCreateParams) {
			p.Channels = []heraldtype.Channel{heraldtype.ChannelSMS, heraldtype.ChannelPush}
			p.SendAt = &later
		}), store.Created},
		{"replay", replayed, store.Replayed},
		{"conflict", conflicting, store.Conflict},
		{"expired key taken again", retaken, store.Created},
		{"dedup first", params(func(p *store.NotificationCreateParams) { p.IdempotencyKey, p.DedupKey = "", "d1" }), store.Created},
		{"dedup second", params(func(p *store.NotificationCreateParams) { p.IdempotencyKey, p.DedupKey = "", "d1" }), store.Deduplicated},
		{"no key", params(func(p *store.NotificationCreateParams) { p.IdempotencyKey = "" }), store.Created},
		{"lazy fallback chain", params(func(p *store.NotificationCreateParams) {
			p.Channels, p.Fallback = []heraldtype.Channel{heraldtype.ChannelWebhook, heraldtype.ChannelSMS, heraldtype.ChannelAlimTalk}, true
		}), store.Created},
	}
	var merged []int
	var mu sync.Mutex
	s.pipe.merged = func(n int) { mu.Lock(); merged = append(merged, n); mu.Unlock() }
	s.pipe.rerun = func(n int) { t.Errorf("a batch of %d was rerun statement by statement", n) }
	// Listen as another process would, for the merged statement's NOTIFY.
	listener, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Release()
	if _, err := listener.Exec(ctx, `LISTEN "`+s.channels[heraldtype.LaneTransactional]+`"`); err != nil {
		t.Fatal(err)
	}

	queued, release := hold(t, s.pipe, s.pool, 4343)
	results := make([]store.NotificationCreateResult, len(batch))
	errs := make([]error, len(batch))
	done := make(chan struct{}, len(batch))
	for i, c := range batch {
		go func() { results[i], errs[i] = s.NotificationCreate(ctx, c.p); done <- struct{}{} }()
		// Queue them in order: the second dedup request must come second.
		storetest.Receive(t, queued, fmt.Sprintf("create %q was queued", c.name))
	}
	release()
	for _, c := range batch {
		storetest.Receive(t, done, fmt.Sprintf("a create returned (%s among them)", c.name))
	}

	mu.Lock()
	if len(merged) == 0 || merged[0] != len(batch) {
		t.Fatalf("merged statements stood for %v creates, want one for %d", merged, len(batch))
	}
	mu.Unlock()
	for i, c := range batch {
		if errs[i] != nil || results[i].Outcome != c.want {
			t.Errorf("%s: outcome %v (%v), want %v", c.name, results[i].Outcome, errs[i], c.want)
		}
	}
	if got, want := results[6].ID, batch[5].p.ID; got != want {
		t.Errorf("dedup hit points at %s, want %s", got, want)
	}
	if string(results[2].Response) != string(replayed.Response) {
		t.Errorf("replay answered %s", results[2].Response)
	}
	// What was written is what single statements would have written.
	for _, i := range []int{0, 1, 4, 5, 7} {
		p := batch[i].p
		v, err := s.NotificationGet(ctx, "t1", p.ID)
		if err != nil || len(v.Deliveries) != len(p.Channels) {
			t.Fatalf("%s: view %+v (%v)", batch[i].name, v, err)
		}
		for j, d := range v.Deliveries {
			due := clk.Now()
			if p.SendAt != nil {
				due = *p.SendAt
			}
			if d.Channel != p.Channels[j] || d.MessageID != store.MessageID(p.ID, p.Channels[j]) ||
				d.OutboxState != heraldtype.OutboxPending || !d.AvailableAt.Equal(due) {
				t.Errorf("%s: entry %d = %+v", batch[i].name, j, d)
			}
		}
	}
	// A lazy chain's first step alone, carrying the later channels
	// (fallback.go); the read API shows them WAITING.
	lazy := batch[8].p
	var rows int
	var plan []string
	if err := s.pool.QueryRow(ctx, `SELECT count(*), max(fallback_plan::text)::text[] FROM outbox WHERE notification_id = $1`, lazy.ID).
		Scan(&rows, &plan); err != nil || rows != 1 || fmt.Sprint(plan) != "[sms alimtalk]" {
		t.Errorf("lazy chain: %d rows, plan %v (%v), want the first step's alone with [sms alimtalk]", rows, plan, err)
	}
	if v, err := s.NotificationGet(ctx, "t1", lazy.ID); err != nil || len(v.Deliveries) != 3 ||
		v.Deliveries[1].OutboxState != heraldtype.OutboxWaiting || v.Deliveries[2].OutboxState != heraldtype.OutboxWaiting {
		t.Errorf("lazy chain: view %+v (%v)", v, err)
	}
	for _, i := range []int{6} {
		if _, err := s.NotificationGet(ctx, "t1", batch[i].p.ID); err == nil {
			t.Errorf("%s: a notification was written", batch[i].name)
		}
	}
	if res := mustCreate(t, s, retaken); res.Outcome != store.Replayed {
		t.Errorf("the retaken key replays %v", res.Outcome)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := listener.Conn().WaitForNotification(wctx); err != nil {
		t.Errorf("no NOTIFY for the lane: %v", err)
	}
	// The merged statement sent it itself: no create had to leave it to a
	// trailing NOTIFY.
	if n := s.notify.trailing.Load(); n != 0 {
		t.Errorf("%d trailing NOTIFYs; the merged statement did not notify", n)
	}
}

// Two requests with one key in one batch cannot share a merged statement;
// the batch is rerun request by request, and one of them creates.
func TestMergedCreatesWithOneKeyFallBackToSingles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t, "", Options{PipelineWorkers: 1})
	key := params(nil)
	tried, reran := make(chan int, 1), make(chan int, 1)
	s.pipe.rerun = func(n int) {
		select {
		case reran <- n:
		default:
		}
	}
	s.pipe.merged = func(n int) {
		select {
		case tried <- n:
		default:
		}
	}
	queued, release := hold(t, s.pipe, s.pool, 4343)
	const n = 4
	results := make([]store.NotificationCreateResult, n)
	errs := make([]error, n)
	wait := queue(t, queued, n, func(i int) {
		// One key and request, each with its own notification id, as a client
		// retrying a request whose first answer it never got sends it.
		p := params(func(p *store.NotificationCreateParams) {
			p.IdempotencyKey, p.Response = key.IdempotencyKey, key.Response
		})
		results[i], errs[i] = s.NotificationCreate(ctx, p)
	})
	release()
	wait()
	created := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		switch results[i].Outcome {
		case store.Created:
			created++
		case store.Replayed:
		default:
			t.Errorf("request %d: %v", i, results[i].Outcome)
		}
	}
	if created != 1 {
		t.Fatalf("%d created, want 1", created)
	}
	select {
	case got := <-tried:
		if got != n {
			t.Fatalf("the merged statement stood for %d creates, want %d", got, n)
		}
	default:
		t.Fatal("the creates were never merged")
	}
	select {
	case <-reran:
	default:
		t.Fatal("the batch was not rerun statement by statement")
	}
}

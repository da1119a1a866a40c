package retention_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/internal/testdb"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/metrics/metricstest"
	"github.com/heraldhq/herald/retention"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/postgres"
	"github.com/heraldhq/herald/store/sqlite"
)

var epoch = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

const day = 24 * time.Hour

type bundle struct {
	st store.Store
	// count runs a count query on the store's database behind its back.
	count   func(t testing.TB, query string) int
	clk     *clock.Fake
	metrics *metrics.Metrics
	ctx     context.Context
	// pauses records the pauses between batches (Config.Sleep).
	mu     sync.Mutex
	pauses []time.Duration
}

// each runs test on every driver.
func each(t *testing.T, test func(t *testing.T, b *bundle)) {
	for _, driver := range testdb.Drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(epoch)
			db := testdb.Open(t, driver, clk)
			test(t, &bundle{st: db.Store, count: db.Count, clk: clk, metrics: metrics.New(nil), ctx: context.Background()})
		})
	}
}

// purger returns a purger over b's store with retention 365 days, tenant
// t1's 30 days, batches of batch, and edit applied.
func (b *bundle) purger(batch int, edit func(c *retention.Config)) *retention.Purger {
	c := retention.Config{
		Store: b.st, TenantRetention: map[string]time.Duration{"t1": 30 * day}, Batch: batch, Pause: time.Second,
		Clock: b.clk, Metrics: b.metrics, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Sleep: func(ctx context.Context, d time.Duration) bool {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.pauses = append(b.pauses, d)
			return ctx.Err() == nil
		},
	}
	if edit != nil {
		edit(&c)
	}
	return retention.New(c)
}

// item writes one inbox item for tenant's recipient now and returns its
// message id.
func (b *bundle) item(t *testing.T, tenant, recipient string) string {
	t.Helper()
	id := ids.New("ntf", b.clk.Now())
	_, err := b.st.NotificationCreate(b.ctx, store.NotificationCreateParams{
		Tenant: tenant, ID: id, Recipient: recipient, EventID: id, Kind: "k", Lane: heraldtype.LaneTransactional,
		Params: json.RawMessage(`{}`), Channels: []heraldtype.Channel{heraldtype.ChannelInbox},
		Inbox: []store.InboxText{{Title: "t", Body: "b"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	b.clk.Advance(time.Millisecond)
	return store.MessageID(id, heraldtype.ChannelInbox)
}

func (b *bundle) round(t *testing.T, p *retention.Purger) retention.Report {
	t.Helper()
	r, err := p.Round(b.ctx)
	if err != nil {
		t.Fatalf("Round: %v", err)
	}
	return r
}

// items returns the message ids of a recipient's items, archived included.
func (b *bundle) items(t *testing.T, tenant, recipient string) map[string]bool {
	t.Helper()
	list, err := b.st.InboxItemsAfter(b.ctx, tenant, recipient, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, it := range list {
		out[it.MessageID] = true
	}
	return out
}

// wantBadgeExact fails unless the recipient's badge says unread and a
// recount finds nothing to repair.
func (b *bundle) wantBadgeExact(t *testing.T, tenant, recipient string, unread int64) {
	t.Helper()
	bd, err := b.st.InboxBadge(b.ctx, tenant, recipient)
	if err != nil {
		t.Fatal(err)
	}
	if bd.Unread != unread {
		t.Errorf("badge of %s/%s: %d unread, want %d", tenant, recipient, bd.Unread, unread)
	}
	res, err := b.st.InboxRecount(b.ctx, store.InboxRecountParams{Tenant: tenant, Recipient: recipient})
	if err != nil {
		t.Fatal(err)
	}
	if res.Repaired != 0 {
		t.Errorf("a recount of %s/%s repaired %+v: the purge left the counter wrong", tenant, recipient, res.Drifted)
	}
}

func TestPurgesPastEachTenantsRetentionAndKeepsTheBadgeExact(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b *bundle) {
		// Day 0: t1 (30 days) gets a (unread) and b (read, then archived),
		// t2 (the default, 365 days) gets c; r2 of t1 gets x (unread).
		a, rb := b.item(t, "t1", "r1"), b.item(t, "t1", "r1")
		c := b.item(t, "t2", "r1")
		x := b.item(t, "t1", "r2")
		if _, err := b.st.InboxMarkRead(b.ctx, store.InboxMarkReadParams{Tenant: "t1", Recipient: "r1", IDs: []string{rb}}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.st.InboxArchive(b.ctx, "t1", "r1", rb); err != nil {
			t.Fatal(err)
		}
		// Day 40: d for t1's r1, e for t2's r1.
		b.clk.Advance(40 * day)
		d, e := b.item(t, "t1", "r1"), b.item(t, "t2", "r1")
		p := b.purger(1000, nil)

		// Day 60: t1's items of day 0 are past 30 days; nothing of t2's is.
		b.clk.Advance(20 * day)
		r := b.round(t, p)
		if r.Purged["t1"] != 3 || r.Purged[""] != 0 || r.Stopped {
			t.Errorf("round on day 60: %+v, want t1's 3 items of day 0", r)
		}
		if got := b.items(t, "t1", "r1"); len(got) != 1 || !got[d] || got[a] || got[rb] {
			t.Errorf("t1/r1 keeps %v, want only %s", got, d)
		}
		if got := b.items(t, "t1", "r2"); got[x] {
			t.Errorf("t1/r2 keeps %s, past its tenant's retention", x)
		}
		if got := b.items(t, "t2", "r1"); len(got) != 2 {
			t.Errorf("t2/r1 keeps %v, want both (365 days)", got)
		}
		b.wantBadgeExact(t, "t1", "r1", 1)
		b.wantBadgeExact(t, "t1", "r2", 0)
		b.wantBadgeExact(t, "t2", "r1", 2)

		// Day 400: t2's item of day 0 is past 365 days, that of day 40 not.
		b.clk.Advance(340 * day)
		r = b.round(t, p)
		if r.Purged["t1"] != 1 || r.Purged[""] != 1 {
			t.Errorf("round on day 400: %+v, want t1's d and t2's c", r)
		}
		if got := b.items(t, "t2", "r1"); len(got) != 1 || !got[e] || got[c] {
			t.Errorf("t2/r1 keeps %v, want only %s", got, e)
		}
		b.wantBadgeExact(t, "t1", "r1", 0)
		b.wantBadgeExact(t, "t2", "r1", 1)
		// The tables: one item left; the counters' unread sum to it; the
		// notifications and their inbox sends (inbox_at) stay (only the
		// items go).
		for q, want := range map[string]int{
			"SELECT count(*) FROM inbox_items":                                                  1,
			"SELECT coalesce(sum(unread), 0) FROM inbox_counters":                               1,
			"SELECT count(*) FROM inbox_counters":                                               3,
			"SELECT count(*) FROM notifications":                                                6,
			"SELECT count(*) FROM notifications WHERE inbox_at > 0":                             6,
			"SELECT count(*) FROM inbox_items WHERE tenant = 't2' AND message_id = '" + e + "'": 1,
		} {
			if got := b.count(t, q); got != want {
				t.Errorf("%s = %d, want %d", q, got, want)
			}
		}
		// A new item takes a seq after the counter's, which stayed.
		was, _ := b.st.InboxBadge(b.ctx, "t1", "r1")
		b.item(t, "t1", "r1")
		if bd, _ := b.st.InboxBadge(b.ctx, "t1", "r1"); bd.Seq <= was.Seq || was.Seq == 0 || bd.Unread != 1 {
			t.Errorf("badge after a new item %+v (was %+v), want a later seq, 1 unread", bd, was)
		}
		if got := metricstest.Series(t, b.metrics, "herald_inbox_purged_total")[""]; got != 5 {
			t.Errorf("herald_inbox_purged_total %v, want 5", got)
		}
		// Nothing left past its retention: a round deletes nothing.
		if r = b.round(t, p); r.Total() != 0 {
			t.Errorf("a third round purged %+v", r)
		}
	})
}

func TestPurgesInBatchesWithAPauseBetween(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b *bundle) {
		for range 5 {
			b.item(t, "t2", "r1")
		}
		b.clk.Advance(400 * day)
		kept := b.item(t, "t2", "r1")
		r := b.round(t, b.purger(2, nil))
		// t1 (none), then the rest: 2, 2, 1.
		if r.Purged[""] != 5 || r.Batches != 4 {
			t.Errorf("round %+v, want 5 purged in 1 + 3 batches", r)
		}
		if len(b.pauses) != 2 || b.pauses[0] != time.Second {
			t.Errorf("pauses %v, want one second after each full batch (2)", b.pauses)
		}
		if got := b.items(t, "t2", "r1"); len(got) != 1 || !got[kept] {
			t.Errorf("kept %v, want only the new item", got)
		}
		b.wantBadgeExact(t, "t2", "r1", 1)
	})
}

func TestOnlyTheLeaderPurgesAndALostLeadershipStopsBetweenBatches(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b *bundle) {
		for range 5 {
			b.item(t, "t2", "r1")
		}
		b.clk.Advance(400 * day)
		var leader atomic.Bool
		p := b.purger(2, func(c *retention.Config) { c.IsLeader = leader.Load })
		if r := b.round(t, p); r.Total() != 0 || r.Batches != 0 {
			t.Errorf("a follower's round: %+v, want nothing done", r)
		}
		leader.Store(true)
		p = b.purger(2, func(c *retention.Config) {
			c.IsLeader = leader.Load
			c.Sleep = func(ctx context.Context, d time.Duration) bool {
				leader.Store(false) // lost during the first pause
				return true
			}
		})
		r := b.round(t, p)
		if !r.Stopped || r.Total() != 2 {
			t.Errorf("round that lost leadership: %+v, want stopped after one batch of 2", r)
		}
		if got := b.items(t, "t2", "r1"); len(got) != 3 {
			t.Errorf("%d items left, want 3", len(got))
		}
		b.wantBadgeExact(t, "t2", "r1", 3)
	})
}

func TestRunPurgesEveryInterval(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b *bundle) {
		old := b.item(t, "t1", "r1")
		b.clk.Advance(31 * day)
		p := b.purger(10, func(c *retention.Config) { c.Interval = 10 * time.Millisecond })
		stop := testenv.Start(t, p.Run)
		defer stop()
		testenv.WaitFor(t, "the purge of the old item", testenv.Patience, func() bool { return !b.items(t, "t1", "r1")[old] })
		b.wantBadgeExact(t, "t1", "r1", 0)
	})
}

// A process purges as soon as it leads, not one interval after it started:
// a leader restarted more often than the interval (an hour here) would
// otherwise never purge.
func TestRunPurgesAtOnceWhenItLeads(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b *bundle) {
		old := b.item(t, "t1", "r1")
		b.clk.Advance(31 * day)
		p := b.purger(10, func(c *retention.Config) { c.Interval = time.Hour })
		stop := testenv.Start(t, p.Run)
		defer stop()
		testenv.WaitFor(t, "the purge of the old item", testenv.Patience, func() bool { return !b.items(t, "t1", "r1")[old] })
	})
}

// TestMeasurePurge times a purge of every item of an existing database:
// HERALD_MEASURE_PURGE=<postgres URL or sqlite:PATH> (its items are gone
// afterwards).
func TestMeasurePurge(t *testing.T) {
	dsn := os.Getenv("HERALD_MEASURE_PURGE")
	if dsn == "" {
		t.Skip("set HERALD_MEASURE_PURGE=<database> to measure")
	}
	ctx := context.Background()
	var st store.Store
	var err error
	if path, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
		st, err = sqlite.Open(ctx, path, sqlite.Options{})
	} else {
		st, err = postgres.Open(ctx, dsn, postgres.Options{})
	}
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p := retention.New(retention.Config{Store: st, Retention: time.Nanosecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	start := time.Now()
	r, err := p.Round(ctx)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	pauses := time.Duration(r.Batches-1) * retention.DefaultPause
	t.Logf("purged %d items in %d batches in %s (%s of it pauses): %s a batch of work",
		r.Total(), r.Batches, took.Round(time.Millisecond), pauses, ((took - pauses) / time.Duration(r.Batches)).Round(time.Microsecond))
}

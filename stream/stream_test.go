package stream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/ssetest"
	"github.com/heraldhq/herald/internal/testdb"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/metrics/metricstest"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/stream"
)

// testStore is what the tests need of a driver.
type testStore interface {
	store.Notifications
	stream.Reader
	store.InboxWatch
	InboxMarkRead(ctx context.Context, p store.InboxMarkReadParams) (store.InboxBadge, error)
	InboxArchive(ctx context.Context, tenant, recipient, messageID string) (bool, error)
	Close() error
}

// drivers are the stores every behaviour runs on (testdb.Open's drivers).
var drivers = []struct {
	name string
	open func(t testing.TB) testStore
}{{"sqlite", openWith("sqlite")}, {"postgres", openWith("postgres")}}

func openWith(driver string) func(t testing.TB) testStore {
	return func(t testing.TB) testStore { return testdb.Open(t, driver, nil).Store }
}

// eachDriver runs test on every driver, in parallel subtests.
func eachDriver(t *testing.T, test func(t *testing.T, open func(t testing.TB) testStore)) {
	t.Helper()
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			test(t, d.open)
		})
	}
}

// env is a Hub on a store behind an HTTP server, as herald routes it.
type env struct {
	st      testStore
	hub     *stream.Hub
	srv     *httptest.Server
	tokens  *auth.RecipientTokens
	clock   *clock.Fake
	metrics *metrics.Metrics
	n       atomic.Int64
	// run, when set, makes add's ids new on a database an earlier run
	// filled (the benchmark's HERALD_BENCH_DATABASE): the same id again
	// is a dedup hit that writes no item.
	run string
}

// setup starts a Hub on st with cfg (its Store, Signals, Clock and Metrics
// filled unless set) behind RequireRecipient. Tokens exist for tenants
// t1 and t2.
func setup(t testing.TB, st testStore, cfg stream.Config) *env {
	t.Helper()
	e := &env{st: st, clock: clock.NewFake(time.Now()), metrics: metrics.New(nil)}
	var err error
	e.tokens, err = auth.NewRecipientTokens(auth.RecipientTokensConfig{
		Keys: map[string][]auth.RecipientKey{
			"t1": {{ID: "k1", Secret: []byte(strings.Repeat("1", 32))}},
			"t2": {{ID: "k1", Secret: []byte(strings.Repeat("2", 32))}},
		},
		TTL: time.Hour, MaxTTL: 24 * time.Hour, Clock: e.clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Store == nil {
		cfg.Store = st
	}
	if cfg.Signals == nil {
		cfg.Signals = st.InboxSignals()
	}
	if cfg.Clock == nil {
		cfg.Clock = e.clock
	}
	cfg.Metrics = e.metrics
	e.hub = stream.New(cfg)
	e.srv = httptest.NewServer(auth.RequireRecipient(e.tokens, nil)(e.hub))
	t.Cleanup(func() {
		e.hub.Close()
		e.srv.Close()
	})
	return e
}

// add creates a notification with an inbox item for recipient of tenant
// and returns the item's message id.
func (e *env) add(t testing.TB, tenant, recipient, title string) string {
	t.Helper()
	id := fmt.Sprintf("ntf_%s%s_%d", strings.ReplaceAll(t.Name(), "/", "_"), e.run, e.n.Add(1))
	_, err := e.st.NotificationCreate(context.Background(), store.NotificationCreateParams{
		Tenant: tenant, ID: id, Recipient: recipient, EventID: "evt-" + id, Kind: "order.shipped",
		Lane: heraldtype.LaneTransactional, Params: json.RawMessage(`{}`), DedupKey: id,
		Channels: []heraldtype.Channel{heraldtype.ChannelInbox},
		Inbox:    []store.InboxText{{Title: title, Body: "body of " + title}},
	})
	if err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
	return store.MessageID(id, heraldtype.ChannelInbox)
}

func (e *env) token(t testing.TB, tenant, recipient string) string {
	t.Helper()
	m, err := e.tokens.Mint(tenant, recipient, 0)
	if err != nil {
		t.Fatal(err)
	}
	return m.Token
}

// url is the stream's URL with query.
func (e *env) url(query string) string { return e.srv.URL + "/v1/me/stream" + query }

// get requests the stream as ssetest.Get.
func (e *env) get(t *testing.T, token, query string, headers ...string) (*http.Response, context.CancelFunc) {
	t.Helper()
	return ssetest.Get(t, e.url(query), token, headers...)
}

// open opens a stream for recipient of tenant (headers: name, value, …).
func (e *env) open(t *testing.T, tenant, recipient string, headers ...string) *ssetest.Client {
	t.Helper()
	return ssetest.Open(t, e.url(""), e.token(t, tenant, recipient), headers...)
}

func TestNewItemReachesAnOpenStream(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, open func(t testing.TB) testStore) {
		// No periodic read within the test: only the signal can bring the item.
		e := setup(t, open(t), stream.Config{Resync: time.Hour})
		e.add(t, "t1", "alice", "before") // seq 1: before the stream, never sent
		c := e.open(t, "t1", "alice")
		if unread, id := c.Badge(t); unread != 1 || id != "1" {
			t.Fatalf("first event: badge %d with id %q, want 1 with id 1 (the newest seq)", unread, id)
		}
		before := time.Now().Add(-time.Minute)
		msg := e.add(t, "t1", "alice", "Shipped")
		seq, it := c.Item(t)
		if seq != 2 || it.ID != msg || it.NotificationID != strings.TrimSuffix(msg, ".inbox") || it.Kind != "order.shipped" ||
			it.Title != "Shipped" || it.Body != "body of Shipped" || it.CreatedAt.Before(before) || it.ReadAt != nil || it.ArchivedAt != nil {
			t.Fatalf("item %d %+v", seq, it)
		}
		if unread, id := c.Badge(t); unread != 2 || id != "2" {
			t.Fatalf("badge %d with id %q after the item, want 2 with id 2", unread, id)
		}
	})
}

func TestBadgeFollowsReadsAndArchives(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, open func(t testing.TB) testStore) {
		e := setup(t, open(t), stream.Config{})
		a := e.add(t, "t1", "alice", "a")
		b := e.add(t, "t1", "alice", "b")
		c := e.open(t, "t1", "alice")
		c.WantBadge(t, 2)
		ctx := context.Background()
		if _, err := e.st.InboxMarkRead(ctx, store.InboxMarkReadParams{Tenant: "t1", Recipient: "alice", IDs: []string{a}}); err != nil {
			t.Fatal(err)
		}
		c.WantBadge(t, 1)
		if ok, err := e.st.InboxArchive(ctx, "t1", "alice", b); err != nil || !ok {
			t.Fatalf("archive: %v %v", ok, err)
		}
		c.WantBadge(t, 0)
		// A read that changes nothing sends nothing: the next event is the
		// next item's.
		if _, err := e.st.InboxMarkRead(ctx, store.InboxMarkReadParams{Tenant: "t1", Recipient: "alice", All: true}); err != nil {
			t.Fatal(err)
		}
		e.add(t, "t1", "alice", "c")
		if seq, it := c.Item(t); seq != 3 || it.Title != "c" {
			t.Fatalf("item %d %q, want 3 c", seq, it.Title)
		}
		c.WantBadge(t, 1)
	})
}

func TestResumeReplaysExactlyTheMissedItems(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, open func(t testing.TB) testStore) {
		// A page of 3 makes the replay of 10 take four reads.
		e := setup(t, open(t), stream.Config{Page: 3})
		for i := 1; i <= 10; i++ {
			e.add(t, "t1", "alice", "m"+strconv.Itoa(i))
		}
		for _, how := range []struct {
			name, query string
			headers     []string
		}{
			{"Header", "", []string{"Last-Event-ID", "4"}},
			{"Query", "?last_event_id=4", nil},
		} {
			t.Run(how.name, func(t *testing.T) {
				c := ssetest.Open(t, e.url(how.query), e.token(t, "t1", "alice"), how.headers...)
				for want := int64(5); want <= 10; want++ {
					seq, it := c.Item(t)
					if seq != want || it.Title != "m"+strconv.Itoa(int(want)) {
						t.Fatalf("replayed %d %q, want %d", seq, it.Title, want)
					}
				}
				if unread, id := c.Badge(t); unread != 10 || id != "10" {
					t.Fatalf("badge %d id %q after the replay, want 10 id 10", unread, id)
				}
				c.Close()
			})
		}
		t.Run("AtTheEnd", func(t *testing.T) {
			c := e.open(t, "t1", "alice", "Last-Event-ID", "10")
			c.WantBadge(t, 10)
			e.add(t, "t1", "alice", "m11")
			if seq, _ := c.Item(t); seq != 11 {
				t.Fatalf("live item %d, want 11", seq)
			}
		})
	})
}

// TestReconnectsWhileItemsArriveMissNothing has a writer add items while
// a client keeps dropping its stream and resuming with the last id it saw:
// it must see every item exactly once, in order.
func TestReconnectsWhileItemsArriveMissNothing(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, open func(t testing.TB) testStore) {
		e := setup(t, open(t), stream.Config{Page: 4})
		const n = 60
		written := make(chan struct{})
		go func() {
			defer close(written)
			for i := 1; i <= n; i++ {
				e.add(t, "t1", "alice", "m"+strconv.Itoa(i))
			}
		}()
		token := e.token(t, "t1", "alice")
		var seen []int64
		last := "0"
		for len(seen) < n {
			c := ssetest.Open(t, e.url(""), token, "Last-Event-ID", last)
			// Take up to 7 items from this connection, then drop it.
			for got := 0; got < 7 && len(seen) < n; {
				ev := c.Next(t)
				if ev.Name != "item" {
					continue
				}
				seq, _ := strconv.ParseInt(ev.ID, 10, 64)
				seen = append(seen, seq)
				last = ev.ID
				got++
			}
			c.Close()
		}
		<-written
		for i, seq := range seen {
			if seq != int64(i+1) {
				t.Fatalf("item %d of the resumed streams has seq %d; all: %v", i+1, seq, seen)
			}
		}
	})
}

// A Last-Event-ID past the recipient's newest item (another account's,
// kept by the app across a switch) starts the stream at the newest item:
// new items come at once, not once the ids pass it.
func TestALastEventIDAheadOfTheInboxStartsAtTheNewest(t *testing.T) {
	t.Parallel()
	e := setup(t, drivers[0].open(t), stream.Config{})
	e.add(t, "t1", "alice", "old")
	c := e.open(t, "t1", "alice", "Last-Event-ID", "100000")
	c.WantBadge(t, 1)
	e.add(t, "t1", "alice", "new")
	// An item comes before its badge: held back, only the badge would.
	if ev := c.Next(t); ev.Name != "item" || ev.ID != "2" || !strings.Contains(ev.Data, "new") {
		t.Fatalf("got %+v, want the new item, seq 2", ev)
	}
}

func TestBadLastEventIDIs400(t *testing.T) {
	t.Parallel()
	e := setup(t, drivers[0].open(t), stream.Config{})
	token := e.token(t, "t1", "alice")
	for _, bad := range []struct{ query, header string }{
		{"", "x"}, {"", "-1"}, {"", "1.5"}, {"?last_event_id=abc", ""}, {"", "99999999999999999999"},
	} {
		var headers []string
		if bad.header != "" {
			headers = []string{"Last-Event-ID", bad.header}
		}
		resp, cancel := e.get(t, token, bad.query, headers...)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("Last-Event-ID %q / %q: %s %s %s", bad.header, bad.query, resp.Status, resp.Header.Get("Content-Type"), body)
		}
	}
}

func TestHeartbeatsWhileIdle(t *testing.T) {
	t.Parallel()
	e := setup(t, drivers[0].open(t), stream.Config{Heartbeat: 20 * time.Millisecond})
	c := e.open(t, "t1", "alice")
	c.WantBadge(t, 0)
	for range 3 {
		ev, ok := c.Recv(t, "a heartbeat")
		if !ok || ev.Comment != "ping" {
			t.Fatalf("got %+v (open %v), want the comment ping", ev, ok)
		}
	}
}

// The first heartbeat comes a Heartbeat after the stream's first badge,
// not two (a proxy sized to one would cut every quiet stream). A bound of
// 1.6 Heartbeats: the old fault took 2.
func TestTheFirstHeartbeatIsOneHeartbeatAfterTheBadge(t *testing.T) {
	t.Parallel()
	const beat = 1500 * time.Millisecond
	e := setup(t, drivers[0].open(t), stream.Config{Heartbeat: beat})
	c := e.open(t, "t1", "alice")
	c.WantBadge(t, 0)
	badged := time.Now()
	ev, ok := c.Recv(t, "the first heartbeat")
	if took := time.Since(badged); !ok || ev.Comment != "ping" || took > beat*16/10 {
		t.Fatalf("got %+v (open %v) %s after the badge; want the comment ping within 1.6 × %s", ev, ok, took, beat)
	}
}

func TestCapRefusesWith503AndADisconnectFreesTheSlot(t *testing.T) {
	t.Parallel()
	e := setup(t, drivers[0].open(t), stream.Config{MaxStreams: 2})
	a := e.open(t, "t1", "alice")
	e.open(t, "t1", "bob")
	a.WantBadge(t, 0)
	resp, cancel := e.get(t, e.token(t, "t1", "carol"), "")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	cancel()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Content-Type") != "application/problem+json" ||
		resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third stream: %s %v %s", resp.Status, resp.Header, body)
	}
	refused := metricstest.Series(t, e.metrics, "herald_streams_refused_total", "reason")
	if got := gauges(t, e.metrics); got["herald_streams_open"] != 2 || refused["streams_max"] != 1 || refused["per_recipient"] != 0 {
		t.Fatalf("metrics %v, refused %v; want 2 open and 1 refused over streams_max", got, refused)
	}
	a.Close()
	testenv.WaitFor(t, "the closed stream's slot", testenv.Patience, func() bool { return e.hub.Open() == 1 })
	c := e.open(t, "t1", "carol")
	c.WantBadge(t, 0)
}

// One recipient token must not take every slot of the server: its
// recipient's streams past MaxPerRecipient are 429, the same recipient id
// of another tenant and other recipients still get theirs, and a closed
// stream frees its recipient's slot.
func TestARecipientsStreamsAreCapped(t *testing.T) {
	t.Parallel()
	e := setup(t, drivers[0].open(t), stream.Config{MaxStreams: 10, MaxPerRecipient: 2})
	a := e.open(t, "t1", "alice")
	e.open(t, "t1", "alice").WantBadge(t, 0)
	a.WantBadge(t, 0)
	wantTooMany(t, e, "t1", "alice", "this recipient has 2 streams open")
	e.open(t, "t2", "alice").WantBadge(t, 0)
	e.open(t, "t1", "bob").WantBadge(t, 0)
	refused := metricstest.Series(t, e.metrics, "herald_streams_refused_total", "reason")
	if e.hub.Open() != 4 || refused["per_recipient"] != 1 || refused["streams_max"] != 0 {
		t.Fatalf("open %d, refused %v; want 4 open and 1 refused per recipient", e.hub.Open(), refused)
	}
	a.Close()
	testenv.WaitFor(t, "alice's closed stream's slot", testenv.Patience, func() bool { return e.hub.Open() == 3 })
	e.open(t, "t1", "alice").WantBadge(t, 0)
}

// wantTooMany asks for one more stream of recipient and wants it refused:
// 429, a problem whose detail holds detail, and Retry-After.
func wantTooMany(t *testing.T, e *env, tenant, recipient, detail string) {
	t.Helper()
	resp, cancel := e.get(t, e.token(t, tenant, recipient), "")
	defer cancel() // an open stream's body never ends
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("%s's stream: %s, want 429", recipient, resp.Status)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Header.Get("Content-Type") != "application/problem+json" ||
		resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), detail) {
		t.Fatalf("%s's stream: %s %v %s", recipient, resp.Status, resp.Header, body)
	}
}

// A tenant's recipients together hold at most MaxPerTenant streams, so one
// tenant minting tokens for many recipients cannot take every slot; other
// tenants still get theirs.
func TestATenantsStreamsAreCapped(t *testing.T) {
	t.Parallel()
	e := setup(t, drivers[0].open(t), stream.Config{MaxStreams: 10, MaxPerRecipient: 2, MaxPerTenant: 3})
	a := e.open(t, "t1", "alice")
	a.WantBadge(t, 0)
	e.open(t, "t1", "alice").WantBadge(t, 0)
	e.open(t, "t1", "bob").WantBadge(t, 0)
	wantTooMany(t, e, "t1", "carol", "this tenant's recipients have 3 streams open")
	e.open(t, "t2", "carol").WantBadge(t, 0)
	refused := metricstest.Series(t, e.metrics, "herald_streams_refused_total", "reason")
	if e.hub.Open() != 4 || refused["per_tenant"] != 1 || refused["per_recipient"] != 0 || refused["streams_max"] != 0 {
		t.Fatalf("open %d, refused %v; want 4 open and 1 refused per tenant", e.hub.Open(), refused)
	}
	a.Close()
	testenv.WaitFor(t, "alice's closed stream's slot", testenv.Patience, func() bool { return e.hub.Open() == 3 })
	e.open(t, "t1", "carol").WantBadge(t, 0)
}

// gauges reads every unlabelled gauge and counter of m.
func gauges(t *testing.T, m *metrics.Metrics) map[string]float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, s := range f.GetMetric() {
			if len(s.GetLabel()) == 0 {
				out[f.GetName()] = s.GetGauge().GetValue() + s.GetCounter().GetValue()
			}
		}
	}
	return out
}

func TestCloseEndsStreamsAndRefusesNewOnes(t *testing.T) {
	t.Parallel()
	e := setup(t, drivers[0].open(t), stream.Config{})
	a, b := e.open(t, "t1", "alice"), e.open(t, "t1", "alice")
	a.WantBadge(t, 0)
	b.WantBadge(t, 0)
	e.hub.Close()
	a.Ended(t)
	b.Ended(t)
	resp, cancel := e.get(t, e.token(t, "t1", "alice"), "")
	resp.Body.Close()
	cancel()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a stream after Close: %s", resp.Status)
	}
	if n := e.hub.Open(); n != 0 {
		t.Fatalf("%d streams open after Close", n)
	}
}

func TestOnlyTheTokensOwnInbox(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, open func(t testing.TB) testStore) {
		e := setup(t, open(t), stream.Config{})
		// The same recipient id in two tenants, and two recipients of one.
		who := []struct{ tenant, recipient string }{{"t1", "alice"}, {"t1", "bob"}, {"t2", "alice"}}
		clients := make([]*ssetest.Client, len(who))
		for i, w := range who {
			clients[i] = e.open(t, w.tenant, w.recipient)
			clients[i].WantBadge(t, 0)
		}
		for round := range 2 {
			for _, w := range who {
				e.add(t, w.tenant, w.recipient, fmt.Sprintf("%s/%s/%d", w.tenant, w.recipient, round))
			}
			for i, w := range who {
				_, it := clients[i].Item(t)
				if want := fmt.Sprintf("%s/%s/%d", w.tenant, w.recipient, round); it.Title != want {
					t.Fatalf("%s/%s got %q, want %q", w.tenant, w.recipient, it.Title, want)
				}
				clients[i].WantBadge(t, int64(round+1))
			}
		}
		// A resume from 0 replays only the token's own items too.
		c := e.open(t, "t2", "alice", "Last-Event-ID", "0")
		for want := range 2 {
			if _, it := c.Item(t); it.Title != fmt.Sprintf("t2/alice/%d", want) {
				t.Fatalf("replay for t2/alice: %q", it.Title)
			}
		}
		c.WantBadge(t, 2)
	})
}

func TestTokenExpiryEndsTheStream(t *testing.T) {
	t.Parallel()
	e := setup(t, drivers[0].open(t), stream.Config{})
	m, err := e.tokens.Mint("t1", "alice", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// 30 ms before the token's exp on the tokens' clock: it still
	// verifies, and the stream must end 30 ms from now.
	e.clock.Advance(m.ExpiresAt.Sub(e.clock.Now()) - 30*time.Millisecond)
	c := ssetest.Open(t, e.url(""), m.Token)
	c.WantBadge(t, 0)
	last := c.Ended(t)
	if last.Comment != "token expired" {
		t.Fatalf("the stream ended after %+v, want the comment token expired", last)
	}
}

// TestMissedSignalsAndResyncCatchUp: InboxMissed wakes every stream, and
// a stream that hears nothing still reads again every Resync.
func TestMissedSignalsAndResyncCatchUp(t *testing.T) {
	t.Parallel()
	st := drivers[0].open(t)
	t.Run("Missed", func(t *testing.T) {
		// The Hub hears signals that are not the store's: the store's
		// own signal for the item never reaches it.
		sig := &store.InboxSignals{}
		e := setup(t, st, stream.Config{Signals: sig})
		c := e.open(t, "t1", "missed")
		c.WantBadge(t, 0)
		e.add(t, "t1", "missed", "x")
		sig.Missed()
		if _, it := c.Item(t); it.Title != "x" {
			t.Fatalf("item %q", it.Title)
		}
	})
	t.Run("Resync", func(t *testing.T) {
		e := setup(t, st, stream.Config{Signals: &store.InboxSignals{}, Resync: 20 * time.Millisecond})
		c := e.open(t, "t1", "resync")
		c.WantBadge(t, 0)
		e.add(t, "t1", "resync", "y")
		if _, it := c.Item(t); it.Title != "y" {
			t.Fatalf("item %q", it.Title)
		}
	})
}

// gatedReader counts a woken stream's reads (heads: statements of
// badges and newest items, through InboxHeads, and the inboxes they read;
// items: InboxItemsAfter) and, while gate is set, holds each head
// statement until the gate is closed.
type gatedReader struct {
	stream.Reader
	mu        sync.Mutex
	gate      chan struct{}
	entered   chan struct{}
	heads     atomic.Int64
	headsKeys atomic.Int64
	items     atomic.Int64
}

func (g *gatedReader) InboxHeads(ctx context.Context, keys []store.InboxKey) (map[store.InboxKey]store.InboxHead, error) {
	g.heads.Add(1)
	g.headsKeys.Add(int64(len(keys)))
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate != nil {
		g.entered <- struct{}{}
		<-gate
	}
	return g.Reader.InboxHeads(ctx, keys)
}

func (g *gatedReader) InboxItemsAfter(ctx context.Context, tenant, recipient string, after int64, limit int) ([]store.InboxItem, error) {
	g.items.Add(1)
	return g.Reader.InboxItemsAfter(ctx, tenant, recipient, after, limit)
}

// TestABurstOfSignalsGivesOneRead: signals that arrive while a stream reads
// leave one wake, so one more read, however many they are.
func TestABurstOfSignalsGivesOneRead(t *testing.T) {
	t.Parallel()
	st := drivers[0].open(t)
	g := &gatedReader{Reader: st, entered: make(chan struct{}, 1)}
	sig := &store.InboxSignals{}
	e := setup(t, st, stream.Config{Store: g, Signals: sig})
	c := e.open(t, "t1", "alice")
	c.WantBadge(t, 0)
	gate := make(chan struct{})
	g.mu.Lock()
	g.gate = gate
	g.mu.Unlock()
	e.add(t, "t1", "alice", "a")
	start := g.heads.Load()
	key := store.InboxKey{Tenant: "t1", Recipient: "alice"}
	sig.Changed(key)
	testenv.Recv(t, g.entered, "the woken stream's read")
	for range 100 {
		sig.Changed(key)
	}
	g.mu.Lock()
	g.gate = nil
	g.mu.Unlock()
	close(gate)
	c.Item(t)
	c.WantBadge(t, 1)
	// The burst's one read runs after the gated one; on a loaded machine
	// it came after "b" was added below, read b itself, and the counter
	// was read before the last signal's read (2, not 3).
	testenv.WaitFor(t, "the burst's one read", testenv.Patience, func() bool { return g.heads.Load()-start >= 2 })
	// The next event is the one after the next item: the burst's one
	// read sent nothing.
	e.add(t, "t1", "alice", "b")
	sig.Changed(key)
	c.Item(t)
	if n := g.heads.Load() - start; n != 3 {
		t.Fatalf("%d reads for the signal, the burst of 100 and the last signal, want 3", n)
	}
}

// TestStreamsOfOneInboxShareReads: many streams of one recipient woken by
// one signal all get the new items once, from far fewer reads than
// streams: with one new item (read with the badge) and with three (read
// after it).
func TestStreamsOfOneInboxShareReads(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, open func(t testing.TB) testStore) {
		st := open(t)
		g := &gatedReader{Reader: st}
		// Only the test signals: each round's items are all committed
		// before its one signal.
		sig := &store.InboxSignals{}
		const n = 50
		e := setup(t, st, stream.Config{Store: g, Signals: sig, MaxPerRecipient: n})
		clients := make([]*ssetest.Client, n)
		for i := range clients {
			clients[i] = e.open(t, "t1", "alice")
			clients[i].WantBadge(t, 0)
		}
		seq := int64(0)
		for _, items := range []int{1, 3} {
			heads0, items0 := g.heads.Load(), g.items.Load()
			for range items {
				e.add(t, "t1", "alice", "all")
			}
			sig.Changed(store.InboxKey{Tenant: "t1", Recipient: "alice"})
			for _, c := range clients {
				for k := range int64(items) {
					if got, it := c.Item(t); got != seq+k+1 || it.Title != "all" {
						t.Fatalf("item %d %q, want %d", got, it.Title, seq+k+1)
					}
				}
				c.WantBadge(t, seq+int64(items))
			}
			seq += int64(items)
			h, i := g.heads.Load()-heads0, g.items.Load()-items0
			t.Logf("%d new items to %d streams of one inbox: %d head reads, %d item reads", items, n, h, i)
			if h >= n || i >= n || (items > 1) != (i > 0) {
				t.Fatalf("%d new items: %d head and %d item reads for %d streams: not shared, or not read as they should be", items, h, i, n)
			}
		}
	})
}

// TestASignalForManyInboxesReadsTheirHeadsTogether: one signal for many
// inboxes reads their heads in a bounded number of statements, not one
// per inbox, and every stream gets its own new item and badge. With one
// read at a time and the first statement held, every other woken stream
// asks while it runs: all of them go into one more.
func TestASignalForManyInboxesReadsTheirHeadsTogether(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, open func(t testing.TB) testStore) {
		st := open(t)
		g := &gatedReader{Reader: st, entered: make(chan struct{}, 1)}
		sig := &store.InboxSignals{}
		e := setup(t, st, stream.Config{Store: g, Signals: sig, Reads: 1})
		const n = 300
		keys := make([]store.InboxKey, n)
		clients := make([]*ssetest.Client, n)
		for i := range clients {
			keys[i] = store.InboxKey{Tenant: "t1", Recipient: fmt.Sprintf("r%03d", i)}
			clients[i] = e.open(t, "t1", keys[i].Recipient)
			clients[i].WantBadge(t, 0)
			e.add(t, "t1", keys[i].Recipient, "for "+keys[i].Recipient)
		}
		heads0, keys0, items0 := g.heads.Load(), g.headsKeys.Load(), g.items.Load()
		gate := make(chan struct{})
		g.mu.Lock()
		g.gate = gate
		g.mu.Unlock()
		sig.Changed(keys...)
		testenv.Recv(t, g.entered, "the first head statement")
		testenv.WaitFor(t, "every woken stream to ask for its head", 30*time.Second, func() bool {
			return int(g.headsKeys.Load()-keys0)+stream.HeadsWanted(e.hub) == n
		})
		g.mu.Lock()
		g.gate = nil
		g.mu.Unlock()
		close(gate)
		for i, c := range clients {
			// Each inbox's one item: the seq its counter holds.
			want, err := st.InboxBadge(context.Background(), "t1", keys[i].Recipient)
			if err != nil {
				t.Fatal(err)
			}
			if seq, it := c.Item(t); seq != want.Seq || seq < 1 || it.Title != "for "+keys[i].Recipient {
				t.Fatalf("stream %d: item %d %q, want %d", i, seq, it.Title, want.Seq)
			}
			c.WantBadge(t, 1)
		}
		h, k, i := g.heads.Load()-heads0, g.headsKeys.Load()-keys0, g.items.Load()-items0
		t.Logf("one signal for %d inboxes: %d head statements of %d inboxes in all, %d item reads", n, h, k, i)
		if h > 2 || k != n || i != 0 {
			t.Fatalf("one signal for %d inboxes: %d head statements (want at most 2) of %d inboxes, %d item reads (want 0)", n, h, k, i)
		}
	})
}

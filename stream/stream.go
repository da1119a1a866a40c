// Package stream serves GET /v1/me/stream: one recipient's inbox as
// Server-Sent Events, for an app that shows new items and the unread badge
// as they commit.
//
// Events (every one carries id: the seq of the newest item the stream has
// sent, so an EventSource resumes where it stopped, even before its first
// item):
//
//	id: 42
//	event: item
//	data: {"id", "notification_id", "kind", "title", "body", "created_at", "read_at", "archived_at"}
//
//	id: 42
//	event: badge
//	data: {"unread_count": 3}
//
// and a comment line (": ping") after every Heartbeat without an event, so
// proxies keep the connection open.
//
// A stream opened with Last-Event-ID: <seq> (the header, or the query
// parameter last_event_id for EventSource polyfills that cannot set
// headers) first sends every item with a greater seq, oldest first, in
// pages, then the badge, then live events: a reconnecting app misses no
// item and sees none twice. Without it the stream starts at the newest
// item and sends the badge first.
//
// Live events come from the store's inbox signals (store.InboxSignals: this
// process's own writes, and on PostgreSQL every other process's through
// LISTEN/NOTIFY). One Hub per process watches them and wakes the streams of
// the recipient that changed; each woken stream reads its inbox after the
// last seq it sent and writes what is new. A signal only says "look", and
// the rows are the truth, so a stream also reads again every Resync on its
// own: a lost signal costs latency, never an item. A burst of signals for
// one recipient wakes a stream once (a one-slot wake channel), and the
// streams of one recipient share their reads.
//
// What a woken stream reads first is its inbox's head: the badge and the
// newest item (store.InboxHeads), enough for the usual change, one new
// item or a read. The Hub reads the heads the streams ask for together,
// up to store.MaxInboxHeads inboxes a statement and a few statements at
// once, so a signal for thousands of inboxes costs tens of statements,
// not one per inbox; a stream asks only after it was woken, and its head
// comes from a statement begun after it asked.
//
// A stream ends when the client goes, when the Hub closes (herald's
// graceful stop), when the store fails, and when its recipient token
// expires: the app mints a new token and reconnects with Last-Event-ID.
package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/inbox"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/problem"
	"github.com/heraldhq/herald/store"
)

// Defaults of Config.
const (
	DefaultMaxStreams = 10_000
	// DefaultMaxPerRecipient is Config.MaxPerRecipient's default.
	DefaultMaxPerRecipient = 8
	DefaultHeartbeat       = 25 * time.Second
	DefaultResync          = 30 * time.Second
	DefaultPage            = 100
	DefaultReads           = 16
)

// headFlights caps the head statements (store.InboxHeads) under way at
// once: while they run, the streams that ask join the next ones.
const headFlights = 4

const (
	// writeTimeout bounds the write of one batch of events (to between
	// half of it and all of it): a client that reads nothing for this long
	// is cut off, so a stalled connection holds neither a slot nor a
	// graceful stop for longer.
	writeTimeout = 15 * time.Second
	// retryAfter is the Retry-After, in seconds, of a stream refused over
	// the cap.
	retryAfter = "5"
)

// Reader reads a recipient's inbox (store.Inbox's stream side).
type Reader interface {
	store.InboxHeads
	// InboxItemsAfter returns up to limit items with seq > afterSeq, oldest first.
	InboxItemsAfter(ctx context.Context, tenant, recipient string, afterSeq int64, limit int) ([]store.InboxItem, error)
	// InboxBadge reads the recipient's unread count and newest seq.
	InboxBadge(ctx context.Context, tenant, recipient string) (store.InboxBadge, error)
}

// Config configures a Hub.
type Config struct {
	// Store reads the inboxes. Required.
	Store Reader
	// Signals wake the streams of an inbox that changed. Nil leaves the
	// streams to their periodic reads (Resync) alone.
	Signals *store.InboxSignals
	// MaxStreams caps the streams open at once; one more is refused with
	// 503 and Retry-After. Defaults to 10,000.
	MaxStreams int
	// MaxPerRecipient caps the streams of one recipient (tenant and id)
	// open at once; one more is refused with 429 and Retry-After. A
	// recipient token is in an end user's hands, and without it one token
	// could take every slot of MaxStreams. Defaults to 8.
	MaxPerRecipient int
	// MaxPerTenant caps the streams of one tenant's recipients together;
	// one more is refused with 429 and Retry-After. A tenant's send key
	// mints tokens for any recipient, so where tenants share a server
	// this keeps one from taking every slot of MaxStreams. Defaults to
	// MaxStreams.
	MaxPerTenant int
	// Heartbeat is how long a stream stays silent before it sends a
	// comment line. Defaults to 25 seconds.
	Heartbeat time.Duration
	// Resync is how often a stream reads its inbox again unprompted (each
	// stream within ±10% of it, so streams woken together drift apart).
	// Defaults to 30 seconds.
	Resync time.Duration
	// Page is how many items one read returns. Defaults to 100.
	Page int
	// Reads caps the store reads the streams run at once (a statement of
	// many inboxes' heads counts as one): after a signal for thousands of
	// inboxes their streams queue here rather than in the store's pool,
	// which costs less (measured by BenchmarkStreams).
	// Defaults to 16.
	Reads int
	// Clock tells the time a recipient token's expiry is measured against
	// (the clock its verifier uses). Defaults to the system clock.
	Clock   clock.Clock
	Logger  *slog.Logger
	Metrics *metrics.Metrics
}

// Hub serves the streams of one process. Safe for concurrent use.
type Hub struct {
	cfg       Config
	logger    *slog.Logger
	metrics   *metrics.Streams
	closeOnce sync.Once
	stopWatch func()
	open      atomic.Int64
	// reads holds a token per store read under way (Config.Reads).
	reads chan struct{}
	// ctx ends at Close (its Done is what Close signals): the context of
	// the reads no one stream owns (the head statements, a read an
	// inbox's streams share), and what ends every stream.
	ctx    context.Context
	cancel context.CancelFunc
	// headsMu guards headsWanted, the head reads asked for and not yet in
	// a statement; headsAsked wakes batchHeads; headFlights holds a token
	// per head statement under way.
	headsMu     sync.Mutex
	headsWanted []headWant
	headsAsked  chan struct{}
	headFlights chan struct{}

	mu      sync.Mutex
	groups  map[store.InboxKey]*group
	tenants map[string]int // streams open per tenant
}

// group is the streams of one inbox and the reads they share. It lives as
// long as it has streams.
type group struct {
	// streams is guarded by Hub.mu; n counts them.
	streams map[*stream]struct{}
	n       atomic.Int32

	// mu guards head and items: the newest shared reads (items: of the
	// items after one seq) begun since the last signal; nil when there is
	// none. A signal clears them before it wakes the streams, so a woken
	// stream finds only reads begun after the change it was woken for.
	// Only the streams of an inbox that has more than one share reads.
	mu    sync.Mutex
	head  *flight[head]
	items *flight[[]item]
}

// head is an inbox's badge and its newest item, read in one snapshot: what
// a stream needs after one new item (the usual signal) or a read.
type head struct {
	badge store.InboxBadge
	// newest is the item of seq badge.Seq; nil when there is none (no item
	// yet, or it was purged).
	newest *item
	// before is a seq below newest's with no item between them
	// (store.InboxHead.Before).
	before int64
}

// item is an item read and its event, encoded once for all the streams
// that share the read.
type item struct {
	seq   int64
	event []byte
}

// flight is one shared read: done is closed once val and err are set.
type flight[T any] struct {
	after int64
	done  chan struct{}
	val   T
	err   error
}

// headWant is a head read a stream asked for: the answer goes to reply
// (one slot, so a stream gone costs the reader nothing).
type headWant struct {
	key   store.InboxKey
	reply chan headAnswer
}

type headAnswer struct {
	hd  head
	err error
}

// errClosed ends a read the Hub's Close cut short.
var errClosed = errors.New("stream: the hub is closed")

// stream is one open stream: its inbox, its group and a one-slot wake
// channel.
type stream struct {
	key  store.InboxKey
	g    *group
	wake chan struct{}
}

// New returns a Hub watching cfg.Signals until Close.
func New(cfg Config) *Hub {
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = DefaultMaxStreams
	}
	if cfg.MaxPerRecipient <= 0 {
		cfg.MaxPerRecipient = DefaultMaxPerRecipient
	}
	if cfg.MaxPerTenant <= 0 {
		cfg.MaxPerTenant = cfg.MaxStreams
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.Page <= 0 {
		cfg.Page = DefaultPage
	}
	if cfg.Reads <= 0 {
		cfg.Reads = DefaultReads
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	h := &Hub{cfg: cfg, logger: cfg.Logger, reads: make(chan struct{}, cfg.Reads),
		headsAsked: make(chan struct{}, 1), headFlights: make(chan struct{}, headFlights),
		groups: map[store.InboxKey]*group{}, tenants: map[string]int{}}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	go h.batchHeads()
	if h.logger == nil {
		h.logger = slog.New(slog.DiscardHandler)
	}
	h.metrics = cfg.Metrics.WatchStreams(func() float64 { return float64(h.open.Load()) })
	h.stopWatch = func() {}
	if cfg.Signals != nil {
		h.stopWatch = cfg.Signals.Watch(watcher{h})
	}
	return h
}

// Open returns how many streams are open.
func (h *Hub) Open() int { return int(h.open.Load()) }

// Close ends every stream, refuses new ones with 503, and stops watching
// the signals. herald's graceful stop calls it before it waits for the
// HTTP requests in flight, which a stream would otherwise outlast.
func (h *Hub) Close() {
	h.closeOnce.Do(func() {
		h.cancel()
		h.stopWatch()
	})
}

// watcher is the Hub's store.InboxWatcher.
type watcher struct{ h *Hub }

var _ store.InboxWatcher = watcher{}

// InboxChanged wakes the streams of those inboxes.
func (w watcher) InboxChanged(keys []store.InboxKey) {
	h := w.h
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, k := range keys {
		if g := h.groups[k]; g != nil {
			g.signalled()
		}
	}
}

// InboxMissed wakes every stream.
func (w watcher) InboxMissed() {
	h := w.h
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, g := range h.groups {
		g.signalled()
	}
}

// signalled makes later reads fresh and wakes every stream of g; Hub.mu
// held.
func (g *group) signalled() {
	g.mu.Lock()
	g.head, g.items = nil, nil
	g.mu.Unlock()
	for s := range g.streams {
		s.poke()
	}
}

// poke wakes s unless a wake is pending already.
func (s *stream) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// acquire takes a slot, or reports that the cap is reached or the Hub closed.
func (h *Hub) acquire() bool {
	select {
	case <-h.ctx.Done():
		return false
	default:
	}
	if h.open.Add(1) > int64(h.cfg.MaxStreams) {
		h.open.Add(-1)
		return false
	}
	return true
}

// add registers s, or reports why not: its recipient has MaxPerRecipient
// streams open already (metrics.StreamRefusedRecipient), or its tenant
// MaxPerTenant (metrics.StreamRefusedTenant).
func (h *Hub) add(s *stream) (refused string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	g := h.groups[s.key]
	if g != nil && len(g.streams) >= h.cfg.MaxPerRecipient {
		return metrics.StreamRefusedRecipient
	}
	if h.tenants[s.key.Tenant] >= h.cfg.MaxPerTenant {
		return metrics.StreamRefusedTenant
	}
	h.tenants[s.key.Tenant]++
	if g == nil {
		g = &group{streams: map[*stream]struct{}{}}
		h.groups[s.key] = g
	}
	g.streams[s] = struct{}{}
	g.n.Add(1)
	s.g = g
	return ""
}

func (h *Hub) remove(s *stream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	g := h.groups[s.key]
	delete(g.streams, s)
	if g.n.Add(-1) == 0 {
		delete(h.groups, s.key)
	}
	if h.tenants[s.key.Tenant]--; h.tenants[s.key.Tenant] == 0 {
		delete(h.tenants, s.key.Tenant)
	}
}

// ServeHTTP serves GET /v1/me/stream behind auth.RequireRecipient.
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rcpt, ok := auth.RequiredRecipient(w, r)
	if !ok {
		return
	}
	after, resume, err := lastEventID(r)
	if err != nil {
		problem.Write(w, problem.Problem{Status: http.StatusBadRequest, Detail: err.Error(), Param: "Last-Event-ID"})
		return
	}
	if !h.acquire() {
		h.metrics.Refused(metrics.StreamRefusedServer)
		w.Header().Set("Retry-After", retryAfter)
		problem.New(w, http.StatusServiceUnavailable, "too many open streams on this server: retry later")
		return
	}
	defer h.open.Add(-1)
	s := &stream{key: store.InboxKey{Tenant: rcpt.Tenant, Recipient: rcpt.ID}, wake: make(chan struct{}, 1)}
	// Registered before the first read: a change that commits after that
	// read began wakes s.
	if refused := h.add(s); refused != "" {
		h.metrics.Refused(refused)
		w.Header().Set("Retry-After", retryAfter)
		detail := fmt.Sprintf("this recipient has %d streams open on this server, the most it may: close one, or retry later", h.cfg.MaxPerRecipient)
		if refused == metrics.StreamRefusedTenant {
			detail = fmt.Sprintf("this tenant's recipients have %d streams open on this server, the most they may: retry later", h.cfg.MaxPerTenant)
		}
		problem.New(w, http.StatusTooManyRequests, detail)
		return
	}
	defer h.remove(s)

	c := &conn{h: h, s: s, w: w, rc: http.NewResponseController(w), seq: after, unread: -1}
	ctx := r.Context()
	var first store.InboxBadge
	if !resume {
		if first, err = h.readBadge(ctx, s.key); err != nil {
			h.failed(ctx, err, "first badge")
			problem.New(w, http.StatusServiceUnavailable, "the store is unavailable")
			return
		}
		c.seq = first.Seq
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if resume {
		err = c.catchUp(ctx, false)
	} else {
		// The stream starts at the newest item: the badge is all there is
		// to send (a change since it was read has woken s).
		if err = c.badge(first.Unread); err == nil {
			err = c.flush()
		}
	}
	if err != nil {
		h.failed(ctx, err, "catch up")
		return
	}
	c.serve(ctx, rcpt.ExpiresAt)
}

// failed logs a stream that ends on an error other than its client's going.
func (h *Hub) failed(ctx context.Context, err error, what string) {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, errClosed) {
		return
	}
	h.logger.LogAttrs(ctx, slog.LevelWarn, "stream: ended", slog.String("step", what), slog.Any("error", err))
}

// lastEventID reads where a resumed stream starts.
func lastEventID(r *http.Request) (seq int64, ok bool, err error) {
	v := r.Header.Get("Last-Event-ID")
	if v == "" {
		v = r.URL.Query().Get("last_event_id")
	}
	if v == "" {
		return 0, false, nil
	}
	seq, err = strconv.ParseInt(v, 10, 64)
	if err != nil || seq < 0 {
		return 0, false, errors.New("Last-Event-ID must be the id of an event of this stream (a seq: 0 or more)")
	}
	return seq, true, nil
}

// conn is one stream's connection and where it stands.
type conn struct {
	h  *Hub
	s  *stream
	w  http.ResponseWriter
	rc *http.ResponseController
	// seq is the newest item sent (or the start); unread the last badge
	// sent, -1 before the first.
	seq    int64
	unread int64
	// pending: written since the last flush; sent: flushed since serve
	// last looked.
	pending, sent bool
	// deadline is the write deadline set last.
	deadline time.Time
}

// serve writes live events until the client goes, the Hub closes, the
// token expires or something fails.
func (c *conn) serve(ctx context.Context, expiresAt time.Time) {
	h := c.h
	now := time.Now()
	expireAt := now.Add(expiresAt.Sub(h.cfg.Clock.Now()))
	// The first heartbeat is due a Heartbeat after what the stream sent
	// before serve (its first badge, a catch-up): that write is forgotten
	// here, or it would put the first ping off by another Heartbeat, and a
	// proxy timing out idle reads at a little more than one would cut the
	// stream.
	c.sent = false
	pingAt := now.Add(h.cfg.Heartbeat)
	resyncAt := now.Add(jitter(h.cfg.Resync))
	timer := time.NewTimer(time.Until(earliest(expireAt, pingAt, resyncAt)))
	defer timer.Stop()
	for {
		var err error
		select {
		case <-ctx.Done():
			return
		case <-h.ctx.Done():
			return
		case <-c.s.wake:
			err = c.catchUp(ctx, true)
		case now := <-timer.C:
			if !now.Before(expireAt) {
				_ = c.comment("token expired")
				return
			}
			if !now.Before(resyncAt) {
				resyncAt = now.Add(jitter(h.cfg.Resync))
				err = c.catchUp(ctx, false)
			}
			if err == nil && !now.Before(pingAt) && !c.sent {
				err = c.comment("ping")
			}
		}
		if err != nil {
			h.failed(ctx, err, "live")
			return
		}
		if c.sent {
			c.sent = false
			pingAt = time.Now().Add(h.cfg.Heartbeat)
		}
		timer.Reset(time.Until(earliest(expireAt, pingAt, resyncAt)))
	}
}

func earliest(ts ...time.Time) time.Time {
	m := ts[0]
	for _, t := range ts[1:] {
		if t.Before(m) {
			m = t
		}
	}
	return m
}

// jitter returns d ± 10%.
func jitter(d time.Duration) time.Duration {
	return d - d/10 + rand.N(d/5+1)
}

// catchUp writes the items after c.seq and the badge if it changed (or was
// never sent), and flushes. A woken stream shares its reads (shared) with
// the others of its inbox; the first catch-up and the periodic ones read
// on their own.
func (c *conn) catchUp(ctx context.Context, shared bool) error {
	h := c.h
	hd, err := share(ctx, h.ctx, c.s.g, shared, 0, headSlot, func(ctx context.Context) (head, error) {
		return h.readHead(ctx, c.s.key)
	})
	if err != nil {
		return err
	}
	// The badge's seq is the newest item committed when it was read. One
	// new item came with it; reads and archives change the count alone;
	// only more than one new item takes another read.
	b := hd.badge
	if c.unread < 0 && c.seq > b.Seq {
		// A resume's first catch-up (no badge sent yet; its head read is
		// its own): an id past this recipient's newest item is not one
		// this recipient's stream sent (another account's, kept by the app
		// across a switch; a database restored or an inbox erased since).
		// Resuming after it would hold back every item until the ids
		// passed it: the stream starts at the newest item instead.
		c.seq = b.Seq
	}
	if hd.newest != nil && hd.before <= c.seq && c.seq < b.Seq {
		c.seq = b.Seq
		if err := c.write(hd.newest.event); err != nil {
			return err
		}
	}
	for c.seq < b.Seq {
		after := c.seq
		items, err := share(ctx, h.ctx, c.s.g, shared, after, itemsSlot, func(ctx context.Context) ([]item, error) {
			return h.readItems(ctx, c.s.key, after)
		})
		if err != nil {
			return err
		}
		for _, it := range items {
			c.seq = it.seq
			if err := c.write(it.event); err != nil {
				return err
			}
		}
		if len(items) < h.cfg.Page {
			// Every item up to b.Seq had committed when b was read: one
			// not read now was purged or erased, and is no reason to
			// read again.
			c.seq = max(c.seq, b.Seq)
			break
		}
	}
	if b.Unread != c.unread {
		if err := c.badge(b.Unread); err != nil {
			return err
		}
	}
	return c.flush()
}

// reading takes one of the Hub's read tokens, or fails when ctx ends
// first; release gives it back.
func (h *Hub) reading(ctx context.Context) (release func(), err error) {
	select {
	case h.reads <- struct{}{}:
		return func() { <-h.reads }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// readBadge reads key's badge with a read token.
func (h *Hub) readBadge(ctx context.Context, key store.InboxKey) (store.InboxBadge, error) {
	release, err := h.reading(ctx)
	if err != nil {
		return store.InboxBadge{}, err
	}
	defer release()
	return h.cfg.Store.InboxBadge(ctx, key.Tenant, key.Recipient)
}

func headSlot(g *group) **flight[head]    { return &g.head }
func itemsSlot(g *group) **flight[[]item] { return &g.items }

// readHead asks batchHeads for key's badge and newest item, archived or
// not, and waits for them.
func (h *Hub) readHead(ctx context.Context, key store.InboxKey) (head, error) {
	w := headWant{key: key, reply: make(chan headAnswer, 1)}
	h.headsMu.Lock()
	h.headsWanted = append(h.headsWanted, w)
	h.headsMu.Unlock()
	select {
	case h.headsAsked <- struct{}{}:
	default:
	}
	select {
	case a := <-w.reply:
		return a.hd, a.err
	case <-ctx.Done():
		return head{}, ctx.Err()
	case <-h.ctx.Done():
		return head{}, errClosed
	}
}

// batchHeads reads the heads the streams ask for until Close: each time a
// statement may start (a head flight and a read token free), it takes up
// to store.MaxInboxHeads of those asked since and reads them in one.
func (h *Hub) batchHeads() {
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-h.headsAsked:
		}
		for h.startHeads() {
		}
	}
}

// startHeads waits for a head flight and a read token and starts a
// statement of the heads asked for; false when none were asked (or the
// Hub closed).
func (h *Hub) startHeads() bool {
	select {
	case h.headFlights <- struct{}{}:
	case <-h.ctx.Done():
		return false
	}
	select {
	case h.reads <- struct{}{}:
	case <-h.ctx.Done():
		<-h.headFlights
		return false
	}
	release := func() {
		<-h.reads
		<-h.headFlights
	}
	batch := h.takeHeads()
	if len(batch) == 0 {
		release()
		return false
	}
	go func() {
		defer release()
		h.readHeads(batch)
	}()
	return true
}

// takeHeads takes up to store.MaxInboxHeads of the head reads asked for,
// oldest first.
func (h *Hub) takeHeads() []headWant {
	h.headsMu.Lock()
	defer h.headsMu.Unlock()
	n := min(len(h.headsWanted), store.MaxInboxHeads)
	batch := slices.Clone(h.headsWanted[:n])
	h.headsWanted = h.headsWanted[:copy(h.headsWanted, h.headsWanted[n:])]
	return batch
}

// readHeads reads batch's heads in one statement and answers each want,
// encoding each inbox's newest item once.
func (h *Hub) readHeads(batch []headWant) {
	keys := make([]store.InboxKey, len(batch))
	for i, w := range batch {
		keys[i] = w.key
	}
	got, err := h.cfg.Store.InboxHeads(h.ctx, keys)
	done := make(map[store.InboxKey]headAnswer, len(batch))
	for _, w := range batch {
		a, ok := done[w.key]
		if !ok {
			a.err = err
			if err == nil {
				a.hd, a.err = headOf(got[w.key])
			}
			done[w.key] = a
		}
		w.reply <- a
	}
}

// headOf is the head of a store.InboxHead: its newest item (encoded) only
// when it is the badge's newest seq.
func headOf(sh store.InboxHead) (head, error) {
	hd := head{badge: sh.Badge, before: sh.Before}
	if sh.Newest != nil && sh.Newest.Seq == sh.Badge.Seq {
		it, err := encodeItem(*sh.Newest)
		if err != nil {
			return head{}, err
		}
		hd.newest = &it
	}
	return hd, nil
}

// readItems reads a page of key's items after seq and encodes their events.
func (h *Hub) readItems(ctx context.Context, key store.InboxKey, after int64) ([]item, error) {
	release, err := h.reading(ctx)
	if err != nil {
		return nil, err
	}
	its, err := h.cfg.Store.InboxItemsAfter(ctx, key.Tenant, key.Recipient, after, h.cfg.Page)
	release()
	if err != nil {
		return nil, err
	}
	out := make([]item, len(its))
	for i, it := range its {
		if out[i], err = encodeItem(it); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// encodeItem encodes it's event once, for every stream that sends it.
func encodeItem(it store.InboxItem) (item, error) {
	// The feed's own item (inbox.Item): one shape wherever an app reads one.
	data, err := json.Marshal(inbox.ItemOf(it))
	if err != nil {
		return item{}, err
	}
	return item{seq: it.Seq, event: appendEvent(nil, it.Seq, "item", data)}, nil
}

// share runs read for a stream of g. When shared and g has other streams,
// it uses g's flight in slot instead if that one reads after the same seq
// and has not failed; otherwise it reads and leaves its read there for the
// others (until the next signal). A read left for the others runs under
// hub (the Hub's context), not ctx: it outlives the client of the stream
// that began it, and ends at Close like the streams waiting for it.
func share[T any](ctx, hub context.Context, g *group, shared bool, after int64,
	slot func(*group) **flight[T], read func(context.Context) (T, error)) (T, error) {
	if !shared || g.n.Load() < 2 {
		return read(ctx)
	}
	g.mu.Lock()
	p := slot(g)
	if f := *p; f != nil && f.after == after && !failedFlight(f) {
		g.mu.Unlock()
		select {
		case <-f.done:
			return f.val, f.err
		case <-ctx.Done():
			var zero T
			return zero, ctx.Err()
		}
	}
	f := &flight[T]{after: after, done: make(chan struct{})}
	*p = f
	g.mu.Unlock()
	f.val, f.err = read(hub)
	close(f.done)
	return f.val, f.err
}

// failedFlight reports whether f is done and failed: the next reader reads
// again rather than share an old error.
func failedFlight[T any](f *flight[T]) bool {
	select {
	case <-f.done:
		return f.err != nil
	default:
		return false
	}
}

func (c *conn) badge(unread int64) error {
	data, err := json.Marshal(inbox.Badge{UnreadCount: unread})
	if err != nil {
		return err
	}
	c.unread = unread
	return c.event("badge", data)
}

// event writes one event with id c.seq.
func (c *conn) event(name string, data []byte) error {
	return c.write(appendEvent(make([]byte, 0, len(data)+48), c.seq, name, data))
}

// appendEvent appends an event to buf: its id, name and one line of data.
func appendEvent(buf []byte, id int64, name string, data []byte) []byte {
	buf = append(buf, "id: "...)
	buf = strconv.AppendInt(buf, id, 10)
	buf = append(buf, "\nevent: "...)
	buf = append(buf, name...)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, data...)
	return append(buf, "\n\n"...)
}

// comment writes a comment line and flushes it.
func (c *conn) comment(text string) error {
	if err := c.write([]byte(": " + text + "\n\n")); err != nil {
		return err
	}
	return c.flush()
}

func (c *conn) write(b []byte) error {
	if now := time.Now(); !c.pending && c.deadline.Sub(now) < writeTimeout/2 {
		// A batch up to the next flush has at least half of writeTimeout;
		// the deadline moves only when less is left (setting it costs
		// about a tenth of a broadcast's work). An error means the writer
		// has no deadlines (a test's recorder): go on.
		c.deadline = now.Add(writeTimeout)
		_ = c.rc.SetWriteDeadline(c.deadline)
	}
	c.pending = true
	_, err := c.w.Write(b)
	return err
}

func (c *conn) flush() error {
	if !c.pending {
		return nil
	}
	c.pending, c.sent = false, true
	return c.rc.Flush()
}

package postgres

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/store"
)

// Inbox signals: "this recipient's inbox changed, look".
//
// A write that changed inboxes calls inboxChanged once it has committed.
// That tells this process's watchers at once, and queues the inboxes for
// the other processes: one NOTIFY each on the database's inbox channel,
// payload tenant + "\x1f" + recipient. The listener (listen.go) LISTENs on
// that channel beside the wake-up channels and turns each notification into
// a signal; after it (re)connects it signals Missed, because notifications
// sent while nobody listened are lost.
//
// The NOTIFYs go out after the write's commit, from a flusher of their own,
// not from inside the write's transaction: PostgreSQL serialises the
// commits of transactions that notify (see notifier), so a NOTIFY in every
// intake of an inbox kind would cost intake most of its group commit. The
// flusher sends whatever inboxes are pending in one statement, with
// synchronous_commit off (a signal need not survive a crash: the watchers'
// own periodic reads bound what a lost one costs), and the inboxes that
// change while it runs go out together in its next statement.
//
// A write that runs on a caller's connection, and so cannot act after its
// commit (CreateTx, herald.Enqueue in the application's transaction), may
// NOTIFY in its statement instead: pg_notify(<qInboxChannel>, tenant ||
// chr(31) || recipient), delivered at its commit.

const (
	// qInboxChannel names the inbox channel in SQL, as inboxChannel does in
	// Go, for a statement that NOTIFYs on the caller's connection.
	qInboxChannel = `'herald_inbox_' || left(md5(current_database() || '.' || current_schema()), 8)`

	// qInboxNotify sends one NOTIFY per payload of $2 on channel $1 (an
	// empty payload: any inbox may have changed), without waiting for its
	// commit record to reach the disk.
	qInboxNotify = `SELECT set_config('synchronous_commit', 'off', true), count(pg_notify($1::text, p))
FROM unnest($2::text[]) AS p`
)

const (
	// inboxSep separates tenant and recipient in a payload.
	inboxSep = "\x1f"
	// inboxNotifyBatch caps the NOTIFYs of one flush statement.
	inboxNotifyBatch = 1000
	// inboxPendingMax caps the inboxes waiting for the flusher; past it one
	// empty payload stands for all of them.
	inboxPendingMax = 100_000
	// inboxPayloadMax is the longest payload PostgreSQL accepts.
	inboxPayloadMax = 7999
)

// inboxChannel names the inbox channel of one database and schema, with the
// suffix of the wake-up channels (wakeChannels).
func inboxChannel(db, schema string) string {
	sum := md5.Sum([]byte(db + "." + schema))
	return "herald_inbox_" + hex.EncodeToString(sum[:])[:8]
}

// InboxSignals returns the inbox signals of this process and, through
// LISTEN, of every process on this database and schema.
func (s *Store) InboxSignals() *store.InboxSignals { return &s.inboxSignals }

// inboxChanged announces, after its commit, a write that changed these
// recipients' inboxes: a new item, a read mark, an archive, a purge or an
// erasure. Call it only once the write committed, and only for inboxes it
// changed. It never blocks on the database.
func (s *Store) inboxChanged(keys ...store.InboxKey) {
	if len(keys) == 0 {
		return
	}
	s.inboxSignals.Changed(keys...)
	s.inboxNotify.add(keys)
}

// inboxHeard turns a notification on the inbox channel into a signal.
func (s *Store) inboxHeard(payload string) {
	tenant, recipient, ok := strings.Cut(payload, inboxSep)
	if !ok {
		s.inboxSignals.Missed()
		return
	}
	s.inboxSignals.Changed(store.InboxKey{Tenant: tenant, Recipient: recipient})
}

// inboxNotifier queues inboxes for the other processes and flushes them.
type inboxNotifier struct {
	s       *Store
	mu      sync.Mutex
	pending map[store.InboxKey]struct{}
	all     bool // too many pending, or one too long: send one empty payload
	running bool // a flusher runs
	sent    atomic.Int64
}

func newInboxNotifier(s *Store) *inboxNotifier {
	return &inboxNotifier{s: s, pending: map[store.InboxKey]struct{}{}}
}

// add queues keys and starts a flusher unless one runs.
func (n *inboxNotifier) add(keys []store.InboxKey) {
	n.mu.Lock()
	for _, k := range keys {
		switch {
		case n.all:
		case len(k.Tenant)+len(inboxSep)+len(k.Recipient) > inboxPayloadMax, len(n.pending) >= inboxPendingMax:
			n.all = true
			clear(n.pending)
		default:
			n.pending[k] = struct{}{}
		}
	}
	start := !n.running
	n.running = true
	n.mu.Unlock()
	if !start {
		return
	}
	if n.s.goBackground() != nil {
		return // closed: nothing will listen to this process any more
	}
	go n.flush()
}

// take removes up to inboxNotifyBatch payloads from the queue; none means
// the queue is empty, and the flusher stops (running is cleared with the
// queue's lock held, so an add after it starts another).
func (n *inboxNotifier) take() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.all {
		n.all = false
		return []string{""}
	}
	out := make([]string, 0, min(len(n.pending), inboxNotifyBatch))
	for k := range n.pending {
		if len(out) == inboxNotifyBatch {
			break
		}
		delete(n.pending, k)
		out = append(out, k.Tenant+inboxSep+k.Recipient)
	}
	if len(out) == 0 {
		n.running = false
	}
	return out
}

// failed stands one empty payload for the payloads a flush could not send
// (and everything pending): the next flush tells the other processes that
// any inbox may have changed. A payload the database refuses cannot hold
// the queue up that way.
func (n *inboxNotifier) failed() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.all = true
	clear(n.pending)
}

// flush sends the queue until it is empty, retrying with backoff while the
// database fails.
func (n *inboxNotifier) flush() {
	defer n.s.wg.Done()
	backoff := reconnectMin
	for {
		payloads := n.take()
		if len(payloads) == 0 {
			return
		}
		err := n.send(payloads)
		if err == nil {
			n.sent.Add(int64(len(payloads)))
			backoff = reconnectMin
			continue
		}
		n.failed()
		if n.s.life.Err() != nil {
			return
		}
		// The payloads name recipients: log how many, not which.
		n.s.logger.LogAttrs(n.s.life, slog.LevelWarn, "postgres: inbox signals not sent; retrying",
			slog.Int("inboxes", len(payloads)), slog.Duration("retry_in", backoff), slog.Any("error", err))
		if !clock.Sleep(n.s.life, jitter(backoff)) {
			return
		}
		backoff = min(2*backoff, reconnectMax)
	}
}

func (n *inboxNotifier) send(payloads []string) error {
	ctx, cancel := context.WithTimeout(n.s.life, opTimeout)
	defer cancel()
	_, err := n.s.pool.Exec(ctx, qInboxNotify, n.s.inboxChannel, payloads)
	return err
}

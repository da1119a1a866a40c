package postgres

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/store"
)

// Inbox signals: "this recipient's inbox changed, look".
//
// A write that changed inboxes calls inboxChanged once it has committed.
// That tells this process's watchers at once, and queues the inboxes for
// the other processes, as NOTIFYs on the database's inbox channel. The
// listener (listen.go) LISTENs on that channel beside the wake-up channels
// and turns each notification into a signal; after it (re)connects it
// signals Missed, because notifications sent while nobody listened are
// lost.
//
// A payload names inboxes in one of two forms: one inbox as tenant +
// "\x1f" + recipient, or several as "\x1e" + a JSON array of [tenant,
// recipient] pairs; the empty payload says any inbox may have changed.
//
// The NOTIFYs go out after the write's commit, from a flusher of their own,
// not from inside the write's transaction: PostgreSQL serialises the
// commits of transactions that notify (see notifier), so a NOTIFY in every
// intake of an inbox kind would cost intake most of its group commit. The
// flusher packs whatever inboxes are pending into as few payloads as fit
// (each NOTIFY costs the server a queue entry and every listening backend
// a wake-up; with one per inbox, intake of an inbox kind ran at two thirds
// of its rate), sends them in one statement with synchronous_commit off (a
// signal need not survive a crash: the watchers' own periodic reads bound
// what a lost one costs), and waits inboxFlushGap after a statement before
// the next, so the inboxes that change meanwhile go out together.
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
	// inboxSep separates tenant and recipient in a payload of one inbox.
	inboxSep = "\x1f"
	// inboxMany starts a payload of several inboxes (a JSON array of
	// [tenant, recipient] pairs follows).
	inboxMany = "\x1e"
	// inboxNotifyBatch caps the NOTIFYs of one flush statement.
	inboxNotifyBatch = 100
	// inboxPendingMax caps the inboxes waiting for the flusher; past it one
	// empty payload stands for all of them.
	inboxPendingMax = 100_000
	// inboxPayloadMax is the longest payload PostgreSQL accepts.
	inboxPayloadMax = 7999
	// inboxFlushGap is the least time between two flush statements: what
	// a signal may wait for company, against a stream's budget of a second.
	inboxFlushGap = 10 * time.Millisecond
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
	if keys, ok := decodeInboxPayload(payload); ok {
		s.inboxSignals.Changed(keys...)
		return
	}
	s.inboxSignals.Missed()
}

// decodeInboxPayload reads the inboxes a payload names; ok is false for
// the empty payload (any inbox) and for one it cannot read.
func decodeInboxPayload(payload string) (keys []store.InboxKey, ok bool) {
	if list, many := strings.CutPrefix(payload, inboxMany); many {
		var pairs [][2]string
		if err := json.Unmarshal([]byte(list), &pairs); err != nil || len(pairs) == 0 {
			return nil, false
		}
		keys = make([]store.InboxKey, len(pairs))
		for i, p := range pairs {
			keys[i] = store.InboxKey{Tenant: p[0], Recipient: p[1]}
		}
		return keys, true
	}
	tenant, recipient, ok := strings.Cut(payload, inboxSep)
	if !ok {
		return nil, false
	}
	return []store.InboxKey{{Tenant: tenant, Recipient: recipient}}, true
}

// inboxPayloads packs keys into as few payloads as fit in
// inboxPayloadMax bytes each (a key alone in a payload takes the short
// form). A key too long for any payload is left out and reported.
func inboxPayloads(keys []store.InboxKey) (payloads []string, tooLong bool) {
	var group []store.InboxKey
	size := len(inboxMany) + len("[]")
	flush := func() {
		switch len(group) {
		case 0:
			return
		case 1:
			payloads = append(payloads, group[0].Tenant+inboxSep+group[0].Recipient)
		default:
			pairs := make([][2]string, len(group))
			for i, k := range group {
				pairs[i] = [2]string{k.Tenant, k.Recipient}
			}
			b, _ := json.Marshal(pairs)
			payloads = append(payloads, inboxMany+string(b))
		}
		group, size = group[:0], len(inboxMany)+len("[]")
	}
	for _, k := range keys {
		b, _ := json.Marshal([2]string{k.Tenant, k.Recipient})
		if len(inboxMany)+len("[]")+len(b) > inboxPayloadMax {
			tooLong = true
			continue
		}
		if size+len(b)+1 > inboxPayloadMax {
			flush()
		}
		group, size = append(group, k), size+len(b)+1
	}
	flush()
	return payloads, tooLong
}

// inboxNotifier queues inboxes for the other processes and flushes them.
type inboxNotifier struct {
	s       *Store
	mu      sync.Mutex
	pending map[store.InboxKey]struct{}
	all     bool         // too many pending, or one too long: send one empty payload
	running bool         // a flusher runs
	sent    atomic.Int64 // inboxes sent (each empty payload counts one)
	notifys atomic.Int64 // payloads sent
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
		case len(n.pending) >= inboxPendingMax:
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

// take removes what one flush statement sends from the queue: the payloads
// and how many inboxes they name. None means the queue is empty, and the
// flusher stops (running is cleared with the queue's lock held, so an add
// after it starts another).
func (n *inboxNotifier) take() (payloads []string, inboxes int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.all {
		n.all = false
		return []string{""}, 1
	}
	keys := make([]store.InboxKey, 0, min(len(n.pending), inboxNotifyBatch*64))
	for k := range n.pending {
		if len(keys) == cap(keys) {
			break
		}
		delete(n.pending, k)
		keys = append(keys, k)
	}
	payloads, tooLong := inboxPayloads(keys)
	if tooLong {
		payloads = append(payloads, "")
	}
	if len(payloads) == 0 {
		n.running = false
	}
	return payloads, len(keys)
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

// flush sends the queue until it is empty, a statement at most every
// inboxFlushGap, retrying with backoff while the database fails.
func (n *inboxNotifier) flush() {
	defer n.s.wg.Done()
	backoff := reconnectMin
	for {
		payloads, inboxes := n.take()
		if len(payloads) == 0 {
			return
		}
		began := time.Now()
		err := n.send(payloads)
		if err == nil {
			n.sent.Add(int64(inboxes))
			n.notifys.Add(int64(len(payloads)))
			backoff = reconnectMin
			if !clock.Sleep(n.s.life, inboxFlushGap-time.Since(began)) {
				return
			}
			continue
		}
		n.failed()
		if n.s.life.Err() != nil {
			return
		}
		// The payloads name recipients: log how many, not which.
		n.s.logger.LogAttrs(n.s.life, slog.LevelWarn, "postgres: inbox signals not sent; retrying",
			slog.Int("inboxes", inboxes), slog.Duration("retry_in", backoff), slog.Any("error", err))
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

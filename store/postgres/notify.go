package postgres

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldhq/herald/heraldtype"
)

// notifier decides which creates NOTIFY other processes, and when.
//
// PostgreSQL serialises the commits of transactions that sent a NOTIFY (each
// holds a global lock from pre-commit until its commit record is flushed), so
// a NOTIFY in every create would turn group commit into one fsync per
// notification: on the 2-core reference machine intake fell from about 2,400
// to under 1,000 notifications/s. So per lane, a create sends its NOTIFY
// inside its own statement (delivered at commit) only if the lane's last one
// went out at least interval ago. A create inside the interval skips it, and
// once it has committed a single trailing NOTIFY, sent on its own at the end
// of the interval, announces every such create. Either way a NOTIFY follows
// each committed row within about interval, and never precedes its commit.
// This process's own claimers are woken locally after every create.
type notifier struct {
	s        *Store
	interval time.Duration
	mu       sync.Mutex
	lanes    map[heraldtype.Lane]*laneNotify
	trailing atomic.Int64 // trailing NOTIFYs sent (tests)
}

type laneNotify struct {
	last    time.Time   // when the lane's last NOTIFY was sent
	pending bool        // a create committed since then without its own
	timer   *time.Timer // the trailing NOTIFY, when one is scheduled
}

func newNotifier(s *Store, interval time.Duration) *notifier {
	n := &notifier{s: s, interval: interval, lanes: make(map[heraldtype.Lane]*laneNotify, len(heraldtype.Lanes))}
	for _, l := range heraldtype.Lanes {
		n.lanes[l] = &laneNotify{}
	}
	return n
}

// inStatement returns the channel a create on lane should NOTIFY in its
// statement, or "" if it should leave that to a trailing NOTIFY.
func (n *notifier) inStatement(l heraldtype.Lane) string {
	ln, ok := n.lanes[l]
	if !ok {
		return ""
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Now()
	if now.Sub(ln.last) < n.interval {
		return ""
	}
	ln.last = now
	return n.s.channels[l]
}

// committed records a create on lane that committed a due row without a
// NOTIFY of its own, and schedules the trailing one.
func (n *notifier) committed(l heraldtype.Lane) {
	ln, ok := n.lanes[l]
	if !ok {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	ln.pending = true
	if ln.timer == nil {
		ln.timer = time.AfterFunc(max(0, time.Until(ln.last.Add(n.interval))), func() { n.trail(l) })
	}
}

// trail sends the lane's trailing NOTIFY.
func (n *notifier) trail(l heraldtype.Lane) {
	if n.s.goBackground() != nil {
		return // closed
	}
	defer n.s.wg.Done()
	ln := n.lanes[l]
	n.mu.Lock()
	ln.timer = nil
	send := ln.pending
	ln.pending = false
	if send {
		ln.last = time.Now()
	}
	n.mu.Unlock()
	if !send {
		return
	}
	ctx, cancel := context.WithTimeout(n.s.life, opTimeout)
	defer cancel()
	if _, err := n.s.pool.Exec(ctx, qNotify, n.s.channels[l]); err != nil {
		// Claimers poll as well; a lost wake-up only delays.
		n.s.logger.LogAttrs(ctx, slog.LevelDebug, "postgres: trailing wake-up failed",
			slog.String("lane", string(l)), slog.Any("error", err))
		return
	}
	n.trailing.Add(1)
}

// stop cancels the scheduled trailing NOTIFYs (Close).
func (n *notifier) stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ln := range n.lanes {
		if ln.timer != nil {
			ln.timer.Stop()
			ln.timer = nil
		}
	}
}

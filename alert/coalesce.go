package alert

import (
	"context"
	"sync"
	"time"
)

// Coalesce passes alerts on to Next, but at most Burst of one kind and
// reason in each window of Every; the rest of that window are counted and
// passed on as one alert when the window ends (Count, MessageID and
// Tenant empty, Reason the same). A flood of one cause — a campaign whose
// every SMS parks for the same unencodable text, a provider timing out on
// every call — then reaches the log as its first alerts, each naming its
// message, and one line a window saying how many more; different causes
// never hide each other. Count what herald raised from
// herald_alerts_total, which counts every alert.
//
// Run emits the windows' counts as they end (within a window more); without
// it they go out with the next alert after the window, or at Flush, which
// the owner calls last, once nothing raises alerts any more.
type Coalesce struct {
	Next  Sink
	Every time.Duration
	Burst int
	// Now is the clock (nil: time.Now).
	Now func() time.Time

	mu     sync.Mutex
	window time.Time // when the current window began
	seen   map[coalesceKey]int
}

type coalesceKey struct{ kind, reason string }

func (c *Coalesce) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// Alert passes a on, or counts it when its kind and reason had Burst
// alerts in this window already.
func (c *Coalesce) Alert(ctx context.Context, a Alert) {
	c.mu.Lock()
	held := c.rollLocked()
	k := coalesceKey{a.Kind, a.Reason}
	if c.seen == nil {
		c.seen = map[coalesceKey]int{}
	}
	c.seen[k]++
	pass := c.seen[k] <= c.Burst
	c.mu.Unlock()
	c.emit(ctx, held)
	if pass {
		c.Next.Alert(ctx, a)
	}
}

// Flush ends the current window: its held counts go out now.
func (c *Coalesce) Flush(ctx context.Context) {
	c.mu.Lock()
	held := c.heldLocked()
	c.seen, c.window = nil, time.Time{}
	c.mu.Unlock()
	c.emit(ctx, held)
}

// Run ends each window as its time comes, until ctx is done.
func (c *Coalesce) Run(ctx context.Context) {
	t := time.NewTicker(c.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.mu.Lock()
			held := c.rollLocked()
			c.mu.Unlock()
			c.emit(ctx, held)
		}
	}
}

// rollLocked starts a new window when the current one is over, returning
// the old one's held counts.
func (c *Coalesce) rollLocked() []Alert {
	now := c.now()
	if !c.window.IsZero() && now.Sub(c.window) < c.Every {
		return nil
	}
	held := c.heldLocked()
	c.window, c.seen = now, nil
	return held
}

// heldLocked is an alert per kind and reason with alerts held back.
func (c *Coalesce) heldLocked() []Alert {
	var out []Alert
	for k, n := range c.seen {
		if n > c.Burst {
			out = append(out, Alert{Kind: k.kind, Reason: k.reason, Count: n - c.Burst})
		}
	}
	return out
}

func (c *Coalesce) emit(ctx context.Context, held []Alert) {
	for _, a := range held {
		c.Next.Alert(ctx, a)
	}
}

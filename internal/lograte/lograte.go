// Package lograte lets through, once per interval, a log line that every
// request would otherwise write while a cause lasts (the store away for
// a failover: one "store unavailable" a request, thousands a minute), and
// counts the lines it held back so the next one can say how many.
package lograte

import (
	"sync"
	"time"
)

// Limiter passes one line per Every. The zero value passes one a second.
type Limiter struct {
	Every time.Duration

	mu   sync.Mutex
	last time.Time
	held int
}

// Allow reports whether a line may be written at now and, when it may,
// how many were held back since the last one passed.
func (l *Limiter) Allow(now time.Time) (ok bool, held int) {
	every := l.Every
	if every <= 0 {
		every = time.Second
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < every && !now.Before(l.last) {
		l.held++
		return false, 0
	}
	held, l.held, l.last = l.held, 0, now
	return true, held
}

// Package clock is the seam through which herald reads time. Production code
// uses Real; tests use a Fake and move time instead of sleeping.
package clock

import (
	"context"
	"sync"
	"time"
)

// Clock tells the time.
type Clock interface {
	Now() time.Time
}

// Real is the system clock.
type Real struct{}

// Now returns time.Now.
func (Real) Now() time.Time { return time.Now() }

// Fake is a clock tests move by hand. Its zero value is not usable; use NewFake.
type Fake struct {
	mu  sync.Mutex
	now time.Time
}

// NewFake returns a Fake set to t.
func NewFake(t time.Time) *Fake { return &Fake{now: t} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the fake time forward by d.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

// IsReal reports whether c is the system clock. Stores use it to decide
// whether to take time from the database server instead.
func IsReal(c Clock) bool {
	_, ok := c.(Real)
	return ok
}

// Sleep waits for d on the system clock, or until ctx is done, and reports
// whether the whole wait passed. Retry and reconnect pauses use it; they are
// not read through a Clock, so tests shorten them or cancel ctx instead.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

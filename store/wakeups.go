package store

import (
	"github.com/heraldhq/herald/heraldtype"
)

// Wakeups fans "a row became due" signals out to the lane's claimer. A signal
// is a hint: claimers also poll, so a lost or coalesced signal only delays.
type Wakeups struct {
	ch map[heraldtype.Lane]chan struct{}
}

// NewWakeups returns a signal per lane.
func NewWakeups() *Wakeups {
	w := &Wakeups{ch: make(map[heraldtype.Lane]chan struct{}, len(heraldtype.Lanes))}
	for _, l := range heraldtype.Lanes {
		w.ch[l] = make(chan struct{}, 1)
	}
	return w
}

// Notify wakes the lane's claimer without blocking; signals coalesce.
func (w *Wakeups) Notify(l heraldtype.Lane) {
	if c, ok := w.ch[l]; ok {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// C returns the lane's signal channel.
func (w *Wakeups) C(l heraldtype.Lane) <-chan struct{} { return w.ch[l] }

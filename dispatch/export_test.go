package dispatch

import "time"

// FreeSlots is how many slots an offer may take now: those free beyond a
// claim's pledge.
func FreeSlots(c *Claimer) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.free() - c.pledged
}

// Pledged is the limit of the claim under way, whose slots offers may not
// take (0: none under way).
func Pledged(c *Claimer) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pledged
}

// SetMarkClock gives r's backlog marks the clock now; call it before r
// runs.
func SetMarkClock(r *Relay, now func() time.Time) { r.now = now }

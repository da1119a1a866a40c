package dispatch

// FreeSlots is how many slots an offer may take now: those free beyond a
// claim's pledge.
func FreeSlots(c *Claimer) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.free() - c.pledged
}

package stream

// HeadsWanted is how many head reads h's streams have asked for that no
// statement has taken yet: a test waits on it to know every woken stream
// has asked.
func HeadsWanted(h *Hub) int {
	h.headsMu.Lock()
	defer h.headsMu.Unlock()
	return len(h.headsWanted)
}

package apns

import "time"

// PoolState reports the connections a's pool holds and whether it is
// dialling another.
func PoolState(a *APNs) (conns int, dialing bool) {
	a.pool.mu.Lock()
	defer a.pool.mu.Unlock()
	return len(a.pool.conns), a.pool.dialing
}

// SetProvenAfter changes how long an unanswered new connection holds up
// the next dial; call it before the first Send.
func SetProvenAfter(a *APNs, d time.Duration) { a.pool.provenAfter = d }

package dispatch

import "testing"

// TestARelaysClaimLoopsEachKeepTheirBacklog: with several claim loops, a
// loop whose claim found nothing (its sibling holding the due rows) does
// not clear the backlog a sibling's full claim found; offers wait until
// every loop's last claim came back short.
func TestARelaysClaimLoopsEachKeepTheirBacklog(t *testing.T) {
	t.Parallel()
	r := NewRelay(RelayConfig{Claimers: 2})
	r.openHands()
	refused := func(when string) {
		t.Helper()
		if h := r.Offer("t1", ""); h != nil {
			h.Drop()
			t.Fatalf("an offer %s", when)
		}
	}
	a, b := true, true // neither has looked
	a = r.claimLooked(a, false)
	refused("before the second loop looked")
	b = r.claimLooked(b, true)
	refused("after the second loop's full claim")
	r.claimLooked(a, false)
	refused("after the first loop found nothing beside the second's full claim")
	r.claimLooked(b, false)
	h := r.Offer("t1", "")
	if h == nil {
		t.Fatal("no offer after both loops' claims came back short")
	}
	h.Drop()
	r.closeHands()
}

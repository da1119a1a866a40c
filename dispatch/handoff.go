package dispatch

import (
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// Hand is a place an Offer holds for one row intake is about to write due
// now: Take it or Drop it, once.
type Hand interface {
	// Claim is the lease the create writes the row under.
	Claim() *store.CreateClaim
	// Take hands over row, the row the create wrote claimed for this
	// offer.
	Take(row store.Claimed)
	// Drop gives the place back: the create wrote no row claimed.
	Drop()
}

// Offerer hands rows over: a Claimer (db transport) or a Relay
// (rabbitmq transport).
type Offerer interface {
	// Offer holds a place for a row of tenant's scope, or returns nil.
	Offer(tenant, scope string) Hand
}

// claimerHand is a slot a Claimer's Offer holds.
type claimerHand struct {
	c             *Claimer
	tenant, scope string
}

// Offer holds a free slot of the lane for a row of tenant's scope that
// intake is about to write due now, or returns nil (see "Rows handed over
// at intake"). A nil Claimer offers nothing.
func (c *Claimer) Offer(tenant, scope string) Hand {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running {
		return nil
	}
	if !c.offerable(tenant, scope) {
		if c.backlog {
			// Its row waits in the outbox behind the backlog: later
			// offers of other tenants weigh against it too.
			c.wait(scopeOf{tenant, scope})
		}
		return nil
	}
	c.slots <- struct{}{}
	c.places <- struct{}{}
	c.held.reserve(tenant, scope)
	c.handing.Add(1)
	return &claimerHand{c: c, tenant: tenant, scope: scope}
}

// offerable reports whether an offer of a slot may be made for a row of
// tenant's scope, under mu ("Rows handed over at intake").
func (c *Claimer) offerable(tenant, scope string) bool {
	if c.free()-c.pledged < 1 {
		return false
	}
	if c.backlog {
		// With a reserve, the share bounds a waiting tenant's other scopes
		// (below) as a claim would, at othersLimit, and keeps the rest of
		// the reserve for the other tenants; a full claim never leaves a
		// tenant past that.
		top := c.top
		if c.Reserve > 0 {
			top = c.othersLimit()
		}
		if !c.held.before(tenant, scope, c.waiting, top) {
			return false
		}
	}
	if _, skip := c.share(1); skip.Tenant != "" && skip.Tenant == tenant && (skip.Scope == nil || *skip.Scope == scope || skip.Cap < 1) {
		return false
	}
	return c.fits(tenant, scope)
}

// fits reports whether a send of tenant's scope fits its share beside a
// claim under way, under mu. The claim may bring up to its limit
// (pledged) of the tenant's rows, or, where it leaves some of them
// (pledgedSkip), none or its cap of the tenant's other scopes' rows; the
// offer is counted as share would count it once they have come. The
// tenant may hold up to the bound (Concurrency − Reserve); past it, a
// scope holding fewer sends than the tenant's fullest may, while the
// fullest holds all but half the reserve of the tenant's sends, up to
// the bound plus half the reserve. A claim that leaves none of the
// tenant's rows brings its waiting scopes' (the offer's scope waits not:
// held.before), counted in the fullest; one that leaves the fullest
// brings other scopes', counted in the offer's.
func (c *Claimer) fits(tenant, scope string) bool {
	if c.Reserve <= 0 || c.pledged <= 0 {
		return true
	}
	skip, bring := c.pledgedSkip, c.pledged
	switch {
	case skip.Tenant != tenant:
	case skip.Scope == nil:
		bring = 0
	case skip.Cap > 0:
		bring = min(bring, skip.Cap)
	}
	all, fullest, ours := c.held.within(tenant, scope)
	n := all + bring
	if n+1 <= c.Concurrency-c.Reserve {
		return true
	}
	if ours >= fullest {
		return false // the offer's scope is its tenant's fullest
	}
	if skip.Tenant == tenant {
		ours += bring
	} else {
		fullest += bring
	}
	return ours < fullest && c.othersRoom(n, fullest) >= 1
}

// Claim is the lease the create writes the row under: the claimer's.
func (h *claimerHand) Claim() *store.CreateClaim {
	return &store.CreateClaim{Owner: h.c.Owner, Lease: h.c.Lease}
}

// Take starts the send of row, the row the create wrote claimed for this
// offer: its tenant and scope are the offer's, under which its send was
// counted in flight.
func (h *claimerHand) Take(row store.Claimed) {
	c := h.c
	c.held.hold(row)
	c.work <- row // a place is held: never blocks
	c.handing.Done()
}

// Drop gives the slot back: the create wrote no row claimed.
func (h *claimerHand) Drop() {
	c := h.c
	c.held.called(store.Claimed{Job: heraldtype.Job{Tenant: h.tenant, Scope: h.scope}})
	<-c.slots
	<-c.places
	c.signalFreed()
	c.handing.Done()
}

// Lanes are a process's claimers or relays by lane, for intake's offers.
type Lanes map[heraldtype.Lane]Offerer

// Offer is the lane's Offerer's Offer; nil where the lane has none (a Go
// API client).
func (l Lanes) Offer(lane heraldtype.Lane, tenant, scope string) Hand {
	if o := l[lane]; o != nil {
		return o.Offer(tenant, scope)
	}
	return nil
}

package dispatch

import (
	"context"
	"time"

	"github.com/heraldhq/herald/store"
)

// relayHand is a place a Relay's Offer holds for one row.
type relayHand struct{ r *Relay }

// Offer holds a place in the relay's next publication for a row of
// tenant's scope that intake is about to write due now, or returns nil (see
// "Rows handed over at intake" in the Relay's doc). A nil Relay offers
// nothing.
func (r *Relay) Offer(tenant, scope string) Hand {
	if r == nil {
		return nil
	}
	r.handMu.Lock()
	defer r.handMu.Unlock()
	if !r.handOpen || r.handHeld >= cap(r.hands) || r.disconnected.Load() {
		return nil
	}
	// The window counts the row from now: its depth as last read, and
	// every message published or handed over and not yet confirmed.
	// While the depth cannot be read the claims publish without the
	// window (room), and so do offers.
	windowed := r.Window > 0 && r.Backlog != nil && !r.depthFailing.Load()
	waits := int(r.depth.Load() + r.unconfirmed.Load())
	if r.handFull > 0 || windowed && waits+1 > r.Window {
		// Past a backlog or a full window only to the express queue: a
		// tenant's scope without a mark, beside one that has one, within
		// the claims' allowance past the window.
		if !r.Express || !windowed || r.handBlind > 0 || waits+1 > r.Window+ExpressPastWindow || !r.besideBacklog(tenant, scope) {
			return nil
		}
	}
	r.handHeld++
	r.unconfirmed.Add(1)
	r.handing.Add(1)
	return relayHand{r: r}
}

// Claim is the lease the create writes the row under: the relay's,
// PUBLISHING.
func (h relayHand) Claim() *store.CreateClaim {
	return &store.CreateClaim{Owner: h.r.Owner, Lease: h.r.Lease, Publishing: true}
}

// Take queues row for the relay's next publication.
func (h relayHand) Take(row store.Claimed) {
	h.r.hands <- row // a place is held: never blocks
	h.r.handing.Done()
}

// Drop gives the place back.
func (h relayHand) Drop() {
	r := h.r
	r.handMu.Lock()
	r.handHeld--
	r.handMu.Unlock()
	r.unconfirmed.Add(-1)
	r.handing.Done()
}

// claimLooked records whether a claim loop's claim came back full, was
// (its last claim's), and returns full: offers wait while any loop's last
// claim came back full, rows being due before the ones intake would hand
// over. Each loop keeps its own, so a loop that found nothing (its
// sibling holding the due rows) does not clear a sibling's backlog.
func (r *Relay) claimLooked(was, full bool) bool {
	return r.countLoops(&r.handFull, was, full)
}

// claimSeen records whether a claim loop's claim saw what is due, was
// (its last claim's), and returns seen: false for one that failed, and
// until a loop's first claim has looked. While any loop's is false no
// offer goes past a backlog or a full window (Offer): what is due is not
// known.
func (r *Relay) claimSeen(was, seen bool) bool {
	return !r.countLoops(&r.handBlind, !was, !seen)
}

// countLoops moves *n, the claim loops for which something holds, by one
// loop's change from was to now, under handMu, and returns now.
func (r *Relay) countLoops(n *int, was, now bool) bool {
	if was != now {
		r.handMu.Lock()
		if now {
			*n++
		} else {
			*n--
		}
		r.handMu.Unlock()
	}
	return now
}

// openHands starts taking offers; Run calls it before its claim loops
// start, with no offer taken until the first claim has looked.
func (r *Relay) openHands() {
	r.handMu.Lock()
	r.hands = make(chan store.Claimed, r.BatchSize)
	r.handOpen, r.handFull, r.handBlind = true, r.Claimers, r.Claimers
	r.handMu.Unlock()
}

// closeHands refuses new offers, waits for those made to be taken or
// dropped, and ends the hand loop's input.
func (r *Relay) closeHands() {
	r.handMu.Lock()
	r.handOpen = false
	r.handMu.Unlock()
	r.handing.Wait()
	close(r.hands)
}

// handLoop publishes the rows handed over, in batches: what is queued
// when it looks, at most BatchSize, cooling down as a claim loop does
// (a batch of CoolAfter rows or more short of BatchSize starts the next
// no sooner than Cooldown after it began), so a steady stream goes to the
// broker in fewer, larger publications while a lone row goes at once. It
// returns when the hands are closed and every row queued is published.
func (r *Relay) handLoop(ctx context.Context, batches chan<- inflight) {
	cool := cooler{every: r.Cooldown}
	for {
		first, ok := <-r.hands
		if !ok {
			return
		}
		cool.wait(ctx, nil, nil) // cut short by shutdown: what is queued goes now
		began := time.Now()
		rows := []store.Claimed{first}
	gather:
		for len(rows) < r.BatchSize {
			select {
			case row, ok := <-r.hands:
				if !ok {
					break gather
				}
				rows = append(rows, row)
			default:
				break gather
			}
		}
		r.handMu.Lock()
		r.handHeld -= len(rows)
		r.handMu.Unlock()
		r.refreshDepth(ctx)
		// The publish and its gate are not cancelled by shutdown: the rows
		// are the relay's already, as a claim's are.
		b := r.gate(context.WithoutCancel(ctx), rows)
		r.unconfirmed.Add(-int64(len(b.held))) // counted from their offers
		b.rows, b.confirms = r.publish(ctx, b.rows, r.markedNow())
		batches <- b
		cool.claimed(began, len(rows), r.BatchSize)
	}
}

// refreshDepth reads the lane's queues' depth again when the depth as
// last known is half the window or more. Rows handed over start no
// claim, and the claims are what read the depth (room); without this the
// depth last read, to which each confirmed message is added as waiting
// (settle), would only grow, and offers would be refused while the
// consumers keep the queue empty. Read once a batch at most, as a claim
// reads it, and then only once each half window of confirms; a read that
// fails counts as the claims' do (readDepth).
func (r *Relay) refreshDepth(ctx context.Context) {
	if r.Window <= 0 || r.Backlog == nil || int(r.depth.Load()) < r.Window/2 {
		return
	}
	r.readDepth(ctx)
}

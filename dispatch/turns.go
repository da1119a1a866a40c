package dispatch

import "github.com/heraldhq/herald/store"

// lastServed returns the tenant a claim of rows, made with
// OutboxClaimParams.After set to after, served last: the next claim's
// After, so that equal turns go on round the tenants from there ("Tenants
// take turns" in the package doc). It returns after when rows is empty.
//
// The claim gives its rows turn by turn, each turn's ties going round the
// tenants from the first after After; it returns its rows oldest first,
// without their turns. The tenants that got the most rows reached the
// claim's last turn, so the last of them in that round is the tenant
// served last. That is exact for a claim of one row, and for any claim
// whose tenants had as many rows in flight as each other (a relay's
// tenants, whose published rows are no longer in flight). Otherwise it is
// an estimate: the next claim's ties start after a tenant this claim
// served, which keeps the round going, if not exactly where it stopped.
func lastServed(rows []store.Claimed, after string) string {
	per := make(map[string]int, len(rows))
	most := 0
	for _, row := range rows {
		per[row.Tenant]++
		most = max(most, per[row.Tenant])
	}
	last, found := after, false
	for t, n := range per {
		if n == most && (!found || laterInRound(t, last, after)) {
			last, found = t, true
		}
	}
	return last
}

// laterInRound reports whether tenant a comes after tenant b in a round
// of ties that starts after after: the tenants above after in byte order
// first, then those up to it (the claim's "tenant <= After, tenant").
func laterInRound(a, b, after string) bool {
	aWrapped, bWrapped := a <= after, b <= after
	if aWrapped != bWrapped {
		return aWrapped
	}
	return a > b
}

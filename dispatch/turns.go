package dispatch

import (
	"cmp"
	"slices"

	"github.com/heraldhq/herald/store"
)

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
	return lastInRound(rows, func(r store.Claimed) string { return r.Tenant }, after)
}

// lastInRound is lastServed for the rows' keys by key: tenants, or the
// scopes of one tenant's rows.
func lastInRound(rows []store.Claimed, key func(store.Claimed) string, after string) string {
	per := make(map[string]int, len(rows))
	most := 0
	for _, row := range rows {
		k := key(row)
		per[k]++
		most = max(most, per[k])
	}
	last, found := after, false
	for k, n := range per {
		if n == most && (!found || laterInRound(k, last, after)) {
			last, found = k, true
		}
	}
	return last
}

// maxRoundScopes bounds round.scopes, which each claim passes to the
// store (a longer memory costs every claim a longer look-up): past it the
// tenants served longest ago are forgotten, which only restarts their
// rounds of scopes.
const maxRoundScopes = 256

// round is a claim loop's memory of whom its claims served last: the
// tenant (OutboxClaimParams.After) and, in each tenant whose rows have a
// scope, the scope (OutboxClaimParams.Scopes). The claim's ties inside a
// tenant go round its scopes as its ties between tenants go round the
// tenants; one memory for the whole loop would restart a tenant's round
// each time another tenant was served between, and the tenant's first
// scope would take all its turns.
type round struct {
	after  string
	scopes map[string]string
	// claims counts the claims served; at is when each tenant in scopes
	// was last served.
	claims int64
	at     map[string]int64
}

// served remembers what a claim of rows, made with r's params, served.
func (r *round) served(rows []store.Claimed) {
	r.after = lastServed(rows, r.after)
	r.claims++
	// A tenant goes round its scopes once any of its rows has one (its
	// unscoped rows, scope "", are one of them). A tenant the memory does
	// not hold starts its round after "", as the claim's ties do (scope <=
	// coalesce(last, '')): its scoped rows first.
	var scoped map[string]bool
	for _, row := range rows {
		if _, known := r.scopes[row.Tenant]; row.Scope != "" || known {
			if scoped == nil {
				scoped = map[string]bool{}
			}
			scoped[row.Tenant] = true
		}
	}
	if len(scoped) == 0 {
		return
	}
	byTenant := make(map[string][]store.Claimed, len(scoped))
	for _, row := range rows {
		if scoped[row.Tenant] {
			byTenant[row.Tenant] = append(byTenant[row.Tenant], row)
		}
	}
	if r.scopes == nil {
		r.scopes, r.at = map[string]string{}, map[string]int64{}
	}
	for tenant, rs := range byTenant {
		r.scopes[tenant] = lastInRound(rs, func(r store.Claimed) string { return r.Scope }, r.scopes[tenant])
		r.at[tenant] = r.claims
	}
	if over := len(r.scopes) - maxRoundScopes; over > 0 {
		// Forget the tenants served longest ago.
		oldest := make([]string, 0, len(r.at))
		for tenant := range r.at {
			oldest = append(oldest, tenant)
		}
		slices.SortFunc(oldest, func(a, b string) int { return cmp.Compare(r.at[a], r.at[b]) })
		for _, tenant := range oldest[:over] {
			delete(r.scopes, tenant)
			delete(r.at, tenant)
		}
	}
}

// laterInRound reports whether tenant (or scope) a comes after b in a
// round of ties that starts after after: those above after in byte order
// first, then those up to it (the claim's "tenant <= After, tenant").
func laterInRound(a, b, after string) bool {
	aWrapped, bWrapped := a <= after, b <= after
	if aWrapped != bWrapped {
		return aWrapped
	}
	return a > b
}

package storetest

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// inTenant creates a notification of tenant in the transactional lane,
// due at, and returns its id.
func inTenant(t *testing.T, b bundle, tenant string, at time.Time) string {
	t.Helper()
	p, _ := create(t, b, func(p *store.NotificationCreateParams) {
		p.Tenant = tenant
		if !at.IsZero() {
			p.SendAt = &at
		}
	})
	return p.ID
}

// inScope creates a notification of tenant's scope in the transactional
// lane, due now, and returns its id.
func inScope(t *testing.T, b bundle, tenant, scope string) string {
	t.Helper()
	p, _ := create(t, b, func(p *store.NotificationCreateParams) {
		p.Tenant, p.Scope = tenant, scope
	})
	return p.ID
}

// backlogOf creates n notifications of tenant's scope in the
// transactional lane, due now, a millisecond apart (oldest first).
func backlogOf(t *testing.T, b bundle, tenant, scope string, n int) {
	t.Helper()
	for range n {
		inScope(t, b, tenant, scope)
		b.clk.Advance(time.Millisecond)
	}
}

// scopesOf counts claimed rows per "tenant/scope".
func scopesOf(rows []store.Claimed) map[string]int {
	n := map[string]int{}
	for _, r := range rows {
		n[r.Tenant+"/"+r.Scope]++
	}
	return n
}

// claimOneAndEnd claims one transactional row with the round after and
// scopes (OutboxClaimParams.After, Scopes) and ends it DONE, so nothing
// stays in flight; a claim that takes no row fails the test.
func claimOneAndEnd(t *testing.T, b bundle, after string, scopes map[string]string) store.Claimed {
	t.Helper()
	rows, err := b.s.OutboxClaim(b.ctx, store.OutboxClaimParams{
		Lane: heraldtype.LaneTransactional, Owner: "w1", Limit: 1, Lease: time.Minute, After: after, Scopes: scopes,
	})
	if err != nil {
		t.Fatalf("OutboxClaim: %v", err)
	}
	if len(rows) != 1 {
		t.Fatalf("a claim of one took %d rows", len(rows))
	}
	if ok, err := b.s.OutboxComplete(b.ctx, rows[0].Fence, heraldtype.OutboxDone, ""); err != nil || !ok {
		t.Fatalf("OutboxComplete: %v, %v", ok, err)
	}
	return rows[0]
}

// tenantsOf counts claimed rows per tenant.
func tenantsOf(rows []store.Claimed) map[string]int {
	n := map[string]int{}
	for _, r := range rows {
		n[r.Tenant]++
	}
	return n
}

// Claims share a lane between its tenants (issue 12): a tenant's backlog,
// however old, does not hold another tenant's rows behind it.
func testFairness(t *testing.T, h Harness) {
	// The measured failure: tenant A's 30 rows came first, tenant B's one
	// after them. Oldest first across tenants, every claim took A's rows
	// until A's backlog was gone. Now a claim takes from the tenant with
	// fewer rows in flight first: A's oldest (a tie at none in flight,
	// going to the first tenant in byte order), then B's although A's
	// next is older.
	t.Run("ATenantsBacklogDoesNotHoldUpAnother", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		for range 30 {
			inTenant(t, b, "tenant-a", time.Time{})
			b.clk.Advance(time.Millisecond)
		}
		idB := inTenant(t, b, "tenant-b", time.Time{})
		first := claim(t, b, heraldtype.LaneTransactional, 1)
		if len(first) != 1 || first[0].Tenant != "tenant-a" {
			t.Fatalf("first claim: %v, want A's oldest", tenantsOf(first))
		}
		second := claim(t, b, heraldtype.LaneTransactional, 1)
		if len(second) != 1 || second[0].NotificationID != idB {
			t.Fatalf("second claim: %v, want B's row (A has one in flight)", tenantsOf(second))
		}
	})

	// A batch is shared by rows in flight: with A holding 10 and B none,
	// a claim of 6 takes B's 4 first, then A's oldest 2.
	t.Run("ABatchGoesFirstToTheTenantWithLessInFlight", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		for range 30 {
			inTenant(t, b, "tenant-a", time.Time{})
			b.clk.Advance(time.Millisecond)
		}
		if got := tenantsOf(claim(t, b, heraldtype.LaneTransactional, 10)); got["tenant-a"] != 10 {
			t.Fatalf("A alone: %v, want A's 10", got)
		}
		for range 4 {
			inTenant(t, b, "tenant-b", time.Time{})
		}
		rows := claim(t, b, heraldtype.LaneTransactional, 6)
		if got := tenantsOf(rows); got["tenant-b"] != 4 || got["tenant-a"] != 2 {
			t.Fatalf("claim of 6 with A 10 in flight: %v, want B 4 and A 2", got)
		}
		// Oldest first within a tenant, and the batch returned oldest first.
		for i := 1; i < len(rows); i++ {
			if rows[i].Tenant == rows[i-1].Tenant && rows[i].Fence.ID < rows[i-1].Fence.ID {
				t.Fatalf("rows of %s out of order: %d before %d", rows[i].Tenant, rows[i-1].Fence.ID, rows[i].Fence.ID)
			}
		}
	})

	// A tenant whose rows are deferred (scheduled, quiet hours) has no
	// turn until they are due, and takes none from a tenant whose rows are.
	t.Run("RowsNotDueTakeNoTurn", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		later := Epoch.Add(time.Hour)
		for range 5 {
			inTenant(t, b, "tenant-a", later)
		}
		inTenant(t, b, "tenant-c", time.Time{})
		inTenant(t, b, "tenant-b", time.Time{})
		if got := tenantsOf(claim(t, b, heraldtype.LaneTransactional, 10)); len(got) != 2 || got["tenant-b"] != 1 || got["tenant-c"] != 1 {
			t.Fatalf("claim: %v, want B's and C's one each", got)
		}
		b.clk.Advance(time.Hour)
		if got := tenantsOf(claim(t, b, heraldtype.LaneTransactional, 10)); got["tenant-a"] != 5 {
			t.Fatalf("claim when A's are due: %v, want A's 5", got)
		}
	})

	// A claim that skips a tenant (the claimer's tenant already at its
	// share of the slots) takes the other tenants' rows only, in their
	// turns, whoever is alone or first; with nobody else waiting it takes
	// nothing, and the skipped tenant's rows stay PENDING for the next.
	t.Run("AClaimSkipsTheTenantItIsToldTo", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		for range 5 {
			inTenant(t, b, "tenant-a", time.Time{})
			b.clk.Advance(time.Millisecond)
		}
		skipA := func(limit int) []store.Claimed {
			t.Helper()
			return claimSkipping(t, b, heraldtype.LaneTransactional, limit, "tenant-a")
		}
		if got := skipA(10); len(got) != 0 {
			t.Fatalf("A alone, skipped: %v, want nothing", tenantsOf(got))
		}
		idC := inTenant(t, b, "tenant-c", time.Time{})
		if got := skipA(10); len(got) != 1 || got[0].NotificationID != idC {
			t.Fatalf("A and C, A skipped: %v, want C's one", tenantsOf(got))
		}
		for range 3 {
			inTenant(t, b, "tenant-b", time.Time{})
		}
		inTenant(t, b, "tenant-c", time.Time{})
		if got := tenantsOf(skipA(10)); len(got) != 2 || got["tenant-b"] != 3 || got["tenant-c"] != 1 {
			t.Fatalf("A, B and C, A skipped: %v, want B's 3 and C's 1", got)
		}
		// Not skipped, A's five are all still there.
		if got := tenantsOf(claim(t, b, heraldtype.LaneTransactional, 10)); len(got) != 1 || got["tenant-a"] != 5 {
			t.Fatalf("claim without a skip: %v, want A's 5", got)
		}
	})

	// Claims of one row whose rows are settled before the next claim (a
	// claimer of one slot; a relay, whose published rows are no longer in
	// flight) find every tenant at the same turn. Each tie goes to the
	// first tenant after the one the claim before served
	// (OutboxClaimParams.After), wrapping round, so the tenants take the
	// rows in turn; by age, A's older backlog won all of them and B's and
	// C's rows waited behind its nine.
	t.Run("TiedTurnsGoRoundTheTenantsAfterTheLastServed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		for range 9 {
			inTenant(t, b, "tenant-a", time.Time{})
			b.clk.Advance(time.Millisecond)
		}
		for range 2 {
			inTenant(t, b, "tenant-c", time.Time{})
			inTenant(t, b, "tenant-b", time.Time{})
			b.clk.Advance(time.Millisecond)
		}
		after := ""
		var got []string
		for range 13 {
			after = claimOneAndEnd(t, b, after, nil).Tenant
			got = append(got, strings.TrimPrefix(after, "tenant-"))
		}
		if want := "a b c a b c a a a a a a a"; strings.Join(got, " ") != want {
			t.Fatalf("tenants claimed in the order %v, want %s", got, want)
		}
	})

	// A batch cut inside a turn gives that turn to the tenants after
	// After first, wrapping round past the last; After need not have rows.
	t.Run("ABatchCutInsideATurnStartsAfterTheLastServed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		for _, tn := range []string{"tenant-a", "tenant-b", "tenant-c", "tenant-d"} {
			for range 2 {
				inTenant(t, b, tn, time.Time{})
			}
		}
		rows, err := b.s.OutboxClaim(b.ctx, store.OutboxClaimParams{
			Lane: heraldtype.LaneTransactional, Owner: "w1", Limit: 3, Lease: time.Minute, After: "tenant-bb",
		})
		if err != nil {
			t.Fatalf("OutboxClaim: %v", err)
		}
		if got := tenantsOf(rows); len(got) != 3 || got["tenant-c"] != 1 || got["tenant-d"] != 1 || got["tenant-a"] != 1 {
			t.Fatalf("claim of 3 after tenant-bb: %v, want one each of C, D and A", got)
		}
	})

	// Every row is claimed exactly once while tenants compete: the fair
	// choice never loses or repeats one.
	t.Run("EveryRowOnceAcrossTenants", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		want := map[string]bool{}
		for i := range 45 {
			want[inTenant(t, b, []string{"tenant-a", "tenant-a", "tenant-b", "tenant-c", "tenant-a"}[i%5], time.Time{})] = true
		}
		seen := map[string]bool{}
		for range 100 {
			rows := claim(t, b, heraldtype.LaneTransactional, 4)
			if len(rows) == 0 {
				break
			}
			for _, r := range rows {
				if seen[r.NotificationID] {
					t.Fatalf("%s claimed twice", r.NotificationID)
				}
				seen[r.NotificationID] = true
			}
		}
		if len(seen) != len(want) {
			t.Fatalf("claimed %d of %d rows", len(seen), len(want))
		}
	})

	// A tenant the caller's memory does not hold starts its round of
	// scopes after the unscoped one, as a claim loop's round does (a
	// missing tenant is after ""): its scoped row is not held behind its
	// unscoped backlog by one-row claims, whose unscoped rows the loop
	// would never remember.
	t.Run("ATenantNotRememberedTakesItsScopedRowsFirst", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		backlogOf(t, b, "tenant-a", "", 3)
		inScope(t, b, "tenant-a", "x")
		if row := claimOneAndEnd(t, b, "", nil); row.Scope != "x" {
			t.Fatalf("first one-row claim took A/%q, want A/x", row.Scope)
		}
		if row := claimOneAndEnd(t, b, "tenant-a", map[string]string{"tenant-a": "x"}); row.Scope != "" {
			t.Fatalf("then A/%q, want an unscoped row", row.Scope)
		}
	})

	// A tenant's sends in flight count for its turns whichever scope they
	// are in, one whose queue has drained or one the claim skips: with
	// A's three in flight in scope x, B (nothing in flight) takes the first
	// turns over A's scope y. Counted only over the scopes still waiting,
	// a tenant spreading its sends over scopes looked idle.
	t.Run("ATenantsSendsInFlightCountInEveryScope", func(t *testing.T) {
		t.Parallel()
		for _, drained := range []bool{true, false} {
			b := setup(t, h)
			for range 3 {
				inScope(t, b, "tenant-a", "x")
			}
			if got := scopesOf(claim(t, b, heraldtype.LaneTransactional, 3)); got["tenant-a/x"] != 3 {
				t.Fatalf("A/x's claim: %v", got)
			}
			if !drained {
				inScope(t, b, "tenant-a", "x")
			}
			b.clk.Advance(time.Millisecond)
			for range 5 {
				inScope(t, b, "tenant-a", "y")
				inScope(t, b, "tenant-b", "")
			}
			x := "x"
			rows, err := b.s.OutboxClaim(b.ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w1", Limit: 3,
				Lease: time.Minute, Skip: map[bool]string{false: "tenant-a"}[drained], SkipScope: map[bool]*string{false: &x}[drained]})
			if err != nil {
				t.Fatalf("OutboxClaim: %v", err)
			}
			if got := scopesOf(rows); got["tenant-b/"] != 3 {
				t.Fatalf("A/x drained %v: claim of 3 took %v, want B's 3 (A has 3 in flight)", drained, got)
			}
		}
	})

	// A claim told to skip one scope of a tenant (that scope holds the
	// tenant's share of the slots by itself) takes the tenant's other
	// scopes' rows and the other tenants'; told to skip the tenant, none of
	// its rows.
	t.Run("AClaimSkipsOnlyTheScopeItIsToldTo", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		backlogOf(t, b, "tenant-a", "x", 5)
		skipping := func(scope *string) map[string]int {
			t.Helper()
			rows, err := b.s.OutboxClaim(b.ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w1", Limit: 10,
				Lease: time.Minute, Skip: "tenant-a", SkipScope: scope})
			if err != nil {
				t.Fatalf("OutboxClaim: %v", err)
			}
			return scopesOf(rows)
		}
		x := "x"
		if got := skipping(&x); len(got) != 0 {
			t.Fatalf("A/x alone, A/x skipped: %v, want nothing", got)
		}
		inScope(t, b, "tenant-a", "y")
		inScope(t, b, "tenant-b", "")
		if got := skipping(nil); len(got) != 1 || got["tenant-b/"] != 1 {
			t.Fatalf("tenant A skipped: %v, want B's one", got)
		}
		inScope(t, b, "tenant-a", "y")
		inScope(t, b, "tenant-b", "")
		if got := skipping(&x); len(got) != 2 || got["tenant-a/y"] != 2 || got["tenant-b/"] != 1 {
			t.Fatalf("A/x skipped: %v, want A/y's two (one left by the tenant's skip) and B's one", got)
		}
		if got := scopesOf(claim(t, b, heraldtype.LaneTransactional, 10)); len(got) != 1 || got["tenant-a/x"] != 5 {
			t.Fatalf("claim without a skip: %v, want A/x's 5, all still there", got)
		}
	})

	// A cap on a skipped scope's tenant (SkipCap) holds its other scopes'
	// rows to that many, and leaves the other tenants' rows uncapped.
	t.Run("AClaimCapsTheSkippedScopesTenantOnly", func(t *testing.T) {
		t.Parallel()
		for _, onlyA := range []bool{false, true} { // with B, or A/y alone (SQLite's one-scope claim)
			b := setup(t, h)
			for range 5 {
				inScope(t, b, "tenant-a", "y")
				if !onlyA {
					inScope(t, b, "tenant-b", "")
				}
			}
			x := "x"
			rows, err := b.s.OutboxClaim(b.ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w1", Limit: 10,
				Lease: time.Minute, Skip: "tenant-a", SkipScope: &x, SkipCap: 2})
			if err != nil {
				t.Fatalf("OutboxClaim: %v", err)
			}
			want := map[string]int{"tenant-a/y": 2, "tenant-b/": 5}
			if onlyA {
				delete(want, "tenant-b/")
			}
			if got := scopesOf(rows); !maps.Equal(got, want) {
				t.Fatalf("claim of 10 with A capped at 2 (B waiting %v): %v, want %v", !onlyA, got, want)
			}
		}
	})

	// With more scopes due than a claim takes rows, each claim reads only
	// the rows that can still win a turn (the first rows of the tenant's
	// least busy due scopes); which rows it takes is the same: the idle
	// scopes first, then the others in turn. Scopes whose rows are not due
	// yet (x0 to x3, due in a minute) do not count as idle ones: counted,
	// the third claim would read one row of s08 and s09 alone and take 2.
	t.Run("WithMoreScopesDueThanAClaimTakesTheIdleOnesGoFirst", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		soon := b.clk.Now().Add(time.Minute)
		for i := range 4 {
			create(t, b, func(p *store.NotificationCreateParams) { p.Scope, p.SendAt = fmt.Sprintf("x%d", i), &soon })
		}
		for i := range 10 {
			backlogOf(t, b, "t1", fmt.Sprintf("s%02d", i), 5)
		}
		for _, want := range []map[string]int{
			{"t1/s00": 1, "t1/s01": 1, "t1/s02": 1, "t1/s03": 1},
			{"t1/s04": 1, "t1/s05": 1, "t1/s06": 1, "t1/s07": 1},
			// s08 and s09 have nothing in flight; then every scope's next
			// row ties, in scope order.
			{"t1/s08": 1, "t1/s09": 1, "t1/s00": 1, "t1/s01": 1},
		} {
			if got := scopesOf(claim(t, b, heraldtype.LaneTransactional, 4)); !maps.Equal(got, want) {
				t.Fatalf("claim of 4: %v, want %v", got, want)
			}
		}
	})
	// A scope whose first due row has expired (not yet swept) has no row
	// to give: it does not count among the tenant's due scopes, so the
	// tenant's other scope still gives all its turns. Tenant a: x's one row
	// expired, y's two due; tenant b: one send in flight, one row due. A
	// claim of 2 takes y's two (turns 1 and 2; b's row ties at 2, a first).
	t.Run("AScopeWhoseFirstRowExpiredDoesNotCountAsDue", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		inScope(t, b, "b", "z")
		if rows := claim(t, b, heraldtype.LaneTransactional, 1); len(rows) != 1 {
			t.Fatalf("claimed %d of b's first row", len(rows))
		}
		expires := b.clk.Now().Add(time.Second)
		create(t, b, func(p *store.NotificationCreateParams) { p.Tenant, p.Scope, p.ExpiresAt = "a", "x", &expires })
		b.clk.Advance(time.Millisecond)
		y1, y2 := inScope(t, b, "a", "y"), inScope(t, b, "a", "y")
		inScope(t, b, "b", "z")
		b.clk.Advance(2 * time.Second)
		rows := claim(t, b, heraldtype.LaneTransactional, 2)
		if len(rows) != 2 || rows[0].NotificationID != y1 || rows[1].NotificationID != y2 {
			t.Fatalf("claim of 2: %v, want a's y1 and y2", scopesOf(rows))
		}
	})

	// Inside a tenant, its scopes take turns as tenants do: scope x's
	// older backlog does not hold up scope y's row, and the claim returns
	// each row's scope.
	t.Run("AScopesBacklogDoesNotHoldUpAnotherOfItsTenant", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		backlogOf(t, b, "tenant-a", "clinic-x", 30)
		idY := inScope(t, b, "tenant-a", "clinic-y")
		first := claim(t, b, heraldtype.LaneTransactional, 1)
		if got := scopesOf(first); got["tenant-a/clinic-x"] != 1 {
			t.Fatalf("first claim: %v, want x's oldest", got)
		}
		second := claim(t, b, heraldtype.LaneTransactional, 1)
		if len(second) != 1 || second[0].NotificationID != idY || second[0].Scope != "clinic-y" {
			t.Fatalf("second claim: %v, want y's row (x has one in flight)", scopesOf(second))
		}
	})

	// The lane is shared between tenants first: a tenant that spreads its
	// sends over five scopes takes no more of a claim than one with none,
	// and its half goes round its scopes.
	t.Run("ATenantsScopesShareItsTurnsNotTheLane", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		for range 4 {
			for _, sc := range []string{"s1", "s2", "s3", "s4", "s5"} {
				inScope(t, b, "tenant-a", sc)
			}
			b.clk.Advance(time.Millisecond)
		}
		backlogOf(t, b, "tenant-b", "", 20)
		rows := claim(t, b, heraldtype.LaneTransactional, 10)
		got := scopesOf(rows)
		if tenantsOf(rows)["tenant-a"] != 5 || got["tenant-b/"] != 5 {
			t.Fatalf("claim of 10: %v, want A 5 (one of each scope) and B 5", got)
		}
		for _, sc := range []string{"s1", "s2", "s3", "s4", "s5"} {
			if got["tenant-a/"+sc] != 1 {
				t.Fatalf("claim of 10: %v, want one of each of A's scopes", got)
			}
		}
	})

	// Claims of one row with nothing in flight between them: inside a
	// tenant, ties go round its scopes from the one after the scope the
	// caller served last in it (OutboxClaimParams.Scopes), while After
	// takes the claims round the tenants. Without the memory, tenant A's
	// first scope took every one of A's turns.
	t.Run("TiedTurnsGoRoundATenantsScopesAfterTheLastServed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		backlogOf(t, b, "tenant-a", "x", 4)
		for range 2 {
			inScope(t, b, "tenant-a", "y")
			inScope(t, b, "tenant-b", "")
			b.clk.Advance(time.Millisecond)
		}
		after, scopes := "", map[string]string{}
		var got []string
		for range 8 {
			row := claimOneAndEnd(t, b, after, scopes)
			after, scopes[row.Tenant] = row.Tenant, row.Scope
			got = append(got, strings.TrimPrefix(row.Tenant+"/"+row.Scope, "tenant-"))
		}
		if want := "a/x b/ a/y b/ a/x a/y a/x a/x"; strings.Join(got, " ") != want {
			t.Fatalf("claimed in the order %v, want %s", got, want)
		}
	})
}

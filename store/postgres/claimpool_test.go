package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// The claim runs on the claim pool's connections, prepared, and
// PostgreSQL runs its one generic plan there: no claim is planned again,
// and the main pool's connections never see claimSettings.
func TestTheClaimRunsItsGenericPlanOnItsOwnConnections(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t, "", Options{})
	for range 3 {
		if _, err := s.NotificationCreate(ctx, params(nil)); err != nil {
			t.Fatal(err)
		}
		rows, err := s.OutboxClaim(ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w", Limit: 1, Lease: time.Minute})
		if err != nil || len(rows) != 1 {
			t.Fatalf("claim: %d rows, %v", len(rows), err)
		}
	}
	if n := s.claims.Stat().TotalConns(); n != 1 {
		t.Fatalf("the claim pool holds %d connections after three claims one after another, want 1", n)
	}
	conn, err := s.claims.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for k, want := range claimSettings {
		var got string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", k).Scan(&got); err != nil || got != want {
			t.Errorf("the claim pool's %s is %q (%v), want %q", k, got, err, want)
		}
	}
	var generic, custom int64
	if err := conn.QueryRow(ctx, `SELECT coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0)
FROM pg_prepared_statements WHERE statement = $1`, qOutboxClaim).Scan(&generic, &custom); err != nil {
		t.Fatal(err)
	}
	if generic != 3 || custom != 0 {
		t.Errorf("the claim ran %d times on its generic plan and %d on a custom one, want 3 and 0", generic, custom)
	}

	main, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer main.Release()
	var seqscan string
	if err := main.QueryRow(ctx, "SHOW enable_seqscan").Scan(&seqscan); err != nil || seqscan != "on" {
		t.Errorf("the main pool's enable_seqscan is %q (%v), want on", seqscan, err)
	}
}

// WarmUp leaves the claim pool's connections and warmMain of the main
// pool's open and idle, the claim's with its settings, and a closed store
// reports it cannot.
func TestWarmUpOpensTheConnectionsAhead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t, "", Options{})
	if n := s.claims.Stat().TotalConns(); n != 0 {
		t.Fatalf("the claim pool holds %d connections before any claim, want 0", n)
	}
	if err := s.WarmUp(ctx); err != nil {
		t.Fatal(err)
	}
	if st := s.claims.Stat(); st.TotalConns() != claimConns || st.IdleConns() != claimConns {
		t.Fatalf("after WarmUp the claim pool holds %d connections, %d idle; want %d, all idle", st.TotalConns(), st.IdleConns(), claimConns)
	}
	if st := s.pool.Stat(); st.TotalConns() < warmMain || st.IdleConns() < warmMain {
		t.Fatalf("after WarmUp the main pool holds %d connections, %d idle; want at least %d idle", st.TotalConns(), st.IdleConns(), warmMain)
	}
	var got string
	if err := s.claims.QueryRow(ctx, "SELECT current_setting('plan_cache_mode')").Scan(&got); err != nil || got != claimSettings["plan_cache_mode"] {
		t.Fatalf("a warmed claim connection's plan_cache_mode = %q (%v)", got, err)
	}
	if n := s.claims.Stat().TotalConns(); n != claimConns {
		t.Fatalf("a query after WarmUp opened more: %d claim connections", n)
	}
	s.Close()
	if err := s.WarmUp(ctx); err == nil {
		t.Fatal("WarmUp on a closed store: no error")
	}
}

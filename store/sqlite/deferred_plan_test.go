package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/store"
)

// deferredLane opens a store on a fake clock whose transactional lane
// holds, written through intake, one row due tomorrow in each of scopes
// clinics of tenant t1 and due rows due now in clinic "due", then ANALYZE;
// it is closed when the test ends.
func deferredLane(t *testing.T, scopes, due int) (*Store, time.Time) {
	t.Helper()
	ctx := context.Background()
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	s, err := Open(ctx, filepath.Join(t.TempDir(), "herald.db"), Options{Clock: clock.NewFake(t0)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	tomorrow := t0.Add(20 * time.Hour)
	create := func(id, scope string, sendAt *time.Time) error {
		_, err := s.NotificationCreate(ctx, store.NotificationCreateParams{
			Tenant: "t1", ID: id, Recipient: "r-" + id, EventID: "e-" + id, Kind: "reminder", Lane: heraldtype.LaneTransactional,
			Params: json.RawMessage(`{}`), Channels: []heraldtype.Channel{heraldtype.ChannelSMS}, SendAt: sendAt, Scope: scope,
		})
		return err
	}
	// At once, so that the writer commits them in batches.
	errs := make([]error, scopes+due)
	var wg sync.WaitGroup
	for i := range scopes {
		wg.Go(func() { errs[i] = create(fmt.Sprintf("ntf_later_%05d", i), fmt.Sprintf("clinic-%05d", i), &tomorrow) })
	}
	for i := range due {
		wg.Go(func() { errs[scopes+i] = create(fmt.Sprintf("ntf_due_%05d", i), "due", nil) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.wdb.ExecContext(ctx, `ANALYZE`); err != nil {
		t.Fatal(err)
	}
	return s, t0
}

// tableScans returns the steps of plan that scan the outbox or one of its
// indexes whole (the statements name it outbox, o, x or y), but for the
// allowed ones.
func tableScans(plan string, allowed ...string) []string {
	var out []string
	for line := range strings.Lines(plan) {
		line = strings.TrimSpace(line)
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "SCAN" && slices.Contains([]string{"outbox", "o", "x", "y"}, f[1]) && !slices.Contains(allowed, line) {
			out = append(out, line)
		}
	}
	return out
}

// A lane whose 2,000 clinics (scopes) have each scheduled tomorrow's
// reminders, beside one clinic with rows due, claims as if that clinic
// alone had rows: the rows due tomorrow are written deferred, out of
// outbox_fair, so the claim's loose scan over the lane's (tenant, scope)s
// visits one, where it visited all 2,001 and paid a probe for each on
// every claim (store/promote.go). SQLite keeps no page counts; the pairs
// visited are counted by running qOutboxClaim's loose scan itself, and
// the plans say that no part of the claim reads outbox_deferred or the
// table.
func TestTheClaimDoesNotVisitTheScopesWithOnlyDeferredRows(t *testing.T) {
	t.Parallel()
	if testenv.WithoutRace(t) {
		return
	}
	const scopes, due = 2000, 5
	s, t0 := deferredLane(t, scopes, due)
	ctx := context.Background()
	now := t0.UnixMilli()

	start, end := strings.Index(qOutboxClaim, "WITH RECURSIVE groups"), strings.Index(qOutboxClaim, "busy AS (")
	if start < 0 || end < start {
		t.Fatal("no loose scan (groups) found in qOutboxClaim")
	}
	loose := strings.TrimRight(qOutboxClaim[start:end], " \n,") + "\nSELECT count(*) FROM groups"
	var visited int
	if err := s.rdb.QueryRowContext(ctx, loose, nil, nil, nil, nil, "transactional").Scan(&visited); err != nil {
		t.Fatalf("the claim's loose scan: %v", err)
	}
	if visited != 1 {
		t.Errorf("the claim's loose scan visits %d (tenant, scope)s, want 1: the one with due rows", visited)
	}
	var first, firstScope string
	var another bool
	if err := s.rdb.QueryRowContext(ctx, qOutboxLaneTenants, "transactional").Scan(&first, &firstScope, &another); err != nil {
		t.Fatal(err)
	}
	if first != "t1" || firstScope != "due" || another {
		t.Errorf("the lane's (tenant, scope)s as the claim finds them: first (%s, %s), another %v; want (t1, due) alone", first, firstScope, another)
	}

	args := []any{"CLAIMED", "w", now + time.Minute.Milliseconds(), now, "transactional", now, now, 16}
	for name, plan := range map[string]string{
		"the fair claim":          queryPlan(t, s, qOutboxClaim, append(args, nil, "", "{}", nil, nil)...),
		"the one-scope claim":     queryPlan(t, s, qOutboxClaimOneTenant, append(args, "t1", "due")...),
		"the lane's pairs' probe": queryPlan(t, s, qOutboxLaneTenants, "transactional"),
	} {
		if strings.Contains(plan, "outbox_deferred") {
			t.Errorf("%s reads outbox_deferred:\n%s", name, plan)
		}
		// The one scan allowed is the fair claim's of the rows in flight.
		if scans := tableScans(plan, "SCAN outbox USING INDEX outbox_leased"); len(scans) > 0 {
			t.Errorf("%s scans %v:\n%s", name, scans, plan)
		}
		if !strings.Contains(plan, "USING COVERING INDEX outbox_fair (lane=?") && !strings.Contains(plan, "USING INDEX outbox_fair (lane=?") {
			t.Errorf("%s does not search outbox_fair:\n%s", name, plan)
		}
	}

	rows, err := s.OutboxClaim(ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w", Limit: 100, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != due {
		t.Errorf("the claim took %d rows, want the %d due", len(rows), due)
	}
	for _, r := range rows {
		if r.Scope != "due" {
			t.Errorf("the claim took %s of %q, not due", r.MessageID, r.Scope)
		}
	}
	var deferred int
	if err := s.rdb.QueryRowContext(ctx, `SELECT count(*) FROM outbox WHERE deferred = 1 AND state = 'PENDING'`).Scan(&deferred); err != nil {
		t.Fatal(err)
	}
	if deferred != scopes {
		t.Errorf("%d rows due tomorrow are deferred after the claim, want %d", deferred, scopes)
	}
}

// The claim's promotion and the backlog's count of the deferred rows
// search outbox_deferred up to their bound: neither reads tomorrow's rows
// nor the table.
func TestThePromotionAndTheBacklogSearchTheDeferredRowsUpToTheirBound(t *testing.T) {
	t.Parallel()
	s, t0 := deferredLane(t, 500, 5)
	now := t0.UnixMilli()
	const bounded = "outbox_deferred (lane=? AND available_at<?)"
	promote := queryPlan(t, s, qOutboxPromote, "transactional", now+store.DeferHorizon.Milliseconds(), store.PromoteBatch)
	if !strings.Contains(promote, bounded) || len(tableScans(promote)) > 0 {
		t.Errorf("the promotion does not search outbox_deferred up to its bound:\n%s", promote)
	}
	// The rows in the claim's index are counted from outbox_fair read
	// whole, as before there were deferred rows.
	backlog := queryPlan(t, s, qOutboxBacklog, now)
	if !strings.Contains(backlog, bounded) || len(tableScans(backlog, "SCAN outbox USING COVERING INDEX outbox_fair")) > 0 {
		t.Errorf("the backlog does not count the deferred rows on outbox_deferred up to now:\n%s", backlog)
	}
}

// With more (tenant, scope)s due than the claim takes rows, each one's
// walk reads only the rows that can still win a turn (qOutboxClaim's
// caps): 100 idle clinics with 200 due rows each make a claim of 32 read
// one row of each, where it read 32 of each (a claim took 25 ms, 11 ms
// after). Counted by running the claim's steps up to its reads.
func TestTheClaimReadsOnlyTheRowsThatCanWinWhenScopesOutnumberIt(t *testing.T) {
	t.Parallel()
	if testenv.WithoutRace(t) {
		return
	}
	ctx := context.Background()
	s, t0 := spreadLane(t, 20000, 100)
	start, end := strings.Index(qOutboxClaim, "WITH RECURSIVE groups"), strings.Index(qOutboxClaim, "cand AS (")
	if start < 0 || end < start {
		t.Fatal("no steps up to the reads (cand) found in qOutboxClaim")
	}
	upToReads := strings.TrimRight(qOutboxClaim[start:end], " \n,") + "\nSELECT count(*), count(DISTINCT scope) FROM reads"
	now := t0.UnixMilli()
	var rows, scopes int
	if err := s.rdb.QueryRowContext(ctx, upToReads, nil, nil, nil, nil, "transactional", now, now, 32, nil, nil, "{}", nil).
		Scan(&rows, &scopes); err != nil {
		t.Fatalf("the claim's reads: %v", err)
	}
	if scopes != 100 || rows != 100 {
		t.Fatalf("the claim reads %d rows of %d scopes, want one of each of the 100", rows, scopes)
	}
	claimed, err := s.OutboxClaim(ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w", Limit: 32, Lease: time.Minute})
	if err != nil || len(claimed) != 32 {
		t.Fatalf("claim: %d rows (%v), want 32", len(claimed), err)
	}
}

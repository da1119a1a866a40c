package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/storetest"
)

// Delivery claims waiting in one batch insert their rows with one merged
// statement, and each gets what it would have got alone, in the batch's
// order: new messages are claimed at attempt 1; a second claim of one of
// them in the same batch finds the first's row; a message whose row is
// SENDING already gets that row; one in a due RETRY_WAIT is claimed again
// at attempt 2.
func TestMergedDeliveryClaimsMatchSingleOnes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk, ids := mergeStore(t, 5)
	claimParams := func(id string) store.DeliveryClaimParams {
		return store.DeliveryClaimParams{MessageID: id + ".webhook", NotificationID: id, Tenant: "t1",
			Channel: heraldtype.ChannelWebhook, Provider: "p", Owner: "w"}
	}
	// ids[3]'s row is SENDING; ids[4]'s waits in RETRY_WAIT, due.
	for _, i := range []int{3, 4} {
		if res, err := s.DeliveryClaim(ctx, claimParams(ids[i])); err != nil || !res.Claimed || res.Attempt != 1 {
			t.Fatalf("claim %d first: %+v (%v)", i, res, err)
		}
	}
	if _, err := s.DeliveryRecord(ctx, store.DeliveryRecordParams{MessageID: ids[4] + ".webhook", Attempt: 1,
		State: heraldtype.DeliveryRetryWait, Reason: "HTTP_503", RetryDelay: time.Second, Owner: "w", Class: "x", StartedAt: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Second)

	batch := []struct {
		name    string
		id      string
		claimed bool
		attempt int
		current heraldtype.DeliveryState
	}{
		{"new", ids[0], true, 1, ""},
		{"another new", ids[1], true, 1, ""},
		{"the first again", ids[0], false, 0, heraldtype.DeliverySending},
		{"a third new", ids[2], true, 1, ""},
		{"one SENDING already", ids[3], false, 0, heraldtype.DeliverySending},
		{"a due retry", ids[4], true, 2, ""},
	}
	var sizes []int
	var mu sync.Mutex
	s.pipe.merged = func(n int) { mu.Lock(); sizes = append(sizes, n); mu.Unlock() }
	s.pipe.rerun = func(n int) { t.Errorf("a batch of %d was rerun statement by statement", n) }
	queued, release := hold(t, s.pipe, s.pool, 4345)
	results := make([]store.DeliveryClaimResult, len(batch))
	errs := make([]error, len(batch))
	done := make(chan struct{}, len(batch))
	for i, c := range batch {
		go func() { results[i], errs[i] = s.DeliveryClaim(ctx, claimParams(c.id)); done <- struct{}{} }()
		storetest.Receive(t, queued, fmt.Sprintf("claim %q was queued", c.name)) // in order
	}
	release()
	for range batch {
		storetest.Receive(t, done, "a claim returned")
	}
	mu.Lock()
	if len(sizes) == 0 || sizes[0] != len(batch) {
		t.Errorf("merged statements stood for %v claims, want the first for %d", sizes, len(batch))
	}
	mu.Unlock()
	for i, c := range batch {
		r := results[i]
		switch {
		case errs[i] != nil:
			t.Errorf("%s: %v", c.name, errs[i])
		case r.Claimed != c.claimed || r.Attempt != c.attempt:
			t.Errorf("%s: claimed %v at attempt %d; want %v at %d", c.name, r.Claimed, r.Attempt, c.claimed, c.attempt)
		case !c.claimed && (r.Current == nil || r.Current.State != c.current || r.Current.MessageID != c.id+".webhook"):
			t.Errorf("%s: current row %+v; want its row, %s", c.name, r.Current, c.current)
		}
	}
	var sending int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE state = 'SENDING' AND claimed_by = 'w'`).Scan(&sending); err != nil || sending != 5 {
		t.Errorf("%d rows SENDING (%v); want the 5 messages' one each", sending, err)
	}
}

// takeCase is one claim under an event key of runClaimTakeCases.
type takeCase struct {
	name  string
	n     int    // the notification whose webhook send it claims
	event string // its event key's event id
}

// runClaimTakeCases sets up keys and rows, claims cases under their keys
// merged (one held batch) or one by one, and returns each claim's result
// and the tables afterwards, named by notification.
func runClaimTakeCases(t *testing.T, cases []takeCase, mode runMode, merges bool) ([]string, []string) {
	t.Helper()
	ctx := context.Background()
	s, clk, ids := mergeStore(t, 7)
	claim := func(n int, event string) store.DeliveryClaimParams {
		return store.DeliveryClaimParams{MessageID: ids[n] + ".webhook", NotificationID: ids[n], Tenant: "t1",
			Channel: heraldtype.ChannelWebhook, Provider: "p", Owner: "w",
			Event: &store.EventKeyTakeParams{Key: store.EventKey{Tenant: "t1", Recipient: "r1", EventID: event, Kind: "k"},
				Owner: ids[n], Lease: 10 * time.Minute}}
	}
	// e-own is notification 1's already, e-other notification 5's, and
	// notification 3's send has its row (claimed under e3).
	for _, c := range []struct {
		n     int
		event string
	}{{1, "e-own"}, {5, "e-other"}, {3, "e3"}} {
		if res, err := s.DeliveryClaim(ctx, claim(c.n, c.event)); err != nil || !res.Claimed {
			t.Fatalf("set-up claim of %d: %+v (%v)", c.n, res, err)
		}
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM deliveries WHERE message_id = $1`, ids[1]+".webhook"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	results := make([]store.DeliveryClaimResult, len(cases))
	errs := make([]error, len(cases))
	switch {
	case mode != alone && merges:
		queueBatch(t, s, mode, 4350, false, len(cases), func(i int) (err error) {
			results[i], err = s.DeliveryClaim(ctx, claim(cases[i].n, cases[i].event))
			return err
		})
	case mode != alone:
		// A batch the merge refuses: its claims run one by one in it.
		var mu sync.Mutex
		var sizes []int
		s.pipe.merged = func(n int) { mu.Lock(); sizes = append(sizes, n); mu.Unlock() }
		s.pipe.rerun = func(n int) { t.Errorf("a batch of %d was rerun statement by statement", n) }
		queued, release := hold(t, s.pipe, s.pool, 4346)
		done := make(chan struct{}, len(cases))
		for i, c := range cases {
			go func() { results[i], errs[i] = s.DeliveryClaim(ctx, claim(c.n, c.event)); done <- struct{}{} }()
			storetest.Receive(t, queued, fmt.Sprintf("claim %q was queued", c.name)) // in order
		}
		release()
		for range cases {
			storetest.Receive(t, done, "a claim returned")
		}
		mu.Lock()
		if len(sizes) != 0 {
			t.Errorf("merged statements stood for %v claims; want none", sizes)
		}
		mu.Unlock()
	default:
		for i, c := range cases {
			results[i], errs[i] = s.DeliveryClaim(ctx, claim(c.n, c.event))
		}
	}
	name := map[string]string{}
	for i, id := range ids {
		name[id] = fmt.Sprint("n", i)
	}
	var got []string
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("%s: %v", cases[i].name, errs[i])
		}
		cur := "-"
		if r.Current != nil {
			cur = string(r.Current.State)
		}
		got = append(got, fmt.Sprintf("claimed %v attempt %d current %s key %s until %s", r.Claimed, r.Attempt, cur, r.Event.Outcome,
			r.Event.LeaseUntil.Format(time.TimeOnly)))
	}
	var tables []string
	rows, err := s.pool.Query(ctx, `SELECT 'key ' || event_id || ' ' || owner || ' ' || lease_until || ' ' || taken_at FROM event_keys
UNION ALL SELECT 'delivery ' || notification_id || ' ' || state || ' ' || attempts || ' ' || claimed_at FROM deliveries ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			t.Fatal(err)
		}
		for id, n := range name {
			l = strings.ReplaceAll(l, id, n)
		}
		tables = append(tables, l)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// ORDER BY sorted the real ids, random within a millisecond; sort
	// what the names made of them.
	slices.Sort(tables)
	return got, tables
}

// Claims under event keys waiting in one batch take their keys and insert
// their rows with one merged statement, and each gets what it would have
// got alone: a new key taken and the send claimed, the owner's own key
// extended, another notification's key held (nothing written), a send
// whose row exists already (its key extended, the row returned); and the
// same when another statement's failure aborts the batch and each claim
// runs again alone. A batch in which two claims name one key runs them one
// by one.
func TestMergedClaimsUnderEventKeysMatchSingleOnes(t *testing.T) {
	t.Parallel()
	distinct := []takeCase{{"a new key", 0, "e0"}, {"the owner's own key", 1, "e-own"}, {"another's key", 2, "e-other"},
		{"a send with its row", 3, "e3"}, {"another new key", 4, "e4"}}
	oneKey := []takeCase{{"a new key", 0, "e0"}, {"the same key, another notification", 6, "e0"}, {"another new key", 4, "e4"}}
	for _, tc := range []struct {
		name   string
		cases  []takeCase
		merges bool
		want   []string
	}{
		{"DistinctKeys", distinct, true, []string{
			"claimed true attempt 1 current - key taken until 09:11:00",
			"claimed true attempt 1 current - key owned until 09:11:00",
			"claimed false attempt 0 current - key held until 09:10:00",
			"claimed false attempt 0 current SENDING key owned until 09:11:00",
			"claimed true attempt 1 current - key taken until 09:11:00",
		}},
		{"OneKeyTwice", oneKey, false, []string{
			"claimed true attempt 1 current - key taken until 09:11:00",
			"claimed false attempt 0 current - key held until 09:11:00",
			"claimed true attempt 1 current - key taken until 09:11:00",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			single, singleTables := runClaimTakeCases(t, tc.cases, alone, tc.merges)
			modes := []runMode{merged}
			if tc.merges {
				modes = append(modes, aborted)
			}
			for _, mode := range modes {
				got, tables := runClaimTakeCases(t, tc.cases, mode, tc.merges)
				for i, c := range tc.cases {
					if single[i] != tc.want[i] || got[i] != tc.want[i] {
						t.Errorf("%s (mode %d):\n alone: %s\n here:  %s\n want:  %s", c.name, mode, single[i], got[i], tc.want[i])
					}
				}
				if fmt.Sprint(singleTables) != fmt.Sprint(tables) {
					t.Errorf("the tables differ (mode %d):\n alone: %v\n here:  %v", mode, singleTables, tables)
				}
			}
		})
	}
}

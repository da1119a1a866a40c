package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite"

	"github.com/heraldhq/herald/internal/testenv"
)

// How the fault tests judge a run: per accepted notification and per
// message id the sink saw, never by totals.

// unknownMay says why one message may end UNKNOWN in a run where the sink
// answers every call 2xx at once, and what that case implies.
type unknownMay struct {
	why string
	// must: nothing but the stale sweep can settle the message (its claim
	// was left SENDING by a process that died), so it must end UNKNOWN.
	must bool
	// maxCalls is how many provider calls it may have had: 1 when the call
	// may have gone out before the process died, 0 when the claim's own
	// answer was lost and herald never called.
	maxCalls int
}

// checkMessages holds a run to herald's promise, message by message, for a
// run whose sink answered every call 2xx at once (so no call timed out and
// nothing was refused): every accepted notification has one delivery, which
// is either PROVIDER_ACCEPTED and answered 2xx by the sink exactly once, or
// UNKNOWN swept as STALE_CLAIM where unknown allows it (and with no more
// calls than it allows); a message unknown says must end UNKNOWN does; the
// sink answered no message id twice, and none that no 202 named. It fails
// the test listing the first problems, and returns a one-line summary.
func checkMessages(t *testing.T, views map[string]notification, counts map[string]int, unknown map[string]unknownMay) string {
	t.Helper()
	var problems []string
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	accepted := make(map[string]bool, len(views))
	states := map[string]int{}
	unknownCalled := 0
	for id, nv := range views {
		if len(nv.Deliveries) != 1 {
			fail("%s has %d deliveries, want 1", id, len(nv.Deliveries))
			continue
		}
		d := nv.Deliveries[0]
		m := d.MessageID
		accepted[m] = true
		states[d.State]++
		u, mayUnknown := unknown[m]
		switch d.State {
		case "PROVIDER_ACCEPTED":
			if counts[m] != 1 {
				fail("%s is PROVIDER_ACCEPTED but the sink answered it 2xx %d times", m, counts[m])
			}
			if u.must {
				fail("%s is PROVIDER_ACCEPTED, yet only the stale sweep could settle it (%s)", m, u.why)
			}
		case "UNKNOWN":
			switch {
			case !mayUnknown:
				fail("%s ended UNKNOWN (%s, %d calls) though no fault of the run touched its claim", m, d.Reason, counts[m])
			case d.Reason != "STALE_CLAIM":
				fail("%s ended UNKNOWN with reason %s, want STALE_CLAIM (%s)", m, d.Reason, u.why)
			case counts[m] > u.maxCalls:
				fail("%s ended UNKNOWN after %d calls, at most %d possible (%s)", m, counts[m], u.maxCalls, u.why)
			}
			if counts[m] > 0 {
				unknownCalled++
			}
		default:
			fail("%s ended %s/%s; in this run only PROVIDER_ACCEPTED or UNKNOWN are possible", m, d.State, d.Reason)
		}
	}
	for m, n := range counts {
		switch {
		case !accepted[m]:
			fail("the sink answered %s, which no 202 named", m)
		case n > 1:
			fail("the sink answered %s 2xx %d times", m, n)
		}
	}
	must := 0
	for m, u := range unknown {
		if u.must && accepted[m] {
			must++
		}
	}
	summary := fmt.Sprintf("accepted=%d states{%s} sink_calls=%d unknown_allowed=%d unknown_required=%d unknown_with_a_call=%d",
		len(views), formatStates(states), len(counts), len(unknown), must, unknownCalled)
	if len(problems) > 0 {
		sort.Strings(problems)
		t.Errorf("%d problems with the run's messages (%s), e.g.:\n  %s", len(problems), summary,
			strings.Join(problems[:min(12, len(problems))], "\n  "))
	}
	return summary
}

func formatStates(states map[string]int) string {
	keys := make([]string, 0, len(states))
	for s := range states {
		keys = append(keys, s)
	}
	sort.Strings(keys)
	var per []string
	for _, s := range keys {
		per = append(per, fmt.Sprintf("%s=%d", s, states[s]))
	}
	return strings.Join(per, " ")
}

// terminal reports whether a delivery state shown by the API is final.
func terminal(state string) bool {
	switch state {
	case "PROVIDER_ACCEPTED", "DELIVERED", "PERMANENT_FAILURE", "RETRY_EXHAUSTED", "UNKNOWN", "SUPPRESSED", "EXPIRED", "FAILED":
		return true
	}
	return false
}

// readViews GETs every notification id, eight at a time, round-robin over
// clients. A 404 (an accepted notification is gone), another non-200 or an
// error fails the test.
func readViews(t *testing.T, clients []*client, ids []string) map[string]notification {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	views := make(map[string]notification, len(ids))
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	work := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				nv, code, err := clients[i%len(clients)].get(ctx, ids[i])
				switch {
				case err != nil:
					err = fmt.Errorf("GET %s: %w", ids[i], err)
				case code == http.StatusNotFound:
					err = fmt.Errorf("accepted notification %s is gone", ids[i])
				case code != http.StatusOK:
					err = fmt.Errorf("GET %s answered %d", ids[i], code)
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					views[ids[i]] = nv
				}
				mu.Unlock()
			}
		}()
	}
	for i := range ids {
		work <- i
	}
	close(work)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d problems reading accepted notifications, e.g.: %v", len(errs), errors.Join(errs[:min(5, len(errs))]...))
	}
	return views
}

// pending lists the messages of views whose delivery is not terminal yet.
func pending(views map[string]notification) []string {
	var out []string
	for id, nv := range views {
		for _, d := range nv.Deliveries {
			if !terminal(d.State) {
				out = append(out, fmt.Sprintf("%s:%s", id, d.State))
			}
		}
	}
	sort.Strings(out)
	return out
}

// awaitTerminal reads every id through the API until every delivery is in
// a terminal state, and returns the last views.
func awaitTerminal(t *testing.T, clients []*client, ids []string, timeout time.Duration) map[string]notification {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		views := readViews(t, clients, ids)
		left := pending(views)
		if len(left) == 0 {
			return views
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d deliveries still not terminal after %s, e.g. %v", len(left), timeout, left[:min(5, len(left))])
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// ownerOf is the LIKE pattern matching the claimed_by of the herald
// process pid (the owner is host-pid-suffix).
func ownerOf(pid int) string { return fmt.Sprintf("%%-%d-%%", pid) }

// strandedSQLite returns the messages the process pid left SENDING in the
// SQLite database at path. Call it after the process died, before anything
// else opens the database.
func strandedSQLite(t *testing.T, path string, pid int) []string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT message_id FROM deliveries WHERE state = 'SENDING' AND claimed_by LIKE ?`, ownerOf(pid))
	if err != nil {
		t.Fatalf("read SENDING deliveries of pid %d: %v", pid, err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatalf("read SENDING deliveries of pid %d: %v", pid, err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read SENDING deliveries of pid %d: %v", pid, err)
	}
	return ids
}

// unsettledSQLite is qUnsettled on the SQLite database at path.
func unsettledSQLite(t *testing.T, path string) int {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(qUnsettled).Scan(&n); err != nil {
		t.Fatalf("count unsettled sends: %v", err)
	}
	return n
}

// unsettledPostgres is qUnsettled on the PostgreSQL database at dbURL.
func unsettledPostgres(t *testing.T, dbURL string) int {
	t.Helper()
	var n int
	if err := pgQuery(dbURL, qUnsettled, nil, &n); err != nil {
		t.Fatalf("count unsettled sends: %v", err)
	}
	return n
}

// strandedPostgres waits until PostgreSQL has ended every session of the
// dead herald named app (a statement it sent before dying still runs to its
// end, and may commit), then returns the messages its process pid left
// SENDING in the database at dbURL.
func strandedPostgres(t *testing.T, dbURL, app string, pid int) []string {
	t.Helper()
	testenv.WaitFor(t, fmt.Sprintf("PostgreSQL to end the sessions of the killed herald %s", app), 30*time.Second, func() bool {
		return backendCount(t, app)+backendCount(t, app+" listener")+backendCount(t, app+" leader") == 0
	})
	ids, err := pgStrings(dbURL, `SELECT message_id FROM deliveries WHERE state = 'SENDING' AND claimed_by LIKE $1`, ownerOf(pid))
	if err != nil {
		t.Fatalf("read SENDING deliveries of pid %d: %v", pid, err)
	}
	return ids
}

// pgStrings runs a query returning one text column on a short-lived
// connection.
func pgStrings(url, query string, args ...any) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

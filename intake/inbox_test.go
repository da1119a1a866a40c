package intake_test

import (
	"database/sql"
	"net/http"
	"testing"
)

// shipped is a valid order.shipped body (channels inbox and push).
const shipped = `{"recipient":"user-1","event_id":"order-9","kind":"order.shipped","params":{"item":"Mug","tracking":"T1"}}`

// TestInboxWriteFailureIs503AndWritesNothing: the inbox item is part of the
// 202. When the database refuses it (a trigger stands in for a full disk or
// a broken index), intake answers 503 and keeps nothing of the request:
// no notification, outbox row, key, delivery, item or counter. Once the
// fault is gone the same request and key are accepted as new, with the
// item readable at once.
func TestInboxWriteFailureIs503AndWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	exec := func(stmt string) {
		t.Helper()
		db, err := sql.Open("sqlite", "file:"+b.dbPath)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.Exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	inboxRows := func() (items, counters int) {
		t.Helper()
		db, err := sql.Open("sqlite", "file:"+b.dbPath+"?mode=ro")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.QueryRow(`SELECT (SELECT count(*) FROM inbox_items), (SELECT count(*) FROM inbox_counters)`).Scan(&items, &counters); err != nil {
			t.Fatal(err)
		}
		return items, counters
	}

	// The item is written with its notification's row (SQLite's store,
	// migration 26): refuse a row that carries one.
	exec(`CREATE TRIGGER refuse_inbox BEFORE INSERT ON notifications WHEN NEW.inbox_seq IS NOT NULL BEGIN SELECT RAISE(ABORT, 'disk full'); END`)
	r := b.post(t, keyA, "ship-1", shipped)
	wantProblem(t, r, http.StatusServiceUnavailable)
	if got := r.header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After = %q, want 1", got)
	}
	b.wantNothingWritten(t)
	if items, counters := inboxRows(); items != 0 || counters != 0 {
		t.Fatalf("%d items and %d counters after a refused inbox write", items, counters)
	}

	exec(`DROP TRIGGER refuse_inbox`)
	id := accepted(t, b.post(t, keyA, "ship-1", shipped))
	if got := b.countRows(t); got["notifications"] != 1 || got["idempotency_keys"] != 1 || got["delivery_attempts"] != 0 {
		t.Errorf("rows after the retry: %v, want one notification and its key, no attempt", got)
	}
	if items, counters := inboxRows(); items != 1 || counters != 1 {
		t.Fatalf("%d items and %d counters after the retry, want 1 and 1", items, counters)
	}
	n := b.notification(t, keyA, id)
	stored := false
	for _, d := range n.Deliveries {
		stored = stored || (d.Channel == "inbox" && d.State == "STORED")
	}
	if !stored {
		t.Errorf("no STORED inbox entry: %+v", n.Deliveries)
	}
}

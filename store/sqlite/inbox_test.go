package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/sqlite"
)

// CreateTx writes the inbox item in the caller's transaction, in the text
// for the profile's language as that transaction reads it, with the send
// ended STORED; a rollback leaves no item and no counter.
func TestCreateTxWritesTheInboxItem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "herald.db")
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db, err := sql.Open("sqlite", sqlite.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p := func(id string) store.NotificationCreateParams {
		return store.NotificationCreateParams{
			Tenant: "clinic-7", DedupKey: id, ID: id, Recipient: "patient-1", EventID: "booking-42", Kind: "booking.confirmed",
			Lane: heraldtype.LaneTransactional, Channels: []heraldtype.Channel{heraldtype.ChannelSMS, heraldtype.ChannelInbox},
			Inbox: []store.InboxText{{Locale: "default", Title: "Booked"}, {Locale: "ko", Title: "예약 완료"}},
		}
	}
	inTx := func(commit bool, p store.NotificationCreateParams) {
		t.Helper()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if res, err := sqlite.CreateTx(ctx, tx, time.Now(), p); err != nil || res.Outcome != store.Created {
			t.Fatalf("CreateTx: %v %v", res.Outcome, err)
		}
		if commit {
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	inTx(false, p("ntf_rolledback"))
	if b, err := s.InboxBadge(ctx, "clinic-7", "patient-1"); err != nil || b != (store.InboxBadge{}) {
		t.Fatalf("badge after a rollback: %+v (%v)", b, err)
	}
	if err := s.ProfilePut(ctx, store.Profile{Tenant: "clinic-7", Recipient: "patient-1", Language: "ko"}); err != nil {
		t.Fatal(err)
	}
	inTx(true, p("ntf_a"))
	items, err := s.InboxItemsAfter(ctx, "clinic-7", "patient-1", 0, 10)
	if err != nil || len(items) != 1 || items[0].Seq != 1 || items[0].Title != "예약 완료" || items[0].MessageID != "ntf_a.inbox" {
		t.Fatalf("items %+v (%v), want ntf_a's alone, in Korean, at seq 1", items, err)
	}
	v, err := s.NotificationGet(ctx, "clinic-7", "ntf_a")
	if err != nil || len(v.Deliveries) != 2 {
		t.Fatalf("view %+v (%v)", v, err)
	}
	if st, reason, _ := v.EntryState(v.Deliveries[1]); st != "STORED" || reason != heraldtype.ReasonStored {
		t.Errorf("inbox entry %s/%s, want STORED", st, reason)
	}
	claimed, err := s.OutboxClaim(ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w", Limit: 10, Lease: time.Minute})
	if err != nil || len(claimed) != 1 || claimed[0].Channel != heraldtype.ChannelSMS {
		t.Fatalf("claimed %+v (%v), want the sms row alone", claimed, err)
	}
}

package sqlite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/sqlite"
)

// CreateTx on the application's own connection to herald's file, while
// herald's store has it open too.
func TestCreateTx(t *testing.T) {
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
	p := func(id, dedup string) store.NotificationCreateParams {
		return store.NotificationCreateParams{
			Tenant: "clinic-7", DedupKey: dedup, ID: id, Recipient: "patient-1", EventID: "booking-42", Kind: "booking.confirmed",
			Lane: heraldtype.LaneTransactional, Params: json.RawMessage(`{"at":"10:30"}`),
			Channels: []heraldtype.Channel{heraldtype.ChannelWebhook, heraldtype.ChannelSMS},
		}
	}
	inTx := func(commit bool, ps ...store.NotificationCreateParams) []store.NotificationCreateResult {
		t.Helper()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		var out []store.NotificationCreateResult
		for _, p := range ps {
			res, err := sqlite.CreateTx(ctx, tx, time.Now(), p)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, res)
		}
		if commit {
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}

	inTx(false, p("ntf_rolledback", "booking-43:confirmed"))
	if _, err := s.NotificationGet(ctx, "clinic-7", "ntf_rolledback"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after rollback: %v", err)
	}
	got := inTx(true, p("ntf_a", "booking-42:confirmed"), p("ntf_b", "booking-42:confirmed"))
	if got[0].Outcome != store.Created || got[1].Outcome != store.Deduplicated || got[1].ID != "ntf_a" {
		t.Fatalf("%+v", got)
	}
	if again := inTx(true, p("ntf_c", "booking-42:confirmed")); again[0].Outcome != store.Deduplicated || again[0].ID != "ntf_a" {
		t.Fatalf("again: %+v", again)
	}
	claimed, err := s.OutboxClaim(ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w", Limit: 10, Lease: time.Minute})
	if err != nil || len(claimed) != 2 || claimed[0].NotificationID != "ntf_a" || claimed[0].Channel != heraldtype.ChannelWebhook {
		t.Fatalf("claim: %v %+v", err, claimed)
	}
	if _, err := sqlite.CreateTx(ctx, nil, time.Now(), store.NotificationCreateParams{IdempotencyKey: "k"}); err == nil {
		t.Fatal("an idempotency key was accepted")
	}
}

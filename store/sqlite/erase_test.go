package sqlite_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/sqlite"
)

// An erased person's words are zeroed in the pages the erasure rewrites:
// after the erasure of a few notifications and a clean close, neither the
// params nor the inbox texts are in the file's bytes (secure_delete FAST).
// Without it a privacy review found the erased inbox text with grep,
// though SQL read NULL. FAST adds no I/O, so pages an erasure frees whole
// (many long texts) keep their bytes until reused or VACUUM: docs/inbox.md
// says what an operator runs.
func TestAnErasedPersonsWordsAreNotLeftInTheFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "herald.db")
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const marker = "KIMMINJI-0105551234"
	for i := range 20 {
		id := fmt.Sprintf("ntf_erase_%02d", i)
		params, _ := json.Marshal(map[string]string{"name": marker, "phone": marker})
		if _, err := s.NotificationCreate(ctx, store.NotificationCreateParams{
			Tenant: "clinic", IdempotencyKey: id, RequestHash: "h", Response: []byte(`{}`), ID: id, Recipient: "patient-1", EventID: id, Kind: "appt",
			Lane: heraldtype.LaneTransactional, Params: params, Channels: []heraldtype.Channel{heraldtype.ChannelSMS, heraldtype.ChannelInbox},
			Inbox: []store.InboxText{{Locale: "default", Title: marker, Body: "See you, " + marker}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	p := store.RecipientEraseParams{Tenant: "clinic", Recipient: "patient-1", Limit: 500}
	for {
		res, err := s.RecipientErase(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if res.Next == nil {
			break
		}
		p.After = res.Next
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{path, path + "-wal"} {
		raw, err := os.ReadFile(f)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(raw, []byte(marker)); n > 0 {
			t.Errorf("%s holds the erased words %d times", filepath.Base(f), n)
		}
	}
}

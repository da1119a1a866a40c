package watchdog_test

import (
	"database/sql"
	"encoding/json"
	"testing"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/sqlite"
)

// unmovedChain leaves a fallback chain (webhook, then SMS) whose first
// step's outbox row the dispatcher ended FAILED before any delivery, and
// whose release of the SMS step was lost (put back by hand): the SMS step
// stays WAITING with no owner. It returns the SMS step's message id. The
// lane must have no other due row. SQLite only.
func (w *world) unmovedChain(t *testing.T) string {
	t.Helper()
	id := ids.New("ntf", w.clk.Now())
	_, err := w.store.NotificationCreate(w.ctx, store.NotificationCreateParams{
		Tenant: "t1", ID: id, Recipient: "r1", EventID: id, Kind: "pay", Lane: lane, Params: json.RawMessage(`{}`),
		Channels: []heraldtype.Channel{heraldtype.ChannelWebhook, heraldtype.ChannelSMS}, Fallback: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	row := w.claimOutbox(t, store.MessageID(id, heraldtype.ChannelWebhook), false)
	if ok, err := w.store.OutboxComplete(w.ctx, row.Fence, heraldtype.OutboxFailed, heraldtype.ReasonStoreUnavailable); err != nil || !ok {
		t.Fatalf("fail the first step: %v (%v)", ok, err)
	}
	sms := store.MessageID(id, heraldtype.ChannelSMS)
	db, err := sql.Open("sqlite", sqlite.DSN(w.dsn))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE outbox SET state = 'WAITING', fallback_fails = 0, fallback_after = NULL WHERE message_id = ?`, sms); err != nil {
		t.Fatalf("lose the release: %v", err)
	}
	return sms
}

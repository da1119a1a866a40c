package audit_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/heraldhq/herald/audit"
	"github.com/heraldhq/herald/store"
)

// stuckAudit's appends never answer, until their context ends.
type stuckAudit struct{ store.Audit }

func (stuckAudit) AuditAppend(ctx context.Context, e store.AuditEntry) (store.AuditEntry, error) {
	<-ctx.Done()
	return store.AuditEntry{}, ctx.Err()
}

// TestRecordEndsAtItsTimeout: the entry's write outlives the request, so
// only its own timeout ends it when the store never answers.
func TestRecordEndsAtItsTimeout(t *testing.T) {
	t.Parallel()
	l := &audit.Log{Store: stuckAudit{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Timeout: 20 * time.Millisecond}
	done := make(chan struct{})
	go func() {
		l.Record(httptest.NewRequest("POST", "/v1/admin/keys", nil), audit.KeyCreate, "k1", nil)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Record still waits on a store that never answers")
	}
}

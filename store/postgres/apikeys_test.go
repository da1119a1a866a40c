package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/store"
)

// A revoke in one process is heard by every other process on the database
// through NOTIFY, so package apikeys there drops its cache at once rather
// than at its next recheck of the revision.
func TestAPIKeyRevokeIsHeardByOtherProcesses(t *testing.T) {
	t.Parallel()
	url := testpg.Schema(t)
	ctx := context.Background()
	open := func() *Store {
		s, err := Open(ctx, url, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()
	waitFor(t, 10*time.Second, "b's listener is connected", b.listening.Load)
	if _, err := a.APIKeyCreate(ctx, store.APIKey{ID: "k1", Tenant: "t1", Name: "crm", Scopes: []string{"send"}, Hash: "h"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "b hears the create", func() bool { return b.APIKeyChanges().Generation() > 0 })
	before := b.APIKeyChanges().Generation()
	if _, _, err := a.APIKeyRevoke(ctx, "t1", "k1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "b hears the revoke", func() bool { return b.APIKeyChanges().Generation() > before })
}

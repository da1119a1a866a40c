package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/heraldhq/herald/store"
)

// testAPIKeys: keys are stored with their hash and read back as written;
// listing is per tenant, oldest first; a revoke holds its first time, is
// refused across tenants, and is seen by another process on the database
// (the revision counter everywhere, the change count at once where the
// driver announces changes).
func testAPIKeys(t *testing.T, h Harness) {
	key := func(id, tenant string) store.APIKey {
		return store.APIKey{ID: id, Tenant: tenant, Name: "crm " + id, Scopes: []string{"send", "read"},
			Hash: "pbkdf2-sha256$1000$c2FsdA$aGFzaA", CreatedBy: "cli"}
	}
	create := func(t *testing.T, b bundle, k store.APIKey) store.APIKey {
		t.Helper()
		got, err := b.s.APIKeyCreate(b.ctx, k)
		if err != nil {
			t.Fatalf("APIKeyCreate: %v", err)
		}
		return got
	}
	same := func(a, b store.APIKey) bool {
		return a.ID == b.ID && a.Tenant == b.Tenant && a.Name == b.Name && slices.Equal(a.Scopes, b.Scopes) &&
			a.Hash == b.Hash && a.CreatedBy == b.CreatedBy && a.CreatedAt.Equal(b.CreatedAt) &&
			a.ExpiresAt.Equal(b.ExpiresAt) && a.RevokedAt.Equal(b.RevokedAt)
	}

	t.Run("CreateThenGetAndListPerTenant", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		k1 := key("k1", "t1")
		k1.ExpiresAt = Epoch.Add(24 * time.Hour)
		c1 := create(t, b, k1)
		if !c1.CreatedAt.Equal(Epoch) {
			t.Errorf("CreatedAt = %s, want the store's now %s", c1.CreatedAt, Epoch)
		}
		b.clk.Advance(time.Second)
		c2 := create(t, b, key("k2", "t1"))
		c3 := create(t, b, key("k3", "t2"))
		got, err := b.s.APIKeyGet(b.ctx, "k1")
		if err != nil || !same(got, c1) {
			t.Fatalf("APIKeyGet = %+v, %v; want %+v", got, err, c1)
		}
		list, err := b.s.APIKeyList(b.ctx, "t1")
		if err != nil || len(list) != 2 || !same(list[0], c1) || !same(list[1], c2) {
			t.Fatalf("APIKeyList(t1) = %+v, %v; want k1, k2", list, err)
		}
		all, err := b.s.APIKeyList(b.ctx, "")
		if err != nil || len(all) != 3 || !same(all[2], c3) {
			t.Fatalf("APIKeyList('') = %+v, %v; want k1, k2, k3", all, err)
		}
		if _, err := b.s.APIKeyGet(b.ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("APIKeyGet(missing) = %v, want ErrNotFound", err)
		}
	})

	t.Run("RevokeHoldsItsFirstTimeAndStaysInItsTenant", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		create(t, b, key("k1", "t1"))
		if _, _, err := b.s.APIKeyRevoke(b.ctx, "t2", "k1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("APIKeyRevoke by another tenant = %v, want ErrNotFound", err)
		}
		if got, err := b.s.APIKeyGet(b.ctx, "k1"); err != nil || !got.RevokedAt.IsZero() {
			t.Fatalf("after another tenant's revoke: %+v, %v; want not revoked", got, err)
		}
		b.clk.Advance(time.Minute)
		got, revoked, err := b.s.APIKeyRevoke(b.ctx, "t1", "k1")
		if err != nil || !revoked || !got.RevokedAt.Equal(Epoch.Add(time.Minute)) {
			t.Fatalf("APIKeyRevoke = %+v, %t, %v; want revoked now, at %s", got, revoked, err, Epoch.Add(time.Minute))
		}
		b.clk.Advance(time.Minute)
		r0, err := b.s.APIKeyRevision(b.ctx)
		if err != nil {
			t.Fatalf("APIKeyRevision: %v", err)
		}
		// A second revoke changes nothing and says so: its caller writes
		// no second audit entry, and the revision every process reads
		// stays.
		again, revoked, err := b.s.APIKeyRevoke(b.ctx, "", "k1")
		if err != nil || revoked || !again.RevokedAt.Equal(got.RevokedAt) {
			t.Fatalf("second APIKeyRevoke = %+v, %t, %v; want not revoked again, the first time %s kept", again, revoked, err, got.RevokedAt)
		}
		// (This process's change counter is not checked: on PostgreSQL
		// its listener hears the first revoke's NOTIFY when it will.)
		if r1, err := b.s.APIKeyRevision(b.ctx); err != nil || r1 != r0 {
			t.Fatalf("revision after a second revoke %d, %v; want %d unchanged", r1, err, r0)
		}
		if _, _, err := b.s.APIKeyRevoke(b.ctx, "t1", "nope"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("APIKeyRevoke(missing) = %v, want ErrNotFound", err)
		}
	})

	t.Run("RevisionGrowsWithEveryChange", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		rev := func() int64 {
			t.Helper()
			v, err := b.s.APIKeyRevision(b.ctx)
			if err != nil {
				t.Fatalf("APIKeyRevision: %v", err)
			}
			return v
		}
		r0 := rev()
		create(t, b, key("k1", "t1"))
		r1 := rev()
		if _, _, err := b.s.APIKeyRevoke(b.ctx, "t1", "k1"); err != nil {
			t.Fatalf("APIKeyRevoke: %v", err)
		}
		if r2 := rev(); r1 <= r0 || r2 <= r1 {
			t.Fatalf("revisions %d, %d, %d around a create and a revoke; want each larger", r0, r1, r2)
		}
	})
	t.Run("ChangesAreSeenByAnotherProcess", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		if h.Reopen == nil {
			t.Skip("the harness cannot open a second store")
		}
		other := h.Reopen(t, b.s, b.clk)
		rev := func(t *testing.T, s store.Store) int64 {
			t.Helper()
			v, err := s.APIKeyRevision(b.ctx)
			if err != nil {
				t.Fatalf("APIKeyRevision: %v", err)
			}
			return v
		}
		r0, g0 := rev(t, other), b.s.APIKeyChanges().Generation()
		create(t, b, key("k1", "t1"))
		r1 := rev(t, other)
		if r1 <= r0 || b.s.APIKeyChanges().Generation() <= g0 {
			t.Fatalf("after a create: revision %d → %d, own changes %d → %d; want both to grow", r0, r1, g0, b.s.APIKeyChanges().Generation())
		}
		if _, _, err := b.s.APIKeyRevoke(b.ctx, "t1", "k1"); err != nil {
			t.Fatalf("APIKeyRevoke: %v", err)
		}
		if r2 := rev(t, other); r2 <= r1 {
			t.Fatalf("after a revoke the other process reads revision %d, want more than %d", r2, r1)
		}
		if got, err := other.APIKeyGet(b.ctx, "k1"); err != nil || got.RevokedAt.IsZero() {
			t.Fatalf("the other process reads %+v, %v; want it revoked", got, err)
		}
	})
}

// testAudit: entries get increasing ids and the store's time, read newest
// first a page at a time per tenant; the table refuses updates and deletes.
func testAudit(t *testing.T, h Harness) {
	appendEntry := func(t *testing.T, b bundle, tenant, action string) store.AuditEntry {
		t.Helper()
		e, err := b.s.AuditAppend(b.ctx, store.AuditEntry{Tenant: tenant, ActorKey: "key_1", ActorName: "ops",
			Action: action, Target: "msg_1", Remote: "192.0.2.1:5000", Detail: `{"requeued":1}`})
		if err != nil {
			t.Fatalf("AuditAppend: %v", err)
		}
		return e
	}
	t.Run("PagesNewestFirstPerTenant", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		var t1 []store.AuditEntry
		for i := range 5 {
			b.clk.Advance(time.Second)
			t1 = append(t1, appendEntry(t, b, "t1", "parked.requeue"))
			if i == 2 {
				appendEntry(t, b, "t2", "key.create")
			}
		}
		if !t1[0].At.Equal(Epoch.Add(time.Second)) || t1[0].ID <= 0 || t1[1].ID <= t1[0].ID {
			t.Fatalf("appended %+v, %+v; want the store's time and increasing ids", t1[0], t1[1])
		}
		page, err := b.s.AuditList(b.ctx, store.AuditListParams{Tenant: "t1", Limit: 3})
		if err != nil || len(page) != 3 || page[0] != t1[4] || page[2] != t1[2] {
			t.Fatalf("first page = %+v, %v; want t1's three newest", page, err)
		}
		page, err = b.s.AuditList(b.ctx, store.AuditListParams{Tenant: "t1", Before: page[2].ID, Limit: 3})
		if err != nil || len(page) != 2 || page[0] != t1[1] || page[1] != t1[0] {
			t.Fatalf("second page = %+v, %v; want t1's two oldest", page, err)
		}
		all, err := b.s.AuditList(b.ctx, store.AuditListParams{})
		if err != nil || len(all) != 6 {
			t.Fatalf("every tenant's entries = %d, %v; want 6", len(all), err)
		}
	})
	t.Run("AppendOnly", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		if h.TryExec == nil {
			t.Skip("the harness cannot run statements")
		}
		e := appendEntry(t, b, "t1", "erasure")
		if err := h.TryExec(t, b.s, `UPDATE audit_log SET action = 'nothing'`); err == nil {
			t.Error("UPDATE audit_log succeeded, want it refused")
		}
		if err := h.TryExec(t, b.s, `DELETE FROM audit_log`); err == nil {
			t.Error("DELETE FROM audit_log succeeded, want it refused")
		}
		page, err := b.s.AuditList(b.ctx, store.AuditListParams{Tenant: "t1"})
		if err != nil || len(page) != 1 || page[0] != e {
			t.Fatalf("after the refused writes: %+v, %v; want the entry unchanged", page, err)
		}
	})
}

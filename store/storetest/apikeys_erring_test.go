package storetest_test

import (
	"context"

	"github.com/heraldhq/herald/store"
)

// The store.APIKeys and store.Audit methods of erring (storetest_test.go),
// which the suite's key and audit tests call.
func init() {
	erringMethods = append(erringMethods, "APIKeyCreate", "APIKeyGet", "APIKeyList", "APIKeyRevoke", "APIKeyRevision",
		"AuditAppend", "AuditList")
}

func (e *erring) APIKeyCreate(ctx context.Context, k store.APIKey) (store.APIKey, error) {
	v, err := e.Store.APIKeyCreate(ctx, k)
	return fail(e, "APIKeyCreate", v, err)
}

func (e *erring) APIKeyGet(ctx context.Context, id string) (store.APIKey, error) {
	v, err := e.Store.APIKeyGet(ctx, id)
	return fail(e, "APIKeyGet", v, err)
}

func (e *erring) APIKeyList(ctx context.Context, tenant string) ([]store.APIKey, error) {
	v, err := e.Store.APIKeyList(ctx, tenant)
	return fail(e, "APIKeyList", v, err)
}

func (e *erring) APIKeyRevoke(ctx context.Context, tenant, id string) (store.APIKey, bool, error) {
	k, revoked, err := e.Store.APIKeyRevoke(ctx, tenant, id)
	v, err := fail(e, "APIKeyRevoke", struct {
		k       store.APIKey
		revoked bool
	}{k, revoked}, err)
	return v.k, v.revoked, err
}

func (e *erring) APIKeyRevision(ctx context.Context) (int64, error) {
	v, err := e.Store.APIKeyRevision(ctx)
	return fail(e, "APIKeyRevision", v, err)
}

func (e *erring) AuditAppend(ctx context.Context, a store.AuditEntry) (store.AuditEntry, error) {
	v, err := e.Store.AuditAppend(ctx, a)
	return fail(e, "AuditAppend", v, err)
}

func (e *erring) AuditList(ctx context.Context, p store.AuditListParams) ([]store.AuditEntry, error) {
	v, err := e.Store.AuditList(ctx, p)
	return fail(e, "AuditList", v, err)
}

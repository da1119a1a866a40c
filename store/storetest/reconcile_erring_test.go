package storetest_test

import (
	"context"

	"github.com/heraldhq/herald/store"
)

// The store.Reconciler methods of erring (storetest_test.go), which the
// suite's reconciliation tests call.
func init() {
	erringMethods = append(erringMethods, "ReconcileCount", "ReconcileOutboxRecreate", "ReconcileOutboxRedrive", "ReconcileRunSave", "ReconcileRunLast")
}

func (e *erring) ReconcileCount(ctx context.Context, p store.ReconcileCountParams) (store.ReconcileCounts, error) {
	v, err := e.Store.ReconcileCount(ctx, p)
	return fail(e, "ReconcileCount", v, err)
}

func (e *erring) ReconcileOutboxRecreate(ctx context.Context, p store.ReconcileOutboxRecreateParams) (int, error) {
	v, err := e.Store.ReconcileOutboxRecreate(ctx, p)
	return fail(e, "ReconcileOutboxRecreate", v, err)
}

func (e *erring) ReconcileOutboxRedrive(ctx context.Context, rows []store.ReconcileFinding) ([]string, error) {
	v, err := e.Store.ReconcileOutboxRedrive(ctx, rows)
	return fail(e, "ReconcileOutboxRedrive", v, err)
}

func (e *erring) ReconcileRunSave(ctx context.Context, run store.ReconcileRun, keep int) error {
	_, err := fail(e, "ReconcileRunSave", struct{}{}, e.Store.ReconcileRunSave(ctx, run, keep))
	return err
}

func (e *erring) ReconcileRunLast(ctx context.Context) (store.ReconcileRun, error) {
	v, err := e.Store.ReconcileRunLast(ctx)
	return fail(e, "ReconcileRunLast", v, err)
}

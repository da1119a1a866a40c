package storetest_test

import (
	"context"

	"github.com/heraldhq/herald/store"
)

// The watchdog's store calls fail on the erring store like every other, so
// TestSuiteFailsWhenAStoreCallFails holds the watchdog's conformance tests
// to their errors too.

func (e *erring) UnownedFind(ctx context.Context, p store.UnownedFindParams) (store.UnownedPage, error) {
	v, err := e.Store.UnownedFind(ctx, p)
	return fail(e, "UnownedFind", v, err)
}

func (e *erring) UnownedRedrive(ctx context.Context, rows []store.Unowned) ([]store.Unowned, error) {
	v, err := e.Store.UnownedRedrive(ctx, rows)
	return fail(e, "UnownedRedrive", v, err)
}

func (e *erring) UnownedCheckpoint(ctx context.Context, kind store.UnownedKind) (store.UnownedPosition, error) {
	v, err := e.Store.UnownedCheckpoint(ctx, kind)
	return fail(e, "UnownedCheckpoint", v, err)
}

func (e *erring) UnownedCheckpointSave(ctx context.Context, kind store.UnownedKind, pos store.UnownedPosition) error {
	_, err := fail(e, "UnownedCheckpointSave", struct{}{}, e.Store.UnownedCheckpointSave(ctx, kind, pos))
	return err
}

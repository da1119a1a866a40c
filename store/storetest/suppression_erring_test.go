package storetest_test

import (
	"context"
	"time"

	"github.com/heraldhq/herald/store"
)

// The store.EventKeys methods of erring (storetest_test.go), which the
// suite's event key tests call.
func init() {
	erringMethods = append(erringMethods, "EventKeyTake", "EventKeyPurge", "EventKeysTakenOver")
}

func (e *erring) EventKeyTake(ctx context.Context, p store.EventKeyTakeParams) (store.EventKeyTakeResult, error) {
	v, err := e.Store.EventKeyTake(ctx, p)
	return fail(e, "EventKeyTake", v, err)
}

func (e *erring) EventKeyPurge(ctx context.Context, p store.EventKeyPurgeParams) (int, error) {
	v, err := e.Store.EventKeyPurge(ctx, p)
	return fail(e, "EventKeyPurge", v, err)
}

func (e *erring) EventKeysTakenOver(ctx context.Context, since time.Time) (int, error) {
	v, err := e.Store.EventKeysTakenOver(ctx, since)
	return fail(e, "EventKeysTakenOver", v, err)
}

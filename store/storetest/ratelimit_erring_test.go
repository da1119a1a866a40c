package storetest_test

import (
	"context"

	"github.com/heraldhq/herald/store"
)

// The store.RateBuckets methods of erring (storetest_test.go), which the
// suite's rate bucket tests call.
func init() {
	erringMethods = append(erringMethods, "BucketTake", "BucketSlow")
}

func (e *erring) BucketTake(ctx context.Context, p store.BucketTakeParams) (store.BucketGrant, error) {
	v, err := e.Store.BucketTake(ctx, p)
	return fail(e, "BucketTake", v, err)
}

func (e *erring) BucketSlow(ctx context.Context, p store.BucketSlowParams) error {
	_, err := fail(e, "BucketSlow", struct{}{}, e.Store.BucketSlow(ctx, p))
	return err
}

package storetest_test

import (
	"context"

	"github.com/heraldhq/herald/store"
)

// The store.Receipts method of erring (storetest_test.go), which the
// suite's receipt tests call.
func init() {
	erringMethods = append(erringMethods, "DeliveryReceipt")
}

func (e *erring) DeliveryReceipt(ctx context.Context, tenant, recipient, messageID string) (store.ReceiptOutcome, error) {
	out, err := e.Store.DeliveryReceipt(ctx, tenant, recipient, messageID)
	return fail(e, "DeliveryReceipt", out, err)
}

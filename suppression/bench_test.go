package suppression_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/testdb"
	"github.com/heraldhq/herald/store"
)

// BenchmarkEventKeyTake is one take on each store, one goroutine: a new
// event (every send's case: the key is inserted), the owner again (a
// retry, another device: the lease is extended) and a duplicate (the key
// is another's: on PostgreSQL a transaction that locks it and reads the
// owner's sends).
func BenchmarkEventKeyTake(b *testing.B) {
	for _, driver := range testdb.Drivers {
		b.Run(driver, func(b *testing.B) {
			st := testdb.Open(b, driver, nil).Store
			ctx := context.Background()
			take := func(b *testing.B, event, owner string) {
				_, err := st.EventKeyTake(ctx, store.EventKeyTakeParams{
					Key: store.EventKey{Tenant: "t1", Recipient: "r1", EventID: event, Kind: "payment"}, Owner: owner, Lease: time.Minute,
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.Run("New", func(b *testing.B) {
				i := 0
				for b.Loop() {
					i++
					take(b, fmt.Sprintf("new-%d", i), "n1")
				}
			})
			take(b, "same", "n1")
			b.Run("Owner", func(b *testing.B) {
				for b.Loop() {
					take(b, "same", "n1")
				}
			})
			b.Run("Duplicate", func(b *testing.B) {
				for b.Loop() {
					take(b, "same", "n2")
				}
			})
		})
	}
}

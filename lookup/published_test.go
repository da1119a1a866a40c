package lookup_test

import (
	"testing"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/lookup"
)

// With the rabbitmq transport a row is PUBLISHING, then PUBLISHED, before
// any consumer's sender writes a delivery: the entry shows PENDING until then.
func TestRelayStatesShowPendingUntilTheSenderWrites(t *testing.T) {
	t.Parallel()
	for _, s := range []heraldtype.OutboxState{heraldtype.OutboxPublishing, heraldtype.OutboxPublished} {
		if got := lookup.View(one(nil, s, "", nil)).Deliveries[0].State; got != heraldtype.ViewPending {
			t.Errorf("outbox %s without delivery shows %s, want PENDING", s, got)
		}
	}
	got := lookup.View(one(nil, heraldtype.OutboxPublished, "", delivery(heraldtype.DeliveryProviderAccepted, "", 1))).Deliveries[0]
	if got.State != string(heraldtype.DeliveryProviderAccepted) {
		t.Errorf("published and sent shows %s", got.State)
	}
}

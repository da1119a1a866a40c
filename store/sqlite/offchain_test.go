package sqlite_test

import (
	"context"
	"testing"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testdb"
	"github.com/heraldhq/herald/store"
)

// The claim says, in its fence, which rows are on no fallback chain, so
// that the end of their sends runs no chain statement; a chain's row is
// never said to be off it (its end must move the chain, as the
// conformance suite's fallback tests check through the same fence).
func TestTheClaimSaysWhichRowsAreOffChain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	s := testdb.Open(t, "sqlite", clk).Store
	create := func(id string, chain bool) {
		createFor(t, s, id, chain, heraldtype.ChannelWebhook, heraldtype.ChannelSMS)
	}
	create("ntf_plain", false)
	create("ntf_chain", true)
	for _, publishing := range []bool{false, true} {
		rows, err := s.OutboxClaim(ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w", Limit: 10,
			Lease: time.Minute, Publishing: publishing})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]bool{"ntf_plain.webhook": true, "ntf_plain.sms": true, "ntf_chain.webhook": false}
		if len(rows) != len(want) {
			t.Fatalf("publishing %v: claimed %d rows, want %d", publishing, len(rows), len(want))
		}
		for _, r := range rows {
			if off, ok := want[r.MessageID]; !ok || r.Fence.OffChain != off {
				t.Errorf("publishing %v: %s claimed with OffChain %v, want %v", publishing, r.MessageID, r.Fence.OffChain, off)
			}
		}
		clk.Advance(2 * time.Minute) // the leases run out
		if _, err := s.OutboxReclaimExpired(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

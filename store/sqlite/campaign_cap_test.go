package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/storetest"
)

// TestCampaignPageOverTheCapSlowsNoOtherWrite: a page refused for the
// campaign's cap undoes its own writes only; the writes sharing its group
// commit once, not rerun one by one as after a failed write.
func TestCampaignPageOverTheCapSlowsNoOtherWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "herald.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	page := func(from, n int) []store.CampaignRecipient {
		rs := make([]store.CampaignRecipient, n)
		for i := range rs {
			rs[i] = store.CampaignRecipient{Recipient: fmt.Sprintf("r%d", from+i), NotificationID: fmt.Sprintf("ntf_cap_%d", from+i)}
		}
		return rs
	}
	if _, err := s.CampaignCreate(ctx, store.CampaignCreateParams{ID: "cmp_cap", Tenant: "t1", IdempotencyKey: "k", RequestHash: "h",
		Kind: "k", Lane: heraldtype.LaneMarketing, Channels: []heraldtype.Channel{heraldtype.ChannelWebhook}, Recipients: page(1, 2)}); err != nil {
		t.Fatal(err)
	}
	queued := make(chan struct{}, 64)
	s.w.queued = func() { queued <- struct{}{} }
	// Hold the writer busy so the next writes queue up and share a group:
	// another write first, then the page (which a failing write would
	// make the group undo and rerun).
	busy, release := make(chan struct{}), make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	defer releaseOnce()
	first := make(chan error, 1)
	go func() { first <- s.w.do(ctx, func(tx wtx) error { close(busy); <-release; return nil }) }()
	storetest.Receive(t, busy, "the holding write runs")
	storetest.Receive(t, queued, "the holding write was queued")
	var runs atomic.Int32
	other := make(chan error, 1)
	go func() {
		other <- s.w.do(ctx, func(tx wtx) error {
			runs.Add(1)
			_, err := tx.Exec(`UPDATE campaigns SET params = '{"other":1}' WHERE id = 'cmp_cap'`)
			return err
		})
	}()
	storetest.Receive(t, queued, "the other write was queued")
	full := make(chan error, 1)
	go func() {
		_, err := s.CampaignAddRecipients(ctx, store.CampaignAddParams{Tenant: "t1", ID: "cmp_cap", Recipients: page(2, 3), MaxRecipients: 3})
		full <- err
	}()
	storetest.Receive(t, queued, "the page was queued")
	releaseOnce()
	if err := storetest.Receive(t, first, "the holding write returned"); err != nil {
		t.Fatal(err)
	}
	if err := storetest.Receive(t, full, "the page returned"); !errors.Is(err, store.ErrCampaignFull) {
		t.Fatalf("a page past the cap: %v; want ErrCampaignFull", err)
	}
	if err := storetest.Receive(t, other, "the other write returned"); err != nil {
		t.Fatal(err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the other write ran %d times; want once (its group committed, not rerun)", n)
	}
	c, err := s.CampaignGet(ctx, "t1", "cmp_cap")
	if err != nil || c.Total != 2 || string(c.Params) != `{"other":1}` {
		t.Fatalf("campaign = %+v, %v; want total 2 (nothing of the page) and the other write's params", c, err)
	}
}

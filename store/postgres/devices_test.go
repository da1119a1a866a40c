package postgres

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// putDevices registers tokens for a recipient of tenant t1 and returns
// their device ids, sorted.
func putDevices(t *testing.T, s *Store, tenant, recipient string, tokens ...string) []string {
	t.Helper()
	var ids []string
	for _, tok := range tokens {
		id := store.DeviceID(tenant, recipient, tok)
		if _, _, err := s.DevicePut(context.Background(), store.Device{Tenant: tenant, Recipient: recipient, DeviceID: id, Token: tok, Platform: store.PlatformFCM}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// wantSends checks a notification's planned sends: the channels given, in
// order, each with its derived message id.
func wantSends(t *testing.T, s *Store, tenant, id string, want []heraldtype.Channel) {
	t.Helper()
	v, err := s.NotificationGet(context.Background(), tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	var got []heraldtype.Channel
	for _, d := range v.Deliveries {
		if d.MessageID != store.MessageID(id, d.Channel) {
			t.Errorf("%s: send %s has message id %s", id, d.Channel, d.MessageID)
		}
		got = append(got, d.Channel)
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: planned sends %v, want %v", id, got, want)
	}
}

func deviceSends(ids ...string) []heraldtype.Channel {
	var out []heraldtype.Channel
	for _, id := range ids {
		out = append(out, heraldtype.DeviceSend(heraldtype.ChannelPush, id))
	}
	return out
}

// Creates merged into one statement fan each push out to its own
// recipient's active devices, as a create alone does (the conformance
// suite's PushFansOutToActiveDevices).
func TestMergedCreatesFanOutToDevices(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t, "", Options{PipelineWorkers: 1})
	r1 := putDevices(t, s, "t1", "r1", "tok-a", "tok-b")
	dead := putDevices(t, s, "t1", "r2", "tok-dead")
	if ok, err := s.DeviceDeactivate(ctx, store.DeviceDeactivateParams{Tenant: "t1", Recipient: "r2", DeviceID: dead[0], Reason: heraldtype.ReasonUnregistered}); err != nil || !ok {
		t.Fatalf("deactivate: %v %v", ok, err)
	}
	batch := []store.NotificationCreateParams{
		params(func(p *store.NotificationCreateParams) {
			p.Channels = []heraldtype.Channel{heraldtype.ChannelWebhook, heraldtype.ChannelPush}
		}),
		params(func(p *store.NotificationCreateParams) {
			p.Recipient, p.Channels = "r2", []heraldtype.Channel{heraldtype.ChannelPush, heraldtype.ChannelSMS}
		}),
		params(func(p *store.NotificationCreateParams) { p.Channels = []heraldtype.Channel{heraldtype.ChannelPush} }),
	}
	var merged []int
	var mu sync.Mutex
	s.pipe.merged = func(n int) { mu.Lock(); merged = append(merged, n); mu.Unlock() }
	queued, release := hold(t, s.pipe, s.pool, 4343)
	errs := make([]error, len(batch))
	wait := queue(t, queued, len(batch), func(i int) { _, errs[i] = s.NotificationCreate(ctx, batch[i]) })
	release()
	wait()
	mu.Lock()
	if len(merged) == 0 || merged[0] != len(batch) {
		t.Fatalf("merged statements stood for %v creates, want one for %d", merged, len(batch))
	}
	mu.Unlock()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	wantSends(t, s, "t1", batch[0].ID, append([]heraldtype.Channel{heraldtype.ChannelWebhook}, deviceSends(r1...)...))
	wantSends(t, s, "t1", batch[1].ID, []heraldtype.Channel{heraldtype.ChannelPush, heraldtype.ChannelSMS})
	wantSends(t, s, "t1", batch[2].ID, deviceSends(r1...))
}

// CreateTx, in the caller's transaction, fans push out like intake.
func TestCreateTxFansOutToDevices(t *testing.T) {
	t.Parallel()
	s, pool, _ := enqueueSetup(t)
	p := intent("booking-44:confirmed", nil)
	devs := putDevices(t, s, p.Tenant, p.Recipient, "tok-1", "tok-2")
	tx := begin(t, pool)
	if res := createIn(t, tx, p); res.Outcome != store.Created {
		t.Fatalf("%+v, want Created", res)
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantSends(t, s, p.Tenant, p.ID, append([]heraldtype.Channel{heraldtype.ChannelSMS}, deviceSends(devs...)...))
}

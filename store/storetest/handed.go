package storetest

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/store"
)

// handedClaim is the lease the handed-row tests write under.
var handedClaim = &store.CreateClaim{Owner: "w1", Lease: time.Minute}

// testHanded: a create may write its one outbox row already claimed
// (store.NotificationCreateParams.Claim), which intake hands to its own
// process's claimer. The row must be a claim like any other: fenced,
// extended by the heartbeat, settled by its fence, and offered again by
// the reclaim sweep when its lease runs out; a store may decline, and the
// row is then PENDING for the claimers.
func testHanded(t *testing.T, h Harness) {
	t.Run("AHandedRowIsAClaimLikeAnyOther", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		exp := Epoch.Add(time.Hour)
		p, res := create(t, b, func(p *store.NotificationCreateParams) { p.ExpiresAt, p.Claim = &exp, handedClaim })
		if res.Outcome != store.Created {
			t.Fatalf("outcome %v", res.Outcome)
		}
		got := res.Claimed
		if got == nil {
			// Declined: the row is the claimers' as always.
			if rows := claim(t, b, heraldtype.LaneTransactional, 10); len(rows) != 1 {
				t.Fatalf("declined hand-over left %d rows to claim, want 1", len(rows))
			}
			return
		}
		if rows := claim(t, b, heraldtype.LaneTransactional, 10); len(rows) != 0 {
			t.Fatalf("a handed row was claimed again: %+v", rows)
		}
		if n, err := b.s.OutboxExtend(b.ctx, []store.Fence{got.Fence}, time.Minute); err != nil || n != 1 {
			t.Fatalf("extend the handed row's lease: %d (%v)", n, err)
		}
		// The lease runs out (extended by a minute from Epoch): the sweep
		// offers the row again, and the claim that takes it returns the
		// same job under a newer token.
		b.clk.Advance(2 * time.Minute)
		if n, err := b.s.OutboxReclaimExpired(b.ctx); err != nil || n != 1 {
			t.Fatalf("reclaimed %d (%v), want the handed row", n, err)
		}
		rows := claim(t, b, heraldtype.LaneTransactional, 10)
		if len(rows) != 1 {
			t.Fatalf("claimed %d after the lease ran out, want 1", len(rows))
		}
		again := rows[0]
		if again.Fence.Token <= got.Fence.Token || again.Fence.ID != got.Fence.ID || again.Fence.NotificationID != p.ID ||
			again.Fence.Channel != got.Fence.Channel || again.Fence.OffChain != got.Fence.OffChain {
			t.Fatalf("fences: handed %+v, claimed %+v", got.Fence, again.Fence)
		}
		a, c := got.Job, again.Job
		a.Known, c.Known, a.Outbox, c.Outbox = nil, nil, nil, nil
		if fmt.Sprint(a) != fmt.Sprint(c) {
			t.Fatalf("handed job %+v\nclaimed job %+v", a, c)
		}
		if got.Attempts != 0 || got.OutboxID != got.Fence.ID {
			t.Fatalf("handed %+v", got)
		}
		// The old fence settles nothing; the new one does.
		if ok, err := b.s.OutboxComplete(b.ctx, got.Fence, heraldtype.OutboxDone, ""); err != nil || ok {
			t.Fatalf("complete under the handed fence after the reclaim: %v (%v)", ok, err)
		}
		if ok, err := b.s.OutboxComplete(b.ctx, again.Fence, heraldtype.OutboxDone, ""); err != nil || !ok {
			t.Fatalf("complete under the new fence: %v (%v)", ok, err)
		}
	})
	t.Run("ARowHandedToARelayIsPublishing", func(t *testing.T) {
		t.Parallel()
		// The rabbitmq transport's relay takes rows handed over at intake
		// written PUBLISHING (CreateClaim.Publishing), as its claim would
		// have written them: the mark after the broker's confirm, the
		// consumer's deferral and the sweep treat them as its claim's.
		b := setup(t, h)
		p, res := create(t, b, func(p *store.NotificationCreateParams) {
			p.Claim = &store.CreateClaim{Owner: "w1", Lease: time.Minute, Publishing: true}
		})
		got := res.Claimed
		if got == nil {
			if rows := claim(t, b, heraldtype.LaneTransactional, 10); len(rows) != 1 {
				t.Fatalf("declined hand-over left %d rows to claim, want 1", len(rows))
			}
			return
		}
		wantOutbox(t, b, p.ID, heraldtype.OutboxPublishing, "", time.Time{})
		if r := deferFor(t, b, got.Fence, time.Hour); r.Deferred || !r.Publishing(got.Fence) {
			t.Fatalf("OutboxDefer of the handed row: %+v, want it the relay's, PUBLISHING under its token", r)
		}
		for _, publishing := range []bool{true, false} {
			rows, err := b.s.OutboxClaim(b.ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w2", Limit: 10,
				Lease: time.Minute, Publishing: publishing})
			if err != nil || len(rows) != 0 {
				t.Fatalf("a claim (publishing %v) took %d rows of a handed one (%v)", publishing, len(rows), err)
			}
		}
		// Its lease runs out before the mark (the relay died): the sweep
		// offers it again, the relay's next claim publishes it under a
		// newer token, and the first publication's mark is fenced off.
		b.clk.Advance(2 * time.Minute)
		if n, err := b.s.OutboxReclaimExpired(b.ctx); err != nil || n != 1 {
			t.Fatalf("reclaimed %d (%v), want the handed row", n, err)
		}
		again := relayClaim(t, b, heraldtype.LaneTransactional, true)
		if again.Fence.ID != got.Fence.ID || again.Fence.Token <= got.Fence.Token || again.MessageID != got.MessageID {
			t.Fatalf("fences: handed %+v, claimed %+v", got.Fence, again.Fence)
		}
		if n, err := b.s.OutboxMarkPublished(b.ctx, []store.Fence{got.Fence}); err != nil || n != 0 {
			t.Fatalf("mark under the handed fence after the reclaim: %d (%v), want 0", n, err)
		}
		if n, err := b.s.OutboxMarkPublished(b.ctx, []store.Fence{again.Fence}); err != nil || n != 1 {
			t.Fatalf("mark under the new fence: %d (%v)", n, err)
		}
		wantOutbox(t, b, p.ID, heraldtype.OutboxPublished, "", time.Time{})

		// Marked under its own fence while its lease lives, it is
		// PUBLISHED at once.
		p, res = create(t, b, func(p *store.NotificationCreateParams) {
			p.Claim = &store.CreateClaim{Owner: "w1", Lease: time.Minute, Publishing: true}
		})
		if n, err := b.s.OutboxMarkPublished(b.ctx, []store.Fence{res.Claimed.Fence}); err != nil || n != 1 {
			t.Fatalf("mark the handed row: %d (%v)", n, err)
		}
		wantOutbox(t, b, p.ID, heraldtype.OutboxPublished, "", time.Time{})
	})
	t.Run("AHandedRowKnowsItHasNoDelivery", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		prof := store.Profile{Tenant: "t1", Recipient: "r1", Consent: map[heraldtype.Channel]bool{heraldtype.ChannelSMS: true}, TimeZone: "Asia/Seoul"}
		if err := b.s.ProfilePut(b.ctx, prof); err != nil {
			t.Fatal(err)
		}
		_, res := create(t, b, func(p *store.NotificationCreateParams) { p.Claim = handedClaim })
		if res.Claimed == nil {
			t.Skip("this store writes rows PENDING")
		}
		k := res.Claimed.Known
		if k == nil || k.Delivery {
			t.Fatalf("known %+v, want no delivery", k)
		}
		if !k.ProfileRead {
			// The dispatcher's gate (quiet hours' early stop) rules only
			// on a profile the transport read, as a claim reads it.
			t.Fatalf("known %+v, want the profile read", k)
		}
		want, err := b.s.ProfileGet(b.ctx, "t1", "r1")
		if err != nil {
			t.Fatal(err)
		}
		got, err := store.DecodeProfile("t1", "r1", k.Profile, k.ProfileUpdatedAt)
		if err != nil || got.TimeZone != "Asia/Seoul" || !got.UpdatedAt.Equal(want.UpdatedAt) {
			t.Fatalf("known profile %+v (%v), stored %+v", got, err, want)
		}
		// A recipient with no profile: read, and none.
		_, res = create(t, b, func(p *store.NotificationCreateParams) { p.Recipient, p.Claim = "nobody", handedClaim })
		if k := res.Claimed.Known; !k.ProfileRead || k.Profile != nil {
			t.Fatalf("known %+v for a recipient without a profile", k)
		}
	})
	t.Run("OnlyOneRowDueNowIsHanded", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		later := Epoch.Add(time.Hour)
		now := Epoch
		putDevice(t, b, "r1", "tok", store.PlatformFCM)
		cases := map[string]func(p *store.NotificationCreateParams){
			"two channels": func(p *store.NotificationCreateParams) {
				p.Channels = []heraldtype.Channel{heraldtype.ChannelWebhook, heraldtype.ChannelSMS}
			},
			"push":        func(p *store.NotificationCreateParams) { p.Channels = []heraldtype.Channel{heraldtype.ChannelPush} },
			"send_at":     func(p *store.NotificationCreateParams) { p.SendAt = &later },
			"send_at now": func(p *store.NotificationCreateParams) { p.SendAt = &now },
			"a chain": func(p *store.NotificationCreateParams) {
				p.Channels, p.Fallback = []heraldtype.Channel{heraldtype.ChannelWebhook, heraldtype.ChannelSMS}, true
			},
		}
		due := 0
		for name, mutate := range cases {
			_, res := create(t, b, func(p *store.NotificationCreateParams) { mutate(p); p.Claim = handedClaim })
			if res.Outcome != store.Created || res.Claimed != nil {
				t.Fatalf("%s: outcome %v, claimed %+v; want created and not handed", name, res.Outcome, res.Claimed)
			}
			if name != "send_at" {
				due++
			}
		}
		// Each one's first rows are the claimers' (a chain's first, both
		// of two channels, the push to the one device).
		if rows := claim(t, b, heraldtype.LaneTransactional, 100); len(rows) != due+1 {
			t.Fatalf("claimed %d, want %d", len(rows), due+1)
		}
		// An inbox beside the one channel still hands that channel's row.
		_, res := create(t, b, func(p *store.NotificationCreateParams) {
			p.Channels, p.Inbox = []heraldtype.Channel{heraldtype.ChannelWebhook, heraldtype.ChannelInbox}, []store.InboxText{{Title: "t", Body: "b"}}
			p.Claim = handedClaim
		})
		if c := res.Claimed; c == nil || c.Channel != heraldtype.ChannelWebhook || c.MessageID != store.MessageID(c.NotificationID, heraldtype.ChannelWebhook) {
			t.Fatalf("handed %+v, want the webhook's row", c)
		}
	})
	t.Run("ARepeatedRequestHandsNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		p, first := create(t, b, func(p *store.NotificationCreateParams) { p.Claim = handedClaim })
		res, err := b.s.NotificationCreate(b.ctx, p)
		if err != nil || res.Outcome != store.Replayed || res.Claimed != nil {
			t.Fatalf("replay %+v (%v)", res, err)
		}
		d := p
		d.IdempotencyKey, d.DedupKey = "", "dd"
		d.ID = ids.New("ntf", b.clk.Now())
		if res, err := b.s.NotificationCreate(b.ctx, d); err != nil || res.Outcome != store.Created {
			t.Fatalf("dedup create %+v (%v)", res, err)
		}
		d.ID = ids.New("ntf", b.clk.Now())
		if res, err := b.s.NotificationCreate(b.ctx, d); err != nil || res.Outcome != store.Deduplicated || res.Claimed != nil {
			t.Fatalf("deduplicated %+v (%v)", res, err)
		}
		_ = first
	})
	t.Run("CreatesAtOnceEachGetTheirOwnRow", func(t *testing.T) {
		t.Parallel()
		// PostgreSQL merges creates that wait together into one
		// statement: each must get its own row back.
		b := setup(t, h)
		const n = 40
		var wg sync.WaitGroup
		got := make([]store.NotificationCreateResult, n)
		ps := make([]store.NotificationCreateParams, n)
		for i := range n {
			wg.Go(func() {
				id := ids.New("ntf", b.clk.Now())
				ps[i] = store.NotificationCreateParams{
					Tenant: "t1", IdempotencyKey: "k" + id, RequestHash: "h", IdempotencyTTL: time.Hour, Response: []byte(`{}`),
					ID: id, Recipient: fmt.Sprintf("r%d", i), EventID: "e", Kind: "k", Lane: heraldtype.LaneTransactional,
					Params: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), Channels: []heraldtype.Channel{heraldtype.ChannelWebhook},
				}
				switch i % 4 {
				case 0:
					ps[i].Claim = handedClaim
				case 2:
					ps[i].Claim = &store.CreateClaim{Owner: "w1", Lease: time.Minute, Publishing: true}
				}
				res, err := b.s.NotificationCreate(b.ctx, ps[i])
				if err != nil {
					t.Error(err)
				}
				got[i] = res
			})
		}
		wg.Wait()
		handed := 0
		for i, res := range got {
			c := res.Claimed
			if c == nil {
				continue
			}
			handed++
			state := heraldtype.OutboxClaimed
			if i%4 == 2 {
				state = heraldtype.OutboxPublishing
			}
			wantOutbox(t, b, ps[i].ID, state, "", time.Time{})
			if i%2 == 1 || c.NotificationID != ps[i].ID || c.Recipient != ps[i].Recipient || string(c.Params) != string(ps[i].Params) ||
				c.Fence.NotificationID != ps[i].ID {
				t.Fatalf("create %d handed %+v", i, c)
			}
		}
		if handed != 0 && handed != n/2 {
			t.Fatalf("handed %d of %d asked", handed, n/2)
		}
		if rows := claim(t, b, heraldtype.LaneTransactional, 100); len(rows) != n-handed {
			t.Fatalf("claimed %d, want %d", len(rows), n-handed)
		}
	})
}

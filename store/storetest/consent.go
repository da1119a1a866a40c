package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// testConsentHistory: every consent change a profile put makes is recorded
// with the put (who, when, which channel, old → new), read newest first a
// page at a time, per tenant; concurrent puts of one recipient leave one
// unbroken chain that ends at the stored profile; an erasure deletes it.
func testConsentHistory(t *testing.T, h Harness) {
	const sms, email, push = heraldtype.ChannelSMS, heraldtype.ChannelEmail, heraldtype.ChannelPush
	yes, no := true, false
	by := store.ConsentActor{Tenant: "t1", Key: "crm"}
	put := func(t *testing.T, b bundle, recipient string, consent map[heraldtype.Channel]bool, by store.ConsentActor) {
		t.Helper()
		p := store.Profile{Tenant: "t1", Recipient: recipient, Consent: consent,
			Addresses: map[heraldtype.Channel]string{sms: "+821000000000"}}
		if err := b.s.ProfilePutBy(b.ctx, p, by); err != nil {
			t.Fatalf("ProfilePutBy: %v", err)
		}
	}
	list := func(t *testing.T, b bundle, tenant, recipient string, before int64, limit int) []store.ConsentChange {
		t.Helper()
		got, err := b.s.ConsentHistoryList(b.ctx, store.ConsentHistoryListParams{Tenant: tenant, Recipient: recipient, Before: before, Limit: limit})
		if err != nil {
			t.Fatalf("ConsentHistoryList: %v", err)
		}
		return got
	}
	// same compares a change with the one expected (ID aside).
	same := func(got, want store.ConsentChange) bool {
		eq := func(a, b *bool) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
		return got.Tenant == want.Tenant && got.Recipient == want.Recipient && got.Channel == want.Channel &&
			eq(got.Old, want.Old) && eq(got.New, want.New) && got.At.Equal(want.At) && got.By == want.By
	}
	v := func(b *bool) string {
		if b == nil {
			return "none"
		}
		return fmt.Sprint(*b)
	}
	show := func(c store.ConsentChange) string {
		return fmt.Sprintf("#%d %s/%s %s %s→%s at %s by %+v", c.ID, c.Tenant, c.Recipient, c.Channel, v(c.Old), v(c.New), c.At.Format(time.RFC3339Nano), c.By)
	}
	expect := func(t *testing.T, got []store.ConsentChange, want ...store.ConsentChange) {
		t.Helper()
		ok := len(got) == len(want)
		for i := 0; ok && i < len(got); i++ {
			ok = same(got[i], want[i])
			if i > 0 && got[i].ID >= got[i-1].ID {
				t.Errorf("not newest first: %s after %s", show(got[i]), show(got[i-1]))
			}
		}
		if !ok {
			for _, c := range got {
				t.Logf("got  %s", show(c))
			}
			for _, c := range want {
				t.Logf("want %s", show(c))
			}
			t.Fatal("consent history differs")
		}
	}
	change := func(ch heraldtype.Channel, old, new *bool, at time.Time, by store.ConsentActor) store.ConsentChange {
		return store.ConsentChange{Tenant: "t1", Recipient: "r1", Channel: ch, Old: old, New: new, At: at, By: by}
	}

	t.Run("EveryChangeIsRecordedWithThePut", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		t0 := b.clk.Now()
		put(t, b, "r1", map[heraldtype.Channel]bool{sms: true, email: false}, by)
		b.clk.Advance(time.Minute)
		// Only the address changes: nothing to record.
		put(t, b, "r1", map[heraldtype.Channel]bool{sms: true, email: false}, by)
		b.clk.Advance(time.Minute)
		t2 := b.clk.Now()
		// Withdrawn on sms, given on push, email left out of the map.
		other := store.ConsentActor{Tenant: "t1"}
		put(t, b, "r1", map[heraldtype.Channel]bool{sms: false, push: true}, other)
		got := list(t, b, "t1", "r1", 0, 0)
		expect(t, got,
			change(sms, &yes, &no, t2, other), change(push, nil, &yes, t2, other), change(email, &no, nil, t2, other),
			change(sms, nil, &yes, t0, by), change(email, nil, &no, t0, by))
		if p, err := b.s.ProfileGet(b.ctx, "t1", "r1"); err != nil || p.Consent[sms] || !p.Consent[push] {
			t.Fatalf("profile after the puts: %+v (%v)", p, err)
		}
	})

	t.Run("ProfilePutRecordsAsItsTenant", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		if err := b.s.ProfilePut(b.ctx, store.Profile{Tenant: "t1", Recipient: "r1",
			Consent: map[heraldtype.Channel]bool{sms: true}}); err != nil {
			t.Fatal(err)
		}
		expect(t, list(t, b, "t1", "r1", 0, 0), change(sms, nil, &yes, b.clk.Now(), store.ConsentActor{Tenant: "t1"}))
	})

	t.Run("PagesAndTenants", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		var want []store.ConsentChange
		for i := range 7 {
			b.clk.Advance(time.Second)
			v := i%2 == 0
			old := !v
			c := change(sms, &old, &v, b.clk.Now(), by)
			if i == 0 {
				c.Old = nil
			}
			want = append([]store.ConsentChange{c}, want...)
			put(t, b, "r1", map[heraldtype.Channel]bool{sms: v}, by)
		}
		// Another tenant's recipient of the same id, and another recipient.
		if err := b.s.ProfilePutBy(b.ctx, store.Profile{Tenant: "t2", Recipient: "r1",
			Consent: map[heraldtype.Channel]bool{sms: true}}, store.ConsentActor{Tenant: "t2"}); err != nil {
			t.Fatal(err)
		}
		put(t, b, "r2", map[heraldtype.Channel]bool{sms: true}, by)

		var got []store.ConsentChange
		var before int64
		for pages := 0; ; pages++ {
			page := list(t, b, "t1", "r1", before, 3)
			if len(page) == 0 {
				if pages != 3 {
					t.Fatalf("%d pages of 3 for 7 changes, want 3 and an empty one", pages)
				}
				break
			}
			got = append(got, page...)
			before = page[len(page)-1].ID
		}
		expect(t, got, want...)
		if n := len(list(t, b, "t2", "r1", 0, 0)); n != 1 {
			t.Fatalf("tenant t2's r1 has %d changes, want its own 1", n)
		}
		if n := len(list(t, b, "t3", "r1", 0, 0)); n != 0 {
			t.Fatalf("an unknown tenant sees %d changes", n)
		}
	})

	// Puts racing on one recipient, each from its own goroutine: the
	// history, oldest first, is one chain (each change's old value is the
	// new value of the change before it on its channel) and ends at the
	// stored profile. A put that compared with a stale profile would break
	// the chain.
	t.Run("ConcurrentPutsLeaveOneChain", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		const puts = 24
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, puts)
		for i := range puts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				consent := map[heraldtype.Channel]bool{sms: i%2 == 0, email: i%3 == 0}
				if i%4 == 3 {
					delete(consent, email)
				}
				errs <- b.s.ProfilePutBy(b.ctx, store.Profile{Tenant: "t1", Recipient: "r1", Consent: consent}, by)
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("ProfilePutBy: %v", err)
			}
		}
		got := list(t, b, "t1", "r1", 0, 1000)
		state := map[heraldtype.Channel]*bool{}
		for i := len(got) - 1; i >= 0; i-- {
			c := got[i]
			if prev := state[c.Channel]; (prev == nil) != (c.Old == nil) || (prev != nil && *prev != *c.Old) {
				t.Fatalf("broken chain at %s: the value before was %s", show(c), v(prev))
			}
			state[c.Channel] = c.New
		}
		p, err := b.s.ProfileGet(b.ctx, "t1", "r1")
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range []heraldtype.Channel{sms, email} {
			v, ok := p.Consent[ch]
			if last := state[ch]; (last == nil) == ok || (ok && *last != v) {
				t.Fatalf("history ends at %v on %s, the profile holds %v (%v)", last, ch, v, ok)
			}
		}
	})

	// Changes in place of one recipient at once each see the one before:
	// a consent change and an address change made together both land
	// (a read-then-put of each would lose one), and a change that refuses
	// writes nothing.
	t.Run("ConcurrentChangesAllLand", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		const each = 12
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, 2*each)
		for i := range 2 * each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs <- b.s.ProfileChangeBy(b.ctx, "t1", "r1", by, func(p *store.Profile) error {
					if i%2 == 0 {
						if p.Consent == nil {
							p.Consent = map[heraldtype.Channel]bool{}
						}
						p.Consent[heraldtype.Channel(fmt.Sprint("c", i))] = true
						return nil
					}
					if p.Addresses == nil {
						p.Addresses = map[heraldtype.Channel]string{}
					}
					p.Addresses[heraldtype.Channel(fmt.Sprint("a", i))] = "x"
					return nil
				})
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("ProfileChangeBy: %v", err)
			}
		}
		p, err := b.s.ProfileGet(b.ctx, "t1", "r1")
		if err != nil || len(p.Consent) != each || len(p.Addresses) != each {
			t.Fatalf("profile %+v (%v); want all %d consents and %d addresses", p, err, each, each)
		}
		if got := list(t, b, "t1", "r1", 0, 1000); len(got) != each {
			t.Fatalf("%d consent changes recorded, want %d", len(got), each)
		}
		refused := errors.New("no")
		if err := b.s.ProfileChangeBy(b.ctx, "t1", "r1", by, func(p *store.Profile) error {
			p.Consent = nil
			return refused
		}); !errors.Is(err, refused) {
			t.Fatalf("a refusing change: %v, want its own error", err)
		}
		if q, err := b.s.ProfileGet(b.ctx, "t1", "r1"); err != nil || len(q.Consent) != each {
			t.Fatalf("after a refused change: %+v (%v); want it unchanged", q, err)
		}
	})

	t.Run("ErasureDeletesTheHistory", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		put(t, b, "r1", map[heraldtype.Channel]bool{sms: true}, by)
		put(t, b, "r1", map[heraldtype.Channel]bool{sms: false}, by)
		put(t, b, "r2", map[heraldtype.Channel]bool{sms: true}, by)
		res, err := b.s.RecipientErase(b.ctx, store.RecipientEraseParams{Tenant: "t1", Recipient: "r1"})
		if err != nil || !res.Profile {
			t.Fatalf("erase: %+v (%v)", res, err)
		}
		if got := list(t, b, "t1", "r1", 0, 0); len(got) != 0 {
			t.Fatalf("%d changes left after the erasure", len(got))
		}
		if got := list(t, b, "t1", "r2", 0, 0); len(got) != 1 {
			t.Fatalf("another recipient's history: %d changes, want 1", len(got))
		}
		if h.Query != nil {
			if rows := h.Query(t, b.s, `SELECT count(*) FROM consent_history WHERE recipient = 'r1'`); rows[0][0] != "0" {
				t.Fatalf("consent_history still holds %s rows of the erased recipient", rows[0][0])
			}
		}
		// A put after the erasure starts a new history: from none.
		put(t, b, "r1", map[heraldtype.Channel]bool{sms: true}, by)
		expect(t, list(t, b, "t1", "r1", 0, 0), change(sms, nil, &yes, b.clk.Now(), by))
	})
}

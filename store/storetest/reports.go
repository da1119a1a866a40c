package storetest

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// delivered is a delivery report: PROVIDER_ACCEPTED or UNKNOWN to
// DELIVERED, for provider p (the provider claimPush claims with).
func delivered(mid string) store.ReportParams {
	return store.ReportParams{Provider: "p", MessageID: mid, To: heraldtype.DeliveryDelivered, Reason: "DLR",
		From: []heraldtype.DeliveryState{heraldtype.DeliveryProviderAccepted, heraldtype.DeliveryUnknown}}
}

func report(t *testing.T, b bundle, p store.ReportParams) store.ReportOutcome {
	t.Helper()
	out, err := b.s.DeliveryReport(b.ctx, p)
	if err != nil {
		t.Fatalf("DeliveryReport %+v: %v", p, err)
	}
	return out
}

func testReports(t *testing.T, h Harness) {
	t.Run("AcceptedMovesOnceThenNoChange", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		mid := sentPush(t, b, "t1", "r1", heraldtype.DeliveryProviderAccepted)
		b.clk.Advance(time.Minute)
		at := b.clk.Now()
		want := store.ReportOutcome{From: heraldtype.DeliveryProviderAccepted, Moved: true, Channel: heraldtype.ChannelPush, Tenant: "t1"}
		if got := report(t, b, delivered(mid)); got != want {
			t.Fatalf("first report: %+v, want %+v", got, want)
		}
		wantRow(t, b, mid, heraldtype.DeliveryDelivered, "DLR", at)
		b.clk.Advance(time.Minute)
		want = store.ReportOutcome{From: heraldtype.DeliveryDelivered, Channel: heraldtype.ChannelPush, Tenant: "t1", Reason: "DLR"}
		if got := report(t, b, delivered(mid)); got != want {
			t.Fatalf("second report: %+v, want %+v", got, want)
		}
		wantRow(t, b, mid, heraldtype.DeliveryDelivered, "DLR", at)
	})
	t.Run("NeverBackwards", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		mid := sentPush(t, b, "t1", "r1", heraldtype.DeliveryProviderAccepted)
		report(t, b, delivered(mid))
		at := b.clk.Now()
		b.clk.Advance(time.Minute)
		failed := delivered(mid)
		failed.To, failed.Reason = heraldtype.DeliveryPermanentFailure, "DLR_FAILED"
		if got := report(t, b, failed); got.Moved || got.From != heraldtype.DeliveryDelivered {
			t.Fatalf("a failure after DELIVERED: %+v, want nothing moved", got)
		}
		wantRow(t, b, mid, heraldtype.DeliveryDelivered, "DLR", at)
		// States the report may not move stay as they are: a send still in
		// flight, one that ended without a call.
		for _, st := range []heraldtype.DeliveryState{heraldtype.DeliverySending, heraldtype.DeliveryPermanentFailure, heraldtype.DeliveryRetryWait} {
			m := sentPush(t, b, "t1", "r1", st)
			before := delivery(t, b, m)
			if got := report(t, b, delivered(m)); got.Moved || got.From != st {
				t.Fatalf("report on %s: %+v, want nothing moved", st, got)
			}
			wantRow(t, b, m, st, before.Reason, before.UpdatedAt)
		}
	})
	t.Run("OnlyTheProvidersOwnMessages", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		mid := sentPush(t, b, "t1", "r1", heraldtype.DeliveryProviderAccepted)
		other := delivered(mid)
		other.Provider = "q"
		for name, p := range map[string]store.ReportParams{"OtherProvider": other, "NoSuchMessage": delivered(mid + "x")} {
			if _, err := b.s.DeliveryReport(b.ctx, p); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("%s: %v, want ErrNotFound", name, err)
			}
		}
		wantRow(t, b, mid, heraldtype.DeliveryProviderAccepted, "", delivery(t, b, mid).UpdatedAt)
	})
	// A vendor that pushes a whole account's reports to one URL (Bizppurio):
	// a report taken at p's URL reaches the deliveries of p and of its
	// AlsoProviders (the account's other entries) with the same fencing —
	// once, never back, never while SENDING — and still no other
	// provider's, nor, with Tenant, another tenant's.
	t.Run("AReportReachesItsAccountsOtherProviders", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		via := func(tenant, prov string, state heraldtype.DeliveryState) string {
			t.Helper()
			nid, mid := pushFor(t, b, tenant, "r1")
			if res := claimDelivery(t, b, store.DeliveryClaimParams{MessageID: mid, NotificationID: nid, Tenant: tenant,
				Channel: heraldtype.ChannelPush, Provider: prov, Owner: "w"}); !res.Claimed {
				t.Fatalf("claim %s: %+v", mid, res)
			}
			if state != heraldtype.DeliverySending && !record(t, b, mid, 1, state, time.Minute) {
				t.Fatalf("record %s for %s", state, mid)
			}
			return mid
		}
		account := func(mid string) store.ReportParams {
			p := delivered(mid)
			p.AlsoProviders = []string{"q"}
			return p
		}
		sibling := via("t1", "q", heraldtype.DeliveryUnknown)
		before := delivery(t, b, sibling)
		// Without the account, p's report does not reach q's message.
		if _, err := b.s.DeliveryReport(b.ctx, delivered(sibling)); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("p's report on q's message: %v, want ErrNotFound", err)
		}
		wantRow(t, b, sibling, heraldtype.DeliveryUnknown, before.Reason, before.UpdatedAt)
		b.clk.Advance(time.Minute)
		at := b.clk.Now()
		want := store.ReportOutcome{From: heraldtype.DeliveryUnknown, Moved: true, Channel: heraldtype.ChannelPush, Tenant: "t1", Reason: before.Reason}
		if got := report(t, b, account(sibling)); got != want {
			t.Fatalf("the account's report on q's message: %+v, want %+v", got, want)
		}
		wantRow(t, b, sibling, heraldtype.DeliveryDelivered, "DLR", at)
		// Repeated, and a late failure: found, nothing moves.
		b.clk.Advance(time.Minute)
		failed := account(sibling)
		failed.To, failed.Reason = heraldtype.DeliveryPermanentFailure, "DLR_FAILED"
		for _, p := range []store.ReportParams{account(sibling), failed} {
			if got := report(t, b, p); got.Moved || got.From != heraldtype.DeliveryDelivered {
				t.Fatalf("%s after DELIVERED: %+v, want nothing moved", p.Reason, got)
			}
		}
		wantRow(t, b, sibling, heraldtype.DeliveryDelivered, "DLR", at)
		// p's own messages are reached as before.
		own := via("t1", "p", heraldtype.DeliveryProviderAccepted)
		if got := report(t, b, account(own)); !got.Moved {
			t.Fatalf("the account's report on p's own message: %+v, want moved", got)
		}
		// A send of the account still in flight: found, not moved.
		inFlight := via("t1", "q", heraldtype.DeliverySending)
		if got := report(t, b, account(inFlight)); got.Moved || got.From != heraldtype.DeliverySending {
			t.Fatalf("the account's report on q's SENDING: %+v, want nothing moved", got)
		}
		// Another account's message (provider r), and a tenant's report on
		// another tenant's message of the account: not found, untouched.
		other := via("t1", "r", heraldtype.DeliveryProviderAccepted)
		theirs := via("t2", "q", heraldtype.DeliveryProviderAccepted)
		t1Only := account(theirs)
		t1Only.Tenant = "t1"
		for name, p := range map[string]store.ReportParams{"AnotherAccount": account(other), "AnotherTenant": t1Only} {
			before := delivery(t, b, p.MessageID)
			if _, err := b.s.DeliveryReport(b.ctx, p); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("%s: %v, want ErrNotFound", name, err)
			}
			wantRow(t, b, p.MessageID, before.State, before.Reason, before.UpdatedAt)
		}
		// "" names the deliveries made through no provider: refused.
		blank := account(other)
		blank.AlsoProviders = []string{"q", ""}
		if _, err := b.s.DeliveryReport(b.ctx, blank); !errors.Is(err, store.ErrNoProvider) {
			t.Fatalf("AlsoProviders with \"\": %v, want ErrNoProvider", err)
		}
	})
	// A person's word (Provider "") settles any provider's delivery, and
	// with Tenant only that tenant's: another tenant's message is not
	// found, and nothing moves it.
	t.Run("APersonsWordWithinItsTenant", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		mid := unknownPush(t, b)
		before := delivery(t, b, mid)
		// A Provider "" without AnyProvider is refused, not read as any.
		noProvider := delivered(mid)
		noProvider.Provider = ""
		if _, err := b.s.DeliveryReport(b.ctx, noProvider); !errors.Is(err, store.ErrNoProvider) {
			t.Fatalf("a report with no provider: %v, want ErrNoProvider", err)
		}
		person := store.ReportParams{AnyProvider: true, MessageID: mid, Tenant: "t2", From: []heraldtype.DeliveryState{heraldtype.DeliveryUnknown},
			To: heraldtype.DeliveryPermanentFailure, Reason: "SETTLED_FAILED"}
		if _, err := b.s.DeliveryReport(b.ctx, person); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("another tenant's person: %v, want ErrNotFound", err)
		}
		wantRow(t, b, mid, heraldtype.DeliveryUnknown, before.Reason, before.UpdatedAt)
		b.clk.Advance(time.Minute)
		person.Tenant = "t1"
		want := store.ReportOutcome{From: heraldtype.DeliveryUnknown, Moved: true, Channel: heraldtype.ChannelPush, Tenant: "t1", Reason: before.Reason}
		if got := report(t, b, person); got != want {
			t.Fatalf("the tenant's person: %+v, want %+v", got, want)
		}
		wantRow(t, b, mid, heraldtype.DeliveryPermanentFailure, "SETTLED_FAILED", b.clk.Now())
		// The operator (no tenant) finds it too, and moves nothing twice.
		person.Tenant = ""
		if got := report(t, b, person); got.Moved || got.From != heraldtype.DeliveryPermanentFailure || got.Tenant != "t1" || got.Reason != "SETTLED_FAILED" {
			t.Fatalf("the operator after it: %+v, want nothing moved", got)
		}
	})
	// A person's list of UNKNOWN deliveries: every provider's and tenant's,
	// or one's, by provider and message id, in pages; a look-up's mark
	// (LOOKUP_…) is listed too, a settled one no more.
	t.Run("UnknownListForAPerson", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		unknownVia := func(tenant, prov string) string {
			nid, mid := pushFor(t, b, tenant, "r1")
			if res := claimDelivery(t, b, store.DeliveryClaimParams{MessageID: mid, NotificationID: nid, Tenant: tenant,
				Channel: heraldtype.ChannelPush, Provider: prov, Owner: "w"}); !res.Claimed {
				t.Fatalf("claim %s: %+v", mid, res)
			}
			if !record(t, b, mid, 1, heraldtype.DeliveryUnknown, 0) {
				t.Fatalf("record UNKNOWN for %s", mid)
			}
			return mid
		}
		p1, q1, p2 := unknownVia("t1", "p"), unknownVia("t1", "q"), unknownVia("t2", "p")
		sentPush(t, b, "t1", "r1", heraldtype.DeliveryProviderAccepted)
		looked := store.ReportParams{Provider: "p", MessageID: p2, From: []heraldtype.DeliveryState{heraldtype.DeliveryUnknown},
			To: heraldtype.DeliveryUnknown, Reason: store.ReasonLookupPrefix + "NOT_FOUND"}
		report(t, b, looked)
		list := func(p store.UnknownListParams) []string {
			t.Helper()
			got, err := b.s.DeliveryUnknownList(b.ctx, p)
			if err != nil {
				t.Fatalf("DeliveryUnknownList %+v: %v", p, err)
			}
			var mids []string
			for _, e := range got {
				mids = append(mids, e.Tenant+"/"+e.Provider+"/"+e.MessageID)
				if e.Channel != heraldtype.ChannelPush || e.NotificationID == "" || e.Since.IsZero() || e.Attempts != 1 {
					t.Fatalf("entry %+v lacks what a person reads", e)
				}
			}
			return mids
		}
		// By provider, then message id: p's two (in message id order), q's.
		pFirst, pSecond := "t1/p/"+p1, "t2/p/"+p2
		if p2 < p1 {
			pFirst, pSecond = pSecond, pFirst
		}
		want := []string{pFirst, pSecond, "t1/q/" + q1}
		if got := list(store.UnknownListParams{Limit: 10}); !slices.Equal(got, want) {
			t.Fatalf("all: %v, want %v", got, want)
		}
		first, err := b.s.DeliveryUnknownList(b.ctx, store.UnknownListParams{Limit: 2})
		if err != nil || len(first) != 2 {
			t.Fatalf("a page of 2: %d, %v", len(first), err)
		}
		if got := list(store.UnknownListParams{Limit: 2, After: first[1].Position()}); !slices.Equal(got, want[2:]) {
			t.Fatalf("the page after: %v, want %v", got, want[2:])
		}
		if got := list(store.UnknownListParams{Tenant: "t1", Limit: 10}); len(got) != 2 || slices.Contains(got, "t2/p/"+p2) {
			t.Fatalf("t1's: %v", got)
		}
		if got := list(store.UnknownListParams{Provider: "q", Limit: 10}); !slices.Equal(got, []string{"t1/q/" + q1}) {
			t.Fatalf("q's: %v", got)
		}
		settled := store.ReportParams{AnyProvider: true, MessageID: q1, From: []heraldtype.DeliveryState{heraldtype.DeliveryUnknown},
			To: heraldtype.DeliveryDelivered, Reason: "SETTLED_DELIVERED"}
		report(t, b, settled)
		if got := list(store.UnknownListParams{Provider: "q", Limit: 10}); len(got) != 0 {
			t.Fatalf("q's after the settle: %v, want none", got)
		}
	})
	t.Run("RacingReportsMoveOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		mid := unknownPush(t, b)
		var wg sync.WaitGroup
		// Reads at once first, so that a pool opens its connections
		// before the race and the reports do overlap.
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := b.s.DeliveryGet(b.ctx, mid); err != nil {
					t.Errorf("warm-up read: %v", err)
				}
			}()
		}
		wg.Wait()
		start := make(chan struct{})
		outs := make([]store.ReportOutcome, 32)
		errs := make([]error, 32)
		for i := range outs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				p := delivered(mid)
				if i%2 == 1 {
					p.To, p.Reason = heraldtype.DeliveryPermanentFailure, "DLR_FAILED"
				}
				outs[i], errs[i] = b.s.DeliveryReport(b.ctx, p)
			}()
		}
		close(start)
		wg.Wait()
		moved := 0
		for i, o := range outs {
			if errs[i] != nil {
				t.Fatalf("report %d: %v", i, errs[i])
			}
			if o.Moved {
				moved++
				if o.From != heraldtype.DeliveryUnknown {
					t.Fatalf("report %d moved from %s, want UNKNOWN", i, o.From)
				}
			}
		}
		if moved != 1 {
			t.Fatalf("%d reports moved the delivery, want exactly 1", moved)
		}
	})
	t.Run("UnknownPageByProviderSkippingLookedUp", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		var mids []string
		for range 3 {
			mids = append(mids, unknownPush(t, b))
		}
		// One more UNKNOWN through the sender's record, with the provider's
		// reference its answer carried.
		nid, ref := pushFor(t, b, "t1", "r1")
		claimPush(t, b, "t1", nid, ref)
		if res, err := b.s.DeliveryRecord(b.ctx, store.DeliveryRecordParams{MessageID: ref, Attempt: 1, State: heraldtype.DeliveryUnknown,
			Reason: "HTTP_502", ProviderRef: "SM123", Owner: "w", Class: "unknown", StartedAt: b.clk.Now()}); err != nil || !res.Recorded {
			t.Fatalf("record UNKNOWN with a reference: %+v %v", res, err)
		}
		mids = append(mids, ref)
		// An accepted one and another provider's are not listed.
		sentPush(t, b, "t1", "r1", heraldtype.DeliveryProviderAccepted)
		// A look-up answered for the first: left for a person.
		notFound := store.ReportParams{Provider: "p", MessageID: mids[0], From: []heraldtype.DeliveryState{heraldtype.DeliveryUnknown},
			To: heraldtype.DeliveryUnknown, Reason: store.ReasonLookupPrefix + "NOT_FOUND"}
		if got := report(t, b, notFound); !got.Moved {
			t.Fatalf("LOOKUP_NOT_FOUND: %+v, want written", got)
		}
		want := append([]string(nil), mids[1:]...)
		slices.Sort(want)
		var got []string
		refs := map[string]string{}
		after := ""
		for range 10 {
			page, err := b.s.DeliveryUnknownPage(b.ctx, store.UnknownPageParams{Provider: "p", After: after, Limit: 2})
			if err != nil {
				t.Fatalf("DeliveryUnknownPage: %v", err)
			}
			if len(page) > 2 {
				t.Fatalf("page of %d, limit 2", len(page))
			}
			if len(page) == 0 {
				break
			}
			for _, u := range page {
				got = append(got, u.MessageID)
				refs[u.MessageID] = u.ProviderRef
				if u.ClaimedAt.IsZero() {
					t.Fatalf("%s: no claim time", u.MessageID)
				}
			}
			after = page[len(page)-1].MessageID
		}
		if !slices.Equal(got, want) {
			t.Fatalf("pages: %v, want %v", got, want)
		}
		if refs[ref] != "SM123" || refs[mids[1]] != "" {
			t.Fatalf("references %v, want SM123 for %s and none for %s", refs, ref, mids[1])
		}
		if page, err := b.s.DeliveryUnknownPage(b.ctx, store.UnknownPageParams{Provider: "q", Limit: 10}); err != nil || len(page) != 0 {
			t.Fatalf("another provider's page: %v %v, want none", page, err)
		}
	})
}

package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// list runs NotificationList; any error fails the test.
func list(t *testing.T, b bundle, p store.NotificationListParams) []store.NotificationView {
	t.Helper()
	if p.Tenant == "" {
		p.Tenant = "t1"
	}
	if p.Limit == 0 {
		p.Limit = 100
	}
	vs, err := b.s.NotificationList(b.ctx, p)
	if err != nil {
		t.Fatalf("NotificationList %+v: %v", p, err)
	}
	return vs
}

func idsOf(vs []store.NotificationView) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.ID
	}
	return out
}

// walk pages through a listing limit at a time and returns every id seen;
// between pages it calls between (may be nil).
func walk(t *testing.T, b bundle, p store.NotificationListParams, limit int, between func()) []string {
	t.Helper()
	p.Limit = limit
	var seen []string
	for range 100 {
		page := list(t, b, p)
		seen = append(seen, idsOf(page)...)
		if len(page) < limit {
			return seen
		}
		pos := page[len(page)-1].Position()
		p.Before = &pos
		if between != nil {
			between()
		}
	}
	t.Fatalf("the walk did not end after 100 pages: %d ids", len(seen))
	return nil
}

func testListing(t *testing.T, h Harness) {
	t.Run("NewestFirstAndPagesNeitherSkipNorRepeatTies", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		// Seven notifications in one instant (their ids sort in random
		// order), then three in later instants; another tenant's between.
		var want []string
		for range 7 {
			p, _ := create(t, b, nil)
			want = append(want, p.ID)
		}
		create(t, b, func(p *store.NotificationCreateParams) { p.Tenant = "t2" })
		slices.Sort(want)
		for range 3 {
			b.clk.Advance(time.Millisecond)
			p, _ := create(t, b, nil)
			want = append(want, p.ID)
		}
		slices.Reverse(want)
		if got := idsOf(list(t, b, store.NotificationListParams{})); !slices.Equal(got, want) {
			t.Fatalf("list = %v, want newest first, ties by id descending: %v", got, want)
		}
		for _, limit := range []int{1, 2, 3, 4, 10} {
			// A notification accepted mid-walk, later than the walk's
			// first row, is not part of it and shifts nothing.
			start := idsOf(list(t, b, store.NotificationListParams{}))
			got := walk(t, b, store.NotificationListParams{}, limit, func() {
				b.clk.Advance(time.Millisecond)
				create(t, b, nil)
			})
			if !slices.Equal(got, start) || !slices.Equal(got[len(got)-len(want):], want) {
				t.Fatalf("pages of %d = %v, want %v", limit, got, start)
			}
		}
		v := list(t, b, store.NotificationListParams{Limit: 1})[0]
		if v.Tenant != "t1" || v.Kind != "k" || v.Recipient != "r1" || len(v.Deliveries) != 1 ||
			v.Deliveries[0].MessageID != store.MessageID(v.ID, heraldtype.ChannelWebhook) || !v.Now.Equal(b.clk.Now()) {
			t.Fatalf("listed view %+v", v)
		}
		if got := list(t, b, store.NotificationListParams{Tenant: "t3"}); len(got) != 0 {
			t.Fatalf("a tenant without notifications lists %v", idsOf(got))
		}
	})
	t.Run("FiltersRecipientKindSince", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		ids := map[string]string{}
		for _, rk := range []struct{ name, recipient, kind string }{
			{"r1k1", "r1", "k1"}, {"r1k2", "r1", "k2"}, {"r2k1", "r2", "k1"}, {"r2k2", "r2", "k2"},
		} {
			p, _ := create(t, b, func(p *store.NotificationCreateParams) { p.Recipient, p.Kind = rk.recipient, rk.kind })
			ids[rk.name] = p.ID
			b.clk.Advance(time.Second)
		}
		create(t, b, func(p *store.NotificationCreateParams) { p.Tenant, p.Recipient, p.Kind = "t2", "r1", "k1" })
		since := Epoch.Add(2 * time.Second)
		for _, tc := range []struct {
			name string
			p    store.NotificationListParams
			want []string
		}{
			{"Recipient", store.NotificationListParams{Recipient: "r1"}, []string{ids["r1k2"], ids["r1k1"]}},
			{"Kind", store.NotificationListParams{Kind: "k1"}, []string{ids["r2k1"], ids["r1k1"]}},
			{"RecipientAndKind", store.NotificationListParams{Recipient: "r2", Kind: "k2"}, []string{ids["r2k2"]}},
			{"SinceIsInclusive", store.NotificationListParams{Since: &since}, []string{ids["r2k2"], ids["r2k1"]}},
			{"RecipientSince", store.NotificationListParams{Recipient: "r1", Since: &since}, nil},
			{"UnknownRecipient", store.NotificationListParams{Recipient: "nobody"}, nil},
		} {
			if got := idsOf(list(t, b, tc.p)); !slices.Equal(got, tc.want) {
				t.Errorf("%s: list = %v, want %v", tc.name, got, tc.want)
			}
		}
		// Pages of a recipient's listing walk its own index.
		if got := walk(t, b, store.NotificationListParams{Recipient: "r1"}, 1, nil); !slices.Equal(got, []string{ids["r1k2"], ids["r1k1"]}) {
			t.Errorf("r1 in pages of 1 = %v", got)
		}
	})
	t.Run("StateFilterMatchesEntryState", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		byState := buildStates(t, b)
		views := list(t, b, store.NotificationListParams{})
		// The Go merge, on what the list itself returned, says which
		// notifications each state filter must keep.
		shown := map[string][]string{}
		for _, v := range views {
			for _, dv := range v.Deliveries {
				state, _, _ := v.EntryState(dv)
				if !slices.Contains(shown[state], v.ID) {
					shown[state] = append(shown[state], v.ID)
				}
			}
		}
		for name, id := range byState {
			if !slices.Contains(shown[name], id) {
				t.Errorf("the notification built to be %s shows %v", name, shown)
			}
		}
		for _, state := range []string{heraldtype.ViewScheduled, heraldtype.ViewPending, "SENDING", "RETRY_WAIT", "PARKED",
			"PROVIDER_ACCEPTED", "DELIVERED", "PERMANENT_FAILURE", "RETRY_EXHAUSTED", "UNKNOWN", "SUPPRESSED", "EXPIRED", "FAILED"} {
			got := idsOf(list(t, b, store.NotificationListParams{State: state}))
			if !slices.Equal(got, shown[state]) {
				t.Errorf("state=%s lists %v, want %v", state, got, shown[state])
			}
		}
		// SCHEDULED turns PENDING when send_at passes, in the filter too.
		b.clk.Advance(2 * time.Hour)
		if got := list(t, b, store.NotificationListParams{State: heraldtype.ViewScheduled}); len(got) != 0 {
			t.Errorf("after send_at, state=SCHEDULED lists %v", idsOf(got))
		}
		if got := idsOf(list(t, b, store.NotificationListParams{State: heraldtype.ViewPending})); !slices.Contains(got, byState["SCHEDULED"]) {
			t.Errorf("after send_at, state=PENDING lists %v without the scheduled one", got)
		}
	})
}

// buildStates creates one notification of tenant t1 per state the read API
// can show and returns each state's notification id. Notifications on two
// channels show two states at once.
func buildStates(t *testing.T, b bundle) map[string]string {
	t.Helper()
	out := map[string]string{}
	mk := func(name string, mutate func(p *store.NotificationCreateParams)) store.NotificationCreateParams {
		p, _ := create(t, b, mutate)
		out[name] = p.ID
		b.clk.Advance(time.Millisecond)
		return p
	}
	claimed := func(p store.NotificationCreateParams) string {
		msg := store.MessageID(p.ID, heraldtype.ChannelWebhook)
		res := claimDelivery(t, b, store.DeliveryClaimParams{MessageID: msg, NotificationID: p.ID, Tenant: "t1",
			Channel: heraldtype.ChannelWebhook, Provider: "p", Owner: "w"})
		if !res.Claimed {
			t.Fatalf("claim %s: %+v", msg, res)
		}
		return msg
	}
	decided := func(p store.NotificationCreateParams, state heraldtype.DeliveryState, reason string) {
		ok, err := b.s.DeliveryDecide(b.ctx, store.DeliveryDecideParams{MessageID: store.MessageID(p.ID, heraldtype.ChannelWebhook),
			NotificationID: p.ID, Tenant: "t1", Channel: heraldtype.ChannelWebhook, State: state, Reason: reason})
		if err != nil || !ok {
			t.Fatalf("decide %s: %v %v", state, ok, err)
		}
	}
	later := Epoch.Add(time.Hour)
	mk(heraldtype.ViewScheduled, func(p *store.NotificationCreateParams) { p.SendAt = &later })
	claimed(mk("SENDING", nil))
	for _, s := range []heraldtype.DeliveryState{heraldtype.DeliveryRetryWait, heraldtype.DeliveryProviderAccepted, heraldtype.DeliveryDelivered,
		heraldtype.DeliveryPermanentFailure, heraldtype.DeliveryRetryExhausted, heraldtype.DeliveryUnknown} {
		p := mk(string(s), nil)
		if !record(t, b, claimed(p), 1, s, time.Minute) {
			t.Fatalf("record %s", s)
		}
	}
	decided(mk("PARKED", nil), heraldtype.DeliveryParked, heraldtype.ReasonTemplateMissing)
	decided(mk("SUPPRESSED", nil), heraldtype.DeliverySuppressed, heraldtype.ReasonConsentDenied)

	// PENDING and FAILED on one notification of two channels; FAILED is
	// the outbox's end without a send.
	p := mk(heraldtype.ViewPending, func(p *store.NotificationCreateParams) {
		p.Channels = []heraldtype.Channel{heraldtype.ChannelWebhook, heraldtype.ChannelPush}
	})
	out["FAILED"] = p.ID
	rows := claim(t, b, heraldtype.LaneTransactional, 100)
	for _, r := range rows {
		if r.NotificationID == p.ID && r.Channel == heraldtype.ChannelPush {
			if ok, err := b.s.OutboxComplete(b.ctx, r.Fence, heraldtype.OutboxFailed, heraldtype.ReasonStoreUnavailable); err != nil || !ok {
				t.Fatalf("fail the push row: %v %v", ok, err)
			}
			continue
		}
		// Every other claimed row goes back as it was, due now.
		if ok, err := b.s.OutboxRetry(b.ctx, store.OutboxRetryParams{Fence: r.Fence}); err != nil || !ok {
			t.Fatalf("put row %s back: %v %v", r.MessageID, ok, err)
		}
	}
	// EXPIRED wins over a delivery that has not ended (a claim the expiry
	// leaves to the stale sweep; a waiting retry it would end); a terminal
	// delivery wins over EXPIRED.
	soon := b.clk.Now().Add(time.Second)
	expiring := func(p *store.NotificationCreateParams) { p.ExpiresAt = &soon }
	claimed(mk("EXPIRED", expiring))
	sent, _ := create(t, b, expiring)
	if !record(t, b, claimed(sent), 1, heraldtype.DeliveryUnknown, 0) {
		t.Fatal("record UNKNOWN before expiry")
	}
	b.clk.Advance(time.Second)
	if expired, err := b.s.OutboxExpire(b.ctx, 1000); err != nil || len(expired) != 2 {
		t.Fatalf("expired %+v (%v), want the two expiring rows", expired, err)
	}
	if got := entryStates(t, b, sent.ID); !slices.Equal(got, []string{"UNKNOWN"}) {
		t.Fatalf("a terminal delivery over an EXPIRED row shows %v", got)
	}
	return out
}

// entryStates reads tenant t1's notification id and returns the state each
// planned send shows.
func entryStates(t *testing.T, b bundle, id string) []string {
	t.Helper()
	v, err := b.s.NotificationGet(b.ctx, "t1", id)
	if err != nil {
		t.Fatalf("NotificationGet %s: %v", id, err)
	}
	var out []string
	for _, dv := range v.Deliveries {
		s, _, _ := v.EntryState(dv)
		out = append(out, s)
	}
	return out
}

func testAttempts(t *testing.T, h Harness) {
	t.Run("ListsEachMessagesCallsInOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		for _, id := range []string{"m1", "m2"} {
			if res := claimDelivery(t, b, claimParams(id)); !res.Claimed {
				t.Fatalf("claim %s: %+v", id, res)
			}
		}
		log := func(id string, attempt int, state heraldtype.DeliveryState, class, reason string, took time.Duration) {
			t.Helper()
			res, err := b.s.DeliveryRecord(b.ctx, store.DeliveryRecordParams{MessageID: id, Attempt: attempt, State: state,
				Reason: reason, Owner: "w", Class: class, StartedAt: b.clk.Now(), Duration: took})
			if err != nil || !res.Recorded {
				t.Fatalf("record %s attempt %d: %+v %v", id, attempt, res, err)
			}
		}
		first := b.clk.Now()
		log("m1", 1, heraldtype.DeliveryRetryWait, "not_sent", "HTTP_429", 12*time.Millisecond)
		log("m2", 1, heraldtype.DeliveryPermanentFailure, "permanent", "HTTP_410", 3*time.Millisecond)
		b.clk.Advance(time.Second)
		if res := claimDelivery(t, b, claimParams("m1")); !res.Claimed || res.Attempt != 2 {
			t.Fatalf("claim the retry: %+v", res)
		}
		log("m1", 2, heraldtype.DeliveryProviderAccepted, "accepted", "", 40*time.Millisecond)

		got, err := b.s.AttemptList(b.ctx, []string{"m1", "none"})
		if err != nil {
			t.Fatalf("AttemptList: %v", err)
		}
		want := []store.Attempt{
			{MessageID: "m1", Attempt: 1, StartedAt: first, Class: "not_sent", Reason: "HTTP_429", Duration: 12 * time.Millisecond},
			{MessageID: "m1", Attempt: 2, StartedAt: first.Add(time.Second), Class: "accepted", Duration: 40 * time.Millisecond},
		}
		if len(got) != len(want) {
			t.Fatalf("AttemptList = %+v, want %+v", got, want)
		}
		for i := range want {
			if g := got[i]; g.MessageID != want[i].MessageID || g.Attempt != want[i].Attempt || !g.StartedAt.Equal(want[i].StartedAt) ||
				g.Class != want[i].Class || g.Reason != want[i].Reason || g.Duration != want[i].Duration {
				t.Errorf("attempt %d = %+v, want %+v", i, g, want[i])
			}
		}
		if both, err := b.s.AttemptList(b.ctx, []string{"m2", "m1"}); err != nil || len(both) != 3 {
			t.Fatalf("both messages: %+v (%v)", both, err)
		}
		if none, err := b.s.AttemptList(b.ctx, nil); err != nil || len(none) != 0 {
			t.Fatalf("no messages: %+v (%v)", none, err)
		}
	})
	// Issue 8, path 5b: a sender whose result write committed but whose
	// answer was lost writes the same result again; the attempt log keeps
	// one row per attempt. A call whose result came after the stale sweep
	// settled its claim is logged too, once, though its result is refused.
	t.Run("OneRowPerAttemptWhenTheRecordIsWrittenAgain", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		if res := claimDelivery(t, b, claimParams("late")); !res.Claimed {
			t.Fatalf("claim late: %+v", res)
		}
		b.clk.Advance(11 * time.Minute)
		if stale, err := b.s.DeliverySweepStale(b.ctx, 10*time.Minute); err != nil || len(stale) != 1 {
			t.Fatalf("swept %+v (%v), want the late claim", stale, err)
		}
		for range 2 {
			if record(t, b, "late", 1, heraldtype.DeliveryProviderAccepted, 0) {
				t.Fatal("a late result was written over the stale sweep's UNKNOWN")
			}
		}
		if res := claimDelivery(t, b, claimParams("lost")); !res.Claimed {
			t.Fatalf("claim lost: %+v", res)
		}
		for i, want := range []bool{true, false} {
			if got := record(t, b, "lost", 1, heraldtype.DeliveryProviderAccepted, 0); got != want {
				t.Fatalf("record %d of the same attempt: recorded %v, want %v", i+1, got, want)
			}
		}
		got, err := b.s.AttemptList(b.ctx, []string{"late", "lost"})
		if err != nil {
			t.Fatalf("AttemptList: %v", err)
		}
		if len(got) != 2 || got[0].MessageID != "late" || got[0].Attempt != 1 || got[1].MessageID != "lost" || got[1].Attempt != 1 {
			t.Fatalf("attempt log %+v, want one row for attempt 1 of late and one of lost", got)
		}
	})
}

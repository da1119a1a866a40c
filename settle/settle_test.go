package settle_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testdb"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/settle"
	"github.com/heraldhq/herald/store"
)

// sent makes a notification with one sms send, claimed through provider
// prov and, unless state is SENDING, recorded as state. It returns the
// message id.
func sent(t *testing.T, st store.Store, prov string, state heraldtype.DeliveryState) string {
	t.Helper()
	ctx := context.Background()
	id := fmt.Sprintf("ntf_%d", time.Now().UnixNano())
	_, err := st.NotificationCreate(ctx, store.NotificationCreateParams{
		Tenant: "t1", IdempotencyKey: "k" + id, RequestHash: "h", IdempotencyTTL: time.Hour, Response: []byte(`{}`),
		ID: id, Recipient: "r1", EventID: "e1", Kind: "k", Lane: heraldtype.LaneTransactional,
		Params: json.RawMessage(`{}`), Channels: []heraldtype.Channel{heraldtype.ChannelSMS},
	})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	mid := store.MessageID(id, heraldtype.ChannelSMS)
	res, err := st.DeliveryClaim(ctx, store.DeliveryClaimParams{MessageID: mid, NotificationID: id, Tenant: "t1",
		Channel: heraldtype.ChannelSMS, Provider: prov, Owner: "w"})
	if err != nil || !res.Claimed {
		t.Fatalf("claim: %+v %v", res, err)
	}
	if state != heraldtype.DeliverySending {
		rec, err := st.DeliveryRecord(ctx, store.DeliveryRecordParams{MessageID: mid, Attempt: 1, State: state,
			RetryDelay: time.Minute, Owner: "w", Class: "x", StartedAt: time.Now()})
		if err != nil || !rec.Recorded {
			t.Fatalf("record %s: %+v %v", state, rec, err)
		}
	}
	return mid
}

func stateOf(t *testing.T, st store.Store, mid string) (heraldtype.DeliveryState, string) {
	t.Helper()
	d, err := st.DeliveryGet(context.Background(), mid)
	if err != nil {
		t.Fatalf("DeliveryGet: %v", err)
	}
	return d.State, d.Reason
}

// TestApplyWalksTheTable applies every report to a delivery in every state
// a provider's report can meet, on both stores, and checks the state it
// leaves: the package doc's table, and nothing else moves.
func TestApplyWalksTheTable(t *testing.T) {
	const (
		PA  = heraldtype.DeliveryProviderAccepted
		UNK = heraldtype.DeliveryUnknown
		DEL = heraldtype.DeliveryDelivered
		PF  = heraldtype.DeliveryPermanentFailure
		SND = heraldtype.DeliverySending
		RW  = heraldtype.DeliveryRetryWait
		RX  = heraldtype.DeliveryRetryExhausted
	)
	type row struct {
		result provider.ReportResult
		from   heraldtype.DeliveryState
		to     heraldtype.DeliveryState
		reason string // "" = unchanged
		err    error
	}
	rows := []row{
		{provider.ReportDelivered, PA, DEL, "X_DELIVERED", nil},
		{provider.ReportDelivered, UNK, DEL, "X_DELIVERED", nil},
		{provider.ReportDelivered, PF, PF, "", nil},
		{provider.ReportDelivered, RX, RX, "", nil},
		{provider.ReportDelivered, RW, RW, "", nil},
		{provider.ReportDelivered, SND, SND, "", settle.ErrNotYet},
		{provider.ReportFailed, PA, PF, "X_DELIVERED", nil},
		{provider.ReportFailed, UNK, PF, "X_DELIVERED", nil},
		{provider.ReportFailed, DEL, DEL, "", nil},
		{provider.ReportFailed, SND, SND, "", settle.ErrNotYet},
		{provider.ReportPending, UNK, PA, "X_DELIVERED", nil},
		{provider.ReportPending, PA, PA, "", nil},
		{provider.ReportPending, DEL, DEL, "", nil},
		{provider.ReportNotFound, UNK, UNK, settle.ReasonLookupNotFound, nil},
		{provider.ReportNotFound, PA, PA, "", nil},
	}
	for _, driver := range testdb.Drivers {
		t.Run(driver, func(t *testing.T) {
			st := testdb.Open(t, driver, nil).Store
			for _, r := range rows {
				t.Run(fmt.Sprintf("%s_on_%s", r.result, r.from), func(t *testing.T) {
					mid := sent(t, st, "x", r.from)
					if r.from == DEL {
						if _, err := settle.Apply(context.Background(), st, nil, nil, "x", "callback",
							provider.Report{MessageID: mid, Result: provider.ReportDelivered, Reason: "FIRST"}); err != nil {
							t.Fatal(err)
						}
					}
					_, beforeReason := stateOf(t, st, mid)
					_, err := settle.Apply(context.Background(), st, nil, nil, "x", "callback",
						provider.Report{MessageID: mid, Result: r.result, Reason: "X_DELIVERED"})
					if !errors.Is(err, r.err) {
						t.Fatalf("Apply: %v, want %v", err, r.err)
					}
					state, reason := stateOf(t, st, mid)
					wantReason := r.reason
					if wantReason == "" {
						wantReason = beforeReason
					}
					if state != r.to || reason != wantReason {
						t.Fatalf("after %s on %s: %s(%s), want %s(%s)", r.result, r.from, state, reason, r.to, wantReason)
					}
				})
			}
			t.Run("AnotherProvidersMessage", func(t *testing.T) {
				mid := sent(t, st, "x", PA)
				if _, err := settle.Apply(context.Background(), st, nil, nil, "y", "callback",
					provider.Report{MessageID: mid, Result: provider.ReportDelivered}); !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("Apply by another provider: %v, want ErrNotFound", err)
				}
				if s, _ := stateOf(t, st, mid); s != PA {
					t.Fatalf("state %s, want it untouched", s)
				}
			})
			t.Run("NoReasonGivenWritesTheDefault", func(t *testing.T) {
				mid := sent(t, st, "x", PA)
				if _, err := settle.Apply(context.Background(), st, nil, nil, "x", "callback",
					provider.Report{MessageID: mid, Result: provider.ReportFailed}); err != nil {
					t.Fatal(err)
				}
				if s, r := stateOf(t, st, mid); s != PF || r != settle.ReasonReportFailed {
					t.Fatalf("%s(%s), want PERMANENT_FAILURE(%s)", s, r, settle.ReasonReportFailed)
				}
			})
		})
	}
}

// checker answers look-ups from a map by message id; a missing entry is a
// failed look-up.
type checker struct {
	mu      sync.Mutex
	answers map[string]provider.Report
	asked   []string
}

func (c *checker) Status(_ context.Context, q provider.StatusQuery) (provider.Report, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asked = append(c.asked, q.MessageID)
	r, ok := c.answers[q.MessageID]
	if !ok {
		return provider.Report{}, errors.New("look-up refused")
	}
	return r, nil
}

func TestLookerSettlesWhatTheAnswerProves(t *testing.T) {
	for _, driver := range testdb.Drivers {
		t.Run(driver, func(t *testing.T) {
			st := testdb.Open(t, driver, nil).Store
			ctx := context.Background()
			var unk []string
			for range 5 {
				unk = append(unk, sent(t, st, "x", heraldtype.DeliveryUnknown))
			}
			otherProv := sent(t, st, "y", heraldtype.DeliveryUnknown)
			accepted := sent(t, st, "x", heraldtype.DeliveryProviderAccepted)
			c := &checker{answers: map[string]provider.Report{
				// unk[0]: the look-up fails; it stays UNKNOWN, and the
				// second round goes on after it rather than asking again.
				unk[1]: {Result: provider.ReportDelivered, Reason: "X_DELIVRD"},
				unk[2]: {Result: provider.ReportFailed, Reason: "X_4401"},
				unk[3]: {Result: provider.ReportPending, Reason: "X_SENT"},
				unk[4]: {Result: provider.ReportNotFound},
			}}
			rec := &alert.Recorder{}
			leading := true
			l := settle.NewLooker(settle.LookupConfig{Store: st, Checkers: map[string]provider.StatusChecker{"x": c},
				PerRound: 3, Rate: 1000, IsLeader: func() bool { return leading }, Clock: clock.Real{}, Alerts: rec})

			r1 := l.Round(ctx) // the first three
			r2 := l.Round(ctx) // the other two: the end, so the next starts over
			if r1.Asked["x"] != 3 || r2.Asked["x"] != 2 {
				t.Fatalf("asked %d then %d, want 3 then 2 (bounded per round)", r1.Asked["x"], r2.Asked["x"])
			}
			want := map[string][2]string{
				unk[0]:    {"UNKNOWN", ""},
				unk[1]:    {"DELIVERED", "X_DELIVRD"},
				unk[2]:    {"PERMANENT_FAILURE", "X_4401"},
				unk[3]:    {"PROVIDER_ACCEPTED", "X_SENT"},
				unk[4]:    {"UNKNOWN", settle.ReasonLookupNotFound},
				otherProv: {"UNKNOWN", ""},
				accepted:  {"PROVIDER_ACCEPTED", ""},
			}
			for mid, w := range want {
				if s, r := stateOf(t, st, mid); string(s) != w[0] || r != w[1] {
					t.Errorf("%s: %s(%s), want %s(%s)", mid, s, r, w[0], w[1])
				}
			}
			if got := r1.Settled["x"] + r2.Settled["x"]; got != 3 {
				t.Errorf("settled %d, want 3", got)
			}
			if r1.NotFound["x"]+r2.NotFound["x"] != 1 || r1.Failed["x"]+r2.Failed["x"] != 1 {
				t.Errorf("not found %v %v, failed %v %v; want one each", r1.NotFound, r2.NotFound, r1.Failed, r2.Failed)
			}
			if got := rec.Alerts(); len(got) != 1 || got[0].Kind != alert.UnknownUnsettled || got[0].Reason != settle.ReasonLookupNotFound || got[0].Tenant != "t1" {
				t.Errorf("alerts %+v, want one UNKNOWN_UNSETTLED(LOOKUP_NOT_FOUND) naming tenant t1", got)
			}
			// The next round asks only about the one whose look-up failed:
			// the settled left UNKNOWN, the not-found is a person's now.
			c.mu.Lock()
			c.asked = nil
			c.mu.Unlock()
			if r := l.Round(ctx); r.Asked["x"] != 1 || len(c.asked) != 1 || c.asked[0] != unk[0] {
				t.Fatalf("third round asked %v, want only %s", c.asked, unk[0])
			}
			// A process that does not lead asks nothing.
			leading = false
			c.mu.Lock()
			c.asked = nil
			c.mu.Unlock()
			if r := l.Round(ctx); r.Asked["x"] != 0 || len(c.asked) != 0 {
				t.Fatalf("a follower asked %v", c.asked)
			}
		})
	}
}

// noRefChecker can be asked only by its own reference: every query without
// one is provider.ErrNoReference.
type noRefChecker struct{ asked int }

func (c *noRefChecker) Status(_ context.Context, q provider.StatusQuery) (provider.Report, error) {
	c.asked++
	if q.ProviderRef == "" {
		return provider.Report{}, fmt.Errorf("look-up: %w", provider.ErrNoReference)
	}
	return provider.Report{Result: provider.ReportDelivered}, nil
}

// An UNKNOWN whose provider can be asked only by a reference the call
// never got is left for a person (LOOKUP_NO_REFERENCE) and not asked about
// again.
func TestLookerLeavesWhatCannotBeAskedForAPerson(t *testing.T) {
	st := testdb.Open(t, "sqlite", nil).Store
	mid := sent(t, st, "x", heraldtype.DeliveryUnknown)
	c := &noRefChecker{}
	l := settle.NewLooker(settle.LookupConfig{Store: st, Checkers: map[string]provider.StatusChecker{"x": c}, Rate: 1000})
	if r := l.Round(context.Background()); r.NotFound["x"] != 1 {
		t.Fatalf("round: %+v, want one left for a person", r)
	}
	if s, r := stateOf(t, st, mid); s != heraldtype.DeliveryUnknown || r != settle.ReasonLookupNoReference {
		t.Fatalf("%s(%s), want UNKNOWN(%s)", s, r, settle.ReasonLookupNoReference)
	}
	l.Round(context.Background())
	if c.asked != 1 {
		t.Fatalf("asked %d times, want once", c.asked)
	}
}

// shortLimiter has no token for anyone.
type shortLimiter struct{ waits int }

func (s *shortLimiter) Wait(context.Context, string, heraldtype.Lane) (time.Duration, error) {
	s.waits++
	return time.Second, nil
}

// A look-up spends from the provider's shared call budget: with none left,
// the round asks nothing (sends come first) and the next round tries again.
func TestLookerSpendsFromTheSharedRateLimit(t *testing.T) {
	st := testdb.Open(t, "sqlite", nil).Store
	sent(t, st, "x", heraldtype.DeliveryUnknown)
	c := &checker{answers: map[string]provider.Report{}}
	lim := &shortLimiter{}
	l := settle.NewLooker(settle.LookupConfig{Store: st, Checkers: map[string]provider.StatusChecker{"x": c}, Rate: 1000, Limiter: lim})
	if r := l.Round(context.Background()); r.Asked["x"] != 0 || len(c.asked) != 0 || lim.waits != 1 {
		t.Fatalf("asked %v with no budget (limiter asked %d times), want nothing asked", c.asked, lim.waits)
	}
}

// A report with no provider reaches nothing: "" is not the person's
// "any provider", at Apply and at the store; and a person's word settles
// an UNKNOWN of any provider once, answers a retry of the same result
// without moving anything, and refuses another result.
func TestAPersonsWordAndAReportWithNoProvider(t *testing.T) {
	t.Parallel()
	for _, driver := range testdb.Drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			st := testdb.Open(t, driver, nil).Store
			ctx := context.Background()
			mid := sent(t, st, "twilio", heraldtype.DeliveryUnknown)
			if _, err := settle.Apply(ctx, st, nil, nil, "", "callback", provider.Report{MessageID: mid, Result: provider.ReportFailed}); err == nil {
				t.Fatal("Apply with no provider: no error")
			}
			if _, err := st.DeliveryReport(ctx, store.ReportParams{MessageID: mid, From: []heraldtype.DeliveryState{heraldtype.DeliveryUnknown},
				To: heraldtype.DeliveryPermanentFailure, Reason: "X"}); !errors.Is(err, store.ErrNoProvider) {
				t.Fatalf("DeliveryReport with no provider: %v, want ErrNoProvider", err)
			}
			if s, _ := stateOf(t, st, mid); s != heraldtype.DeliveryUnknown {
				t.Fatalf("after the refused reports: %s", s)
			}
			if _, err := settle.ByPerson(ctx, st, "t1", mid, "maybe"); !errors.Is(err, settle.ErrResult) {
				t.Fatalf("a result that is neither: %v", err)
			}
			out, err := settle.ByPerson(ctx, st, "t1", mid, settle.ResultFailed)
			if err != nil || !out.Moved || out.Tenant != "t1" {
				t.Fatalf("settle: %+v %v", out, err)
			}
			if s, r := stateOf(t, st, mid); s != heraldtype.DeliveryPermanentFailure || r != settle.ReasonSettledFailed {
				t.Fatalf("settled: %s(%s)", s, r)
			}
			if out, err := settle.ByPerson(ctx, st, "", mid, settle.ResultFailed); err != nil || out.Moved {
				t.Fatalf("the same result again: %+v %v, want no error and nothing moved", out, err)
			}
			if _, err := settle.ByPerson(ctx, st, "t1", mid, settle.ResultDelivered); !errors.Is(err, settle.ErrNotUnknown) {
				t.Fatalf("another result after it: %v, want ErrNotUnknown", err)
			}
		})
	}
}

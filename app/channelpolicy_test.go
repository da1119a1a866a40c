package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/fallback"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testdb"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testmq"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/lookup"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/watchdog"
)

// scripted is a provider whose answer a test chooses per call, optionally
// held until released, and which keeps the message ids it was called with.
type scripted struct {
	answer func(provider.Message) provider.Outcome
	mu     sync.Mutex
	calls  []string
	hold   chan struct{} // nil: answer at once
	called chan string   // each call's message id, when set
}

func (s *scripted) Send(_ context.Context, m provider.Message) provider.Outcome {
	s.mu.Lock()
	s.calls = append(s.calls, m.MessageID)
	hold, called := s.hold, s.called
	s.mu.Unlock()
	if called != nil {
		called <- m.MessageID
	}
	if hold != nil {
		<-hold
	}
	return s.answer(m)
}

func (s *scripted) callsOf(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		if len(c) > len(id) && c[:len(id)] == id {
			n++
		}
	}
	return n
}

func accept(provider.Message) provider.Outcome { return provider.AcceptedOutcome("ref") }

// chainHerald is the development herald with a kind whose channels are
// a fallback chain (inbox, then push, AlimTalk, SMS: policy first) and a
// scripted provider on each of those three channels.
type chainHerald struct {
	base                string
	app                 *app.App
	push, alimtalk, sms *scripted
}

// chainConfig adds the kind payment.first to the development config.
func chainConfig(c *config.Config) {
	text := config.Template{Title: "Payment approved", Body: "Paid {{.amount}} won"}
	c.Kinds = append(c.Kinds, config.Kind{
		Name: "payment.first", Category: "transactional", Policy: config.PolicyFirst,
		Channels:  []string{"inbox", "push", "alimtalk", "sms"},
		Templates: map[string]config.Template{"inbox": text, "push": text, "alimtalk": text, "sms": text},
	})
}

func startChainHerald(t *testing.T, database string, push func(provider.Message) provider.Outcome, opts app.Options, edit func(*config.Config)) *chainHerald {
	t.Helper()
	cfg := testConfig(t, database, func(c *config.Config) {
		chainConfig(c)
		if edit != nil {
			edit(c)
		}
	})
	h := &chainHerald{push: &scripted{answer: push}, alimtalk: &scripted{answer: accept}, sms: &scripted{answer: accept}}
	opts.Providers = map[string]provider.Provider{"sim-push": h.push, "sim-alimtalk": h.alimtalk, "sim-sms": h.sms}
	h.app, h.base = newHerald(t, cfg, opts)
	return h
}

// recipient gives recipient a profile with AlimTalk and SMS numbers and,
// for each token, a push device.
func (h *chainHerald) recipient(t *testing.T, recipient string, tokens ...string) {
	t.Helper()
	if code, body := call(t, h.base, http.MethodPut, "/v1/recipients/"+recipient+"/profile", config.DevAPIKey,
		`{"addresses":{"alimtalk":"01012345678","sms":"01012345678"}}`); code != http.StatusOK && code != http.StatusNoContent {
		t.Fatalf("profile: %d %s", code, body)
	}
	for _, tok := range tokens {
		if code, body := call(t, h.base, http.MethodPut, "/v1/recipients/"+recipient+"/devices/"+url.PathEscape(tok), config.DevAPIKey,
			`{"platform":"fcm"}`); code != http.StatusCreated && code != http.StatusOK {
			t.Fatalf("device: %d %s", code, body)
		}
	}
}

// notify accepts a payment.first notification for recipient.
func (h *chainHerald) notify(t *testing.T, recipient, event string) string {
	t.Helper()
	code, body := call(t, h.base, http.MethodPost, "/v1/notifications", config.DevAPIKey,
		`{"recipient":"`+recipient+`","event_id":"`+event+`","kind":"payment.first","params":{"amount":"1000"}}`)
	var a struct{ ID string }
	if err := json.Unmarshal(body, &a); code != http.StatusAccepted || err != nil {
		t.Fatalf("notify: %d %s", code, body)
	}
	return a.ID
}

// lookupOf reads GET /v1/notifications/{id}.
func (h *chainHerald) lookupOf(t *testing.T, id string) lookup.Notification {
	t.Helper()
	code, body := call(t, h.base, http.MethodGet, "/v1/notifications/"+id, config.DevAPIKey, "")
	var n lookup.Notification
	if err := json.Unmarshal(body, &n); code != http.StatusOK || err != nil {
		t.Fatalf("lookup %s: %d %s", id, code, body)
	}
	return n
}

// entry is a lookup entry as a test states it: channel, state, reason and
// the fallback object.
type entry struct {
	Channel, State, Reason string
	Fallback               lookup.Fallback
}

// settled waits until the notification's entries are exactly want (in
// order), the inbox's aside.
func (h *chainHerald) settled(t *testing.T, id string, want ...entry) lookup.Notification {
	t.Helper()
	var n lookup.Notification
	var got []entry
	deadline := time.Now().Add(testenv.Patience)
	for {
		n, got = h.lookupOf(t, id), nil
		for _, d := range n.Deliveries {
			if d.Channel == "inbox" {
				continue
			}
			e := entry{Channel: d.Channel, State: d.State, Reason: d.Reason}
			if d.Fallback != nil {
				e.Fallback = *d.Fallback
			}
			got = append(got, e)
		}
		if slices.Equal(got, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("notification %s: entries %s, want %s", id, jsonOf(got), jsonOf(want))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n.ChannelPolicy != config.PolicyFirst {
		t.Fatalf("channel_policy %q, want first", n.ChannelPolicy)
	}
	return n
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// The channel policy first over HTTP, on both stores: push (one device)
// is tried first; a dead token releases AlimTalk, whose acceptance skips
// SMS; an accepted push skips both; an UNKNOWN push skips both (it may
// have gone out); a recipient with no push device gets AlimTalk at once.
// The lookup shows each step and why it was or was not used.
func TestChannelPolicyFirst(t *testing.T) {
	for _, driver := range testdb.Drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			push := func(m provider.Message) provider.Outcome {
				switch m.Address {
				case "tok-dead-0000000000001":
					return provider.DeadDestinationOutcome(heraldtype.ReasonUnregistered)
				case "tok-lost-0000000000001":
					return provider.UnknownOutcome("TIMEOUT_AFTER_WRITE")
				}
				return provider.AcceptedOutcome("ref")
			}
			h := startChainHerald(t, driverDatabase(t, driver), push, app.Options{}, nil)
			runHerald(t, h.app)
			first := lookup.Fallback{Step: 1, Decision: fallback.DecisionFirst}

			t.Run("PushDeadAlimTalkUsed", func(t *testing.T) {
				h.recipient(t, "dead", "tok-dead-0000000000001")
				id := h.notify(t, "dead", "e1")
				h.settled(t, id,
					entry{"push", "PERMANENT_FAILURE", heraldtype.ReasonUnregistered, first},
					entry{"alimtalk", "PROVIDER_ACCEPTED", "", lookup.Fallback{Step: 2, Decision: fallback.DecisionUsed, After: "PERMANENT_FAILURE"}},
					entry{"sms", "SKIPPED", fallback.ReasonNotNeeded, lookup.Fallback{Step: 3, Decision: fallback.DecisionSkipped, After: "PROVIDER_ACCEPTED"}})
				if n := h.sms.callsOf(id); n != 0 {
					t.Fatalf("%d SMS calls, want none", n)
				}
			})
			// An accepted push, or one that may have gone out (UNKNOWN):
			// no other channel is called.
			for _, c := range []struct{ recipient, token, state, reason string }{
				{"live", "tok-live-0000000000001", "PROVIDER_ACCEPTED", ""},
				{"lost", "tok-lost-0000000000001", "UNKNOWN", "TIMEOUT_AFTER_WRITE"},
			} {
				t.Run("Push"+c.state+"NothingElseSent", func(t *testing.T) {
					h.recipient(t, c.recipient, c.token)
					id := h.notify(t, c.recipient, "e-"+c.recipient)
					skipped := func(step int) lookup.Fallback {
						return lookup.Fallback{Step: step, Decision: fallback.DecisionSkipped, After: c.state}
					}
					h.settled(t, id,
						entry{"push", c.state, c.reason, first},
						entry{"alimtalk", "SKIPPED", fallback.ReasonNotNeeded, skipped(2)},
						entry{"sms", "SKIPPED", fallback.ReasonNotNeeded, skipped(3)})
					if n := h.alimtalk.callsOf(id) + h.sms.callsOf(id); n != 0 {
						t.Fatalf("%d AlimTalk and SMS calls, want none", n)
					}
				})
			}
			t.Run("NoPushDeviceFirstUsableChannel", func(t *testing.T) {
				h.recipient(t, "nodevice")
				id := h.notify(t, "nodevice", "e4")
				h.settled(t, id,
					entry{"push", "SUPPRESSED", heraldtype.ReasonDestinationUnavailable, first},
					entry{"alimtalk", "PROVIDER_ACCEPTED", "", lookup.Fallback{Step: 2, Decision: fallback.DecisionUsed, After: heraldtype.ReasonDestinationUnavailable}},
					entry{"sms", "SKIPPED", fallback.ReasonNotNeeded, lookup.Fallback{Step: 3, Decision: fallback.DecisionSkipped, After: "PROVIDER_ACCEPTED"}})
				if n := h.push.callsOf(id); n != 0 {
					t.Fatalf("%d push calls for a recipient without a device, want none", n)
				}
			})
			t.Run("NoPushNoAlimTalkSMS", func(t *testing.T) {
				// Only an SMS number: two steps suppressed, the third sent.
				if code, body := call(t, h.base, http.MethodPut, "/v1/recipients/smsonly/profile", config.DevAPIKey,
					`{"addresses":{"sms":"01012345678"}}`); code != http.StatusOK && code != http.StatusNoContent {
					t.Fatalf("profile: %d %s", code, body)
				}
				id := h.notify(t, "smsonly", "e5")
				h.settled(t, id,
					entry{"push", "SUPPRESSED", heraldtype.ReasonDestinationUnavailable, first},
					entry{"alimtalk", "SUPPRESSED", heraldtype.ReasonDestinationUnavailable, lookup.Fallback{Step: 2, Decision: fallback.DecisionUsed, After: heraldtype.ReasonDestinationUnavailable}},
					entry{"sms", "PROVIDER_ACCEPTED", "", lookup.Fallback{Step: 3, Decision: fallback.DecisionUsed, After: heraldtype.ReasonDestinationUnavailable}})
			})
		})
	}
}

// While the first step is under way the lookup shows the plan: push
// SENDING, AlimTalk and SMS WAITING; the inbox item is there at once,
// outside the chain.
func TestChannelPolicyFirstLookupShowsThePlan(t *testing.T) {
	for _, driver := range testdb.Drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			h := startChainHerald(t, driverDatabase(t, driver), accept, app.Options{}, nil)
			release := make(chan struct{})
			h.push.hold, h.push.called = release, make(chan string, 1)
			runHerald(t, h.app)
			h.recipient(t, "alice", "tok-alice-000000000001")
			id := h.notify(t, "alice", "e1")
			testenv.Recv(t, h.push.called, "the push call")
			waiting := func(step int) lookup.Fallback { return lookup.Fallback{Step: step, Decision: fallback.DecisionWaiting} }
			n := h.settled(t, id,
				entry{"push", "SENDING", "", lookup.Fallback{Step: 1, Decision: fallback.DecisionFirst}},
				entry{"alimtalk", "WAITING", "", waiting(2)},
				entry{"sms", "WAITING", "", waiting(3)})
			if d := n.Deliveries[0]; d.Channel != "inbox" || d.State != "STORED" || d.Fallback != nil {
				t.Fatalf("inbox entry %+v, want STORED outside the chain", d)
			}
			// The list's state filter finds it by a waiting step.
			code, body := call(t, h.base, http.MethodGet, "/v1/notifications?state=WAITING", config.DevAPIKey, "")
			var page lookup.Page
			if err := json.Unmarshal(body, &page); code != http.StatusOK || err != nil || len(page.Notifications) != 1 || page.Notifications[0].ID != id {
				t.Fatalf("list state=WAITING: %d %s", code, body)
			}
			close(release)
			h.settled(t, id,
				entry{"push", "PROVIDER_ACCEPTED", "", lookup.Fallback{Step: 1, Decision: fallback.DecisionFirst}},
				entry{"alimtalk", "SKIPPED", fallback.ReasonNotNeeded, lookup.Fallback{Step: 2, Decision: fallback.DecisionSkipped, After: "PROVIDER_ACCEPTED"}},
				entry{"sms", "SKIPPED", fallback.ReasonNotNeeded, lookup.Fallback{Step: 3, Decision: fallback.DecisionSkipped, After: "PROVIDER_ACCEPTED"}})
		})
	}
}

// A fallback step whose release was lost (the push failed, but AlimTalk's
// row is back in WAITING, as a crash between two writes or a row older
// than the chain's writes would leave it) is found by the running
// herald's watchdog once the push ended a grace ago, released through the
// chain's rule and sent: one AlimTalk call, SMS skipped, one REDRIVEN
// alert (FALLBACK_UNMOVED).
func TestChannelPolicyFirstLostReleaseIsRepaired(t *testing.T) {
	for _, driver := range testdb.Drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
			db := testdb.Open(t, driver, clk)
			alerts := &alert.Recorder{}
			h := startChainHerald(t, db.Database, accept, app.Options{Clock: clk, Alerts: alerts}, func(c *config.Config) {
				c.WatchdogInterval = config.Duration(20 * time.Millisecond)
				c.PollInterval = config.Duration(20 * time.Millisecond)
				c.ReconcileInterval = config.Duration(24 * time.Hour)
			})
			ctx := context.Background()
			s := db.Store
			const id = "ntf_lostrelease1"
			if _, err := s.NotificationCreate(ctx, store.NotificationCreateParams{Tenant: config.DevTenant, ID: id,
				Recipient: "bob", EventID: "e1", Kind: "payment.first", Lane: heraldtype.LaneTransactional,
				Params: json.RawMessage(`{"amount":"1000"}`), Fallback: true,
				Channels: []heraldtype.Channel{heraldtype.ChannelPush, heraldtype.ChannelAlimTalk, heraldtype.ChannelSMS}}); err != nil {
				t.Fatal(err)
			}
			if err := s.ProfilePut(ctx, store.Profile{Tenant: config.DevTenant, Recipient: "bob",
				Addresses: map[heraldtype.Channel]string{heraldtype.ChannelAlimTalk: "01012345678", heraldtype.ChannelSMS: "01012345678"}}); err != nil {
				t.Fatal(err)
			}
			// The push is sent and fails for good, as a sender would write it.
			rows, err := s.OutboxClaim(ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "old", Limit: 10, Lease: time.Minute})
			if err != nil || len(rows) != 1 {
				t.Fatalf("claim: %+v (%v)", rows, err)
			}
			push := rows[0]
			if res, err := s.DeliveryClaim(ctx, store.DeliveryClaimParams{MessageID: push.MessageID, NotificationID: id, Tenant: config.DevTenant,
				Channel: push.Channel, Provider: "sim-push", Owner: "old"}); err != nil || !res.Claimed {
				t.Fatalf("delivery claim: %+v (%v)", res, err)
			}
			if rec, err := s.DeliveryRecord(ctx, store.DeliveryRecordParams{MessageID: push.MessageID, Attempt: 1, State: heraldtype.DeliveryPermanentFailure,
				Reason: "BAD_TOKEN", Owner: "old", Class: "permanent", StartedAt: clk.Now(), Outbox: &push.Fence}); err != nil || !rec.Recorded {
				t.Fatalf("record: %+v (%v)", rec, err)
			}
			// ... but AlimTalk's release is lost.
			alim := store.MessageID(id, heraldtype.ChannelAlimTalk)
			db.Exec(t, "UPDATE outbox SET state = 'WAITING', fallback_fails = 0, fallback_after = NULL WHERE message_id = '"+alim+"'")

			stop := runHerald(t, h.app)
			defer stop()
			h.settled(t, id,
				entry{"push", "PERMANENT_FAILURE", "BAD_TOKEN", lookup.Fallback{Step: 1, Decision: fallback.DecisionFirst}},
				entry{"alimtalk", "WAITING", "", lookup.Fallback{Step: 2, Decision: fallback.DecisionWaiting}},
				entry{"sms", "WAITING", "", lookup.Fallback{Step: 3, Decision: fallback.DecisionWaiting}})
			if n := h.alimtalk.callsOf(id); n != 0 {
				t.Fatalf("AlimTalk sent within the grace (%d calls)", n)
			}
			clk.Advance(watchdog.DefaultSweepGrace + time.Second)
			h.settled(t, id,
				entry{"push", "PERMANENT_FAILURE", "BAD_TOKEN", lookup.Fallback{Step: 1, Decision: fallback.DecisionFirst}},
				entry{"alimtalk", "PROVIDER_ACCEPTED", "", lookup.Fallback{Step: 2, Decision: fallback.DecisionUsed, After: "PERMANENT_FAILURE"}},
				entry{"sms", "SKIPPED", fallback.ReasonNotNeeded, lookup.Fallback{Step: 3, Decision: fallback.DecisionSkipped, After: "PROVIDER_ACCEPTED"}})
			stop()
			if a, s := h.alimtalk.callsOf(id), h.sms.callsOf(id); a != 1 || s != 0 {
				t.Fatalf("AlimTalk %d and SMS %d calls, want 1 and 0", a, s)
			}
			var redriven []alert.Alert
			for _, a := range alerts.Alerts() {
				if a.Kind == alert.Redriven {
					redriven = append(redriven, a)
				}
			}
			want := []alert.Alert{{Kind: alert.Redriven, MessageID: alim, Tenant: config.DevTenant, Reason: watchdog.ReasonFallbackUnmoved}}
			if !slices.Equal(redriven, want) {
				t.Fatalf("REDRIVEN alerts %+v, want %+v", redriven, want)
			}
		})
	}
}

// With the rabbitmq transport the relay publishes only the first step;
// the sender's result write releases AlimTalk's row, which the relay then
// publishes: one call per channel, SMS skipped.
func TestChannelPolicyFirstOverRabbitMQ(t *testing.T) {
	t.Parallel()
	mq := testmq.VHost(t)
	push := func(provider.Message) provider.Outcome {
		return provider.DeadDestinationOutcome(heraldtype.ReasonUnregistered)
	}
	h := startChainHerald(t, testpg.Schema(t), push, app.Options{}, func(c *config.Config) {
		c.Transport, c.RabbitMQURL = "rabbitmq", mq
	})
	runHerald(t, h.app)
	h.recipient(t, "dead", "tok-dead-0000000000001")
	id := h.notify(t, "dead", "e1")
	h.settled(t, id,
		entry{"push", "PERMANENT_FAILURE", heraldtype.ReasonUnregistered, lookup.Fallback{Step: 1, Decision: fallback.DecisionFirst}},
		entry{"alimtalk", "PROVIDER_ACCEPTED", "", lookup.Fallback{Step: 2, Decision: fallback.DecisionUsed, After: "PERMANENT_FAILURE"}},
		entry{"sms", "SKIPPED", fallback.ReasonNotNeeded, lookup.Fallback{Step: 3, Decision: fallback.DecisionSkipped, After: "PROVIDER_ACCEPTED"}})
	if p, a, s := h.push.callsOf(id), h.alimtalk.callsOf(id), h.sms.callsOf(id); p != 1 || a != 1 || s != 0 {
		t.Fatalf("calls push %d, AlimTalk %d, SMS %d; want 1, 1, 0", p, a, s)
	}
}

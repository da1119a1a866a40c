package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/lookup"
	"github.com/heraldhq/herald/provider/sim"
	"github.com/heraldhq/herald/store"
)

// quietHerald is the development herald on a fake clock, with an SMS kind
// of each category, and its simulated SMS provider.
type quietHerald struct {
	a      *app.App
	base   string
	clk    *clock.Fake
	sms    *sim.Sim
	alerts *alert.Recorder
	seoul  *time.Location
}

// startQuietHerald runs herald on driver ("sqlite", "postgres",
// "sqlite+rabbitmq" or "postgres+rabbitmq") with the default quiet hours
// (08:00–20:50 Asia/Seoul, the dispatcher stopping at 20:40), its clock at
// start; edits adjust the config and the options.
func startQuietHerald(t *testing.T, driver string, start time.Time, edits ...func(*config.Config, *app.Options)) *quietHerald {
	t.Helper()
	h := &quietHerald{clk: clock.NewFake(start), alerts: &alert.Recorder{}}
	h.seoul, _ = time.LoadLocation("Asia/Seoul")
	opts := app.Options{Clock: h.clk, Alerts: h.alerts}
	cfg := transportConfig(t, driver, func(c *config.Config) {
		c.SweepInterval = config.Duration(20 * time.Millisecond)
		sms := map[string]config.Template{"sms": {Body: "{{.text}}"}}
		c.Kinds = append(c.Kinds,
			config.Kind{Name: "promo.sms", Category: "marketing", Channels: []string{"sms"}, Templates: sms},
			config.Kind{Name: "receipt.sms", Category: "transactional", Channels: []string{"sms"}, Templates: sms},
			config.Kind{Name: "fraud.sms", Category: "alert", Channels: []string{"sms"}, Templates: sms})
		for _, edit := range edits {
			edit(c, &opts)
		}
	})
	h.a, h.base = newHerald(t, cfg, opts)
	h.sms = h.a.Sim("sim-sms")
	runHerald(t, h.a)
	for recipient, profile := range map[string]string{
		"r-kr":   `{"addresses":{"sms":"+821000000001"},"consent":{"sms":true}}`,
		"r-ny":   `{"addresses":{"sms":"+12120000002"},"consent":{"sms":true},"time_zone":"America/New_York"}`,
		"r-none": `{"addresses":{"sms":"+821000000003"}}`,
	} {
		if code, body := call(t, h.base, http.MethodPut, "/v1/recipients/"+recipient+"/profile", config.DevAPIKey, profile); code != http.StatusNoContent {
			t.Fatalf("profile %s: %d %s", recipient, code, body)
		}
	}
	return h
}

// kst is a Seoul wall time in June 2026.
func (h *quietHerald) kst(d, hh, mm int) time.Time {
	return time.Date(2026, 6, d, hh, mm, 0, 0, h.seoul)
}

// setClock moves the fake clock forward to at.
func (h *quietHerald) setClock(t *testing.T, at time.Time) {
	t.Helper()
	if d := at.Sub(h.clk.Now()); d < 0 {
		t.Fatalf("the clock cannot go back from %s to %s", h.clk.Now(), at)
	} else {
		h.clk.Advance(d)
	}
}

// post accepts a notification of kind for recipient, due by expires (nil:
// none), and returns its id and its SMS message id.
func (h *quietHerald) post(t *testing.T, kind, recipient, event string, expires *time.Time) (string, string) {
	t.Helper()
	body := map[string]any{"recipient": recipient, "event_id": event, "kind": kind, "params": map[string]string{"text": "hi"}}
	if expires != nil {
		body["expires_at"] = expires.Format(time.RFC3339)
	}
	raw, _ := json.Marshal(body)
	code, out := call(t, h.base, http.MethodPost, "/v1/notifications", config.DevAPIKey, string(raw))
	var accepted struct{ ID string }
	if err := json.Unmarshal(out, &accepted); code != http.StatusAccepted || err != nil {
		t.Fatalf("post %s: %d %s", kind, code, out)
	}
	return accepted.ID, store.MessageID(accepted.ID, heraldtype.ChannelSMS)
}

// state is the notification's SMS entry as GET /v1/notifications/{id}
// shows it.
func (h *quietHerald) state(t *testing.T, id string) lookup.Delivery {
	t.Helper()
	code, body := call(t, h.base, http.MethodGet, "/v1/notifications/"+id, config.DevAPIKey, "")
	var n lookup.Notification
	if err := json.Unmarshal(body, &n); code != http.StatusOK || err != nil || len(n.Deliveries) != 1 {
		t.Fatalf("lookup %s: %d %s", id, code, body)
	}
	return n.Deliveries[0]
}

// waitState waits for the SMS entry of id to show state (and reason).
func (h *quietHerald) waitState(t *testing.T, id, state, reason string) {
	t.Helper()
	testenv.WaitFor(t, id+" in "+state+"/"+reason, testenv.Patience, func() bool {
		d := h.state(t, id)
		return d.State == state && d.Reason == reason
	})
}

// waitDeferred waits for the outbox row of id to wait, PENDING, for
// until with reason QUIET_HOURS: the claim took it and the quiet hours
// put it back; the lookup says so.
func (h *quietHerald) waitDeferred(t *testing.T, id string, until time.Time) {
	t.Helper()
	var last store.DeliveryView
	testenv.WaitFor(t, id+" deferred to "+until.String(), testenv.Patience, func() bool {
		v, err := h.a.Store().NotificationGet(context.Background(), config.DevTenant, id)
		if err != nil || len(v.Deliveries) != 1 {
			t.Fatalf("NotificationGet(%s): %+v %v", id, v, err)
		}
		last = v.Deliveries[0]
		return last.OutboxState == heraldtype.OutboxPending && last.OutboxReason == heraldtype.ReasonQuietHours && last.AvailableAt.Equal(until)
	})
	if last.Delivery != nil {
		t.Fatalf("%s: a deferral wrote a delivery row %+v", id, last.Delivery)
	}
	// GET /v1/notifications/{id} shows it PENDING, and why and until when.
	d := h.state(t, id)
	if d.State != heraldtype.ViewPending || d.Deferred == nil || d.Deferred.Reason != heraldtype.ReasonQuietHours || !d.Deferred.Until.Equal(until) {
		t.Fatalf("%s deferred shows %s deferred %+v, want PENDING deferred for QUIET_HOURS until %s", id, d.State, d.Deferred, until)
	}
}

func (h *quietHerald) wantCalls(t *testing.T, msg string, n int) {
	t.Helper()
	if got := h.sms.CallCount(msg); got != n {
		t.Fatalf("%s: %d provider calls, want %d", msg, got, n)
	}
}

// Quiet hours over HTTP, on both stores, with the db transport: marketing
// released until 20:39 goes out; from 20:40 the dispatcher defers it to
// 08:00 the next morning (the recipient's: a New York profile is due at
// 08:00 EDT, 21:00 in Seoul), writing only the outbox row's due time; a
// due-by that passes while deferred ends EXPIRED with an alert and no
// call; at 08:00 the deferred send goes out once. Alert and transactional
// sends go at once at any hour, and marketing without consent is
// SUPPRESSED(CONSENT_DENIED) at once, not held for the morning.
func TestQuietHoursOverHTTP(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			seoul, _ := time.LoadLocation("Asia/Seoul")
			h := startQuietHerald(t, driver, time.Date(2026, 6, 11, 20, 39, 0, 0, seoul))
			morning := h.kst(12, 8, 0)

			early, earlyMsg := h.post(t, "promo.sms", "r-kr", "early", nil)
			h.waitState(t, early, "PROVIDER_ACCEPTED", "")

			h.setClock(t, h.kst(11, 20, 40))
			late, lateMsg := h.post(t, "promo.sms", "r-kr", "late", nil)
			dueBy := h.kst(11, 23, 0)
			expiring, expiringMsg := h.post(t, "promo.sms", "r-kr", "expiring", &dueBy)
			ny, nyMsg := h.post(t, "promo.sms", "r-ny", "ny", nil)
			noConsent, _ := h.post(t, "promo.sms", "r-none", "no-consent", nil)
			receipt, _ := h.post(t, "receipt.sms", "r-kr", "receipt", nil)
			fraud, _ := h.post(t, "fraud.sms", "r-kr", "fraud", nil)

			h.waitState(t, receipt, "PROVIDER_ACCEPTED", "")
			h.waitState(t, fraud, "PROVIDER_ACCEPTED", "")
			h.waitState(t, noConsent, "SUPPRESSED", heraldtype.ReasonConsentDenied)
			h.waitDeferred(t, late, morning)
			// Deferred past its due-by: it waits for the expiry sweep.
			h.waitDeferred(t, expiring, morning)
			// 20:40 in Seoul is 07:40 in New York.
			h.waitDeferred(t, ny, h.kst(11, 21, 0))
			h.wantCalls(t, earlyMsg, 1)
			h.wantCalls(t, lateMsg, 0)
			h.wantCalls(t, expiringMsg, 0)
			h.wantCalls(t, nyMsg, 0)

			h.setClock(t, h.kst(11, 21, 0))
			h.waitState(t, ny, "PROVIDER_ACCEPTED", "")

			h.setClock(t, dueBy)
			h.waitState(t, expiring, "EXPIRED", heraldtype.ReasonExpired)
			testenv.WaitFor(t, "the OUTBOX_EXPIRED alert", testenv.Patience, func() bool {
				for _, a := range h.alerts.Alerts() {
					if a.Kind == alert.OutboxExpired && a.MessageID == expiringMsg {
						return true
					}
				}
				return false
			})
			// The night does not hold the other lanes.
			nightReceipt, _ := h.post(t, "receipt.sms", "r-kr", "night-receipt", nil)
			nightFraud, _ := h.post(t, "fraud.sms", "r-kr", "night-fraud", nil)
			h.waitState(t, nightReceipt, "PROVIDER_ACCEPTED", "")
			h.waitState(t, nightFraud, "PROVIDER_ACCEPTED", "")
			if d := h.state(t, late); d.State != heraldtype.ViewPending {
				t.Fatalf("at 23:00 the deferred send shows %s, want PENDING", d.State)
			}

			h.setClock(t, morning)
			h.waitState(t, late, "PROVIDER_ACCEPTED", "")
			h.wantCalls(t, lateMsg, 1)
			h.wantCalls(t, expiringMsg, 0)
			h.wantCalls(t, nyMsg, 1)
			if dups := h.sms.Duplicates(); len(dups) != 0 {
				t.Fatalf("sent twice: %v", dups)
			}
		})
	}
}

// metric is the value of the series named by name and labels (as GET
// /metrics prints them, in the order it prints them), "" when absent.
func metric(t *testing.T, base, series string) string {
	t.Helper()
	resp, err := testenv.HTTP.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// A campaign's notifications obey the quiet hours as any marketing send
// does (issue 12): started at 20:40 in Seoul, its sends wait for each
// recipient's morning, the one without consent is SUPPRESSED at once, and
// the campaign's counts follow the sends as they go out; on both stores
// and both transports.
func TestQuietHoursHoldACampaign(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"sqlite", "postgres", "postgres+rabbitmq"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			seoul, _ := time.LoadLocation("Asia/Seoul")
			h := startQuietHerald(t, driver, time.Date(2026, 6, 11, 20, 40, 0, 0, seoul))
			code, body := call(t, h.base, http.MethodPost, "/v1/campaigns", config.DevAPIKey,
				`{"kind":"promo.sms","params":{"text":"hi"},"recipients":[{"recipient":"r-kr"},{"recipient":"r-ny"},{"recipient":"r-none"}]}`)
			var created struct{ ID string }
			if err := json.Unmarshal(body, &created); code != http.StatusAccepted || err != nil {
				t.Fatalf("create the campaign: %d %s", code, body)
			}
			if code, body := call(t, h.base, http.MethodPost, "/v1/campaigns/"+created.ID+"/start", config.DevAPIKey, ""); code != http.StatusAccepted {
				t.Fatalf("start: %d %s", code, body)
			}
			ids := map[string]string{}
			for _, r := range []string{"r-kr", "r-ny", "r-none"} {
				testenv.WaitFor(t, "the campaign's notification to "+r, testenv.Patience, func() bool {
					code, body := call(t, h.base, http.MethodGet, "/v1/notifications?recipient="+r, config.DevAPIKey, "")
					var list struct{ Notifications []struct{ ID string } }
					if err := json.Unmarshal(body, &list); code != http.StatusOK || err != nil {
						t.Fatalf("list %s: %d %s", r, code, body)
					}
					if len(list.Notifications) == 1 {
						ids[r] = list.Notifications[0].ID
					}
					return ids[r] != ""
				})
			}
			h.waitState(t, ids["r-none"], "SUPPRESSED", heraldtype.ReasonConsentDenied)
			h.waitDeferred(t, ids["r-kr"], h.kst(12, 8, 0))
			h.waitDeferred(t, ids["r-ny"], h.kst(11, 21, 0)) // 08:00 in New York
			kr, ny := store.MessageID(ids["r-kr"], heraldtype.ChannelSMS), store.MessageID(ids["r-ny"], heraldtype.ChannelSMS)
			h.wantCalls(t, kr, 0)
			h.wantCalls(t, ny, 0)

			h.setClock(t, h.kst(11, 21, 0))
			h.waitState(t, ids["r-ny"], "PROVIDER_ACCEPTED", "")
			h.wantCalls(t, kr, 0)
			h.setClock(t, h.kst(12, 8, 0))
			h.waitState(t, ids["r-kr"], "PROVIDER_ACCEPTED", "")
			h.wantCalls(t, kr, 1)
			h.wantCalls(t, ny, 1)
			testenv.WaitFor(t, "the campaign's counts", testenv.Patience, func() bool {
				code, body := call(t, h.base, http.MethodGet, "/v1/campaigns/"+created.ID, config.DevAPIKey, "")
				var c struct {
					State            string
					Sent, Suppressed int
				}
				if err := json.Unmarshal(body, &c); code != http.StatusOK || err != nil {
					t.Fatalf("get the campaign: %d %s", code, body)
				}
				return c.State == "DONE" && c.Sent == 2 && c.Suppressed == 1
			})
		})
	}
}

package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/internal/testdb"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/lookup"
	"github.com/heraldhq/herald/provider"
)

// dlrProvider accepts every call and takes delivery reports as JSON
// {"message_id", "status"} signed by the header X-Test-Signature: good.
type dlrProvider struct{}

func (dlrProvider) Send(context.Context, provider.Message) provider.Outcome {
	return provider.AcceptedOutcome("ref-1")
}

func (dlrProvider) ParseCallback(r *http.Request, body []byte) ([]provider.Report, error) {
	if r.Header.Get("X-Test-Signature") != "good" {
		return nil, provider.ErrBadSignature
	}
	var b struct {
		MessageID string `json:"message_id"`
		Status    string `json:"status"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return nil, errors.Join(provider.ErrBadCallback, err)
	}
	res := map[string]provider.ReportResult{"delivered": provider.ReportDelivered, "failed": provider.ReportFailed, "sent": provider.ReportPending}[b.Status]
	return []provider.Report{{MessageID: b.MessageID, Result: res, Reason: "TEST_" + strings.ToUpper(b.Status)}}, nil
}

// webhookEntry waits until the notification's webhook entry is in state
// (or fails the test after 30 s) and returns it.
func webhookEntry(t *testing.T, base, id, state string) lookup.Delivery {
	t.Helper()
	return waitEntry(t, base, config.DevAPIKey, id, "webhook", state)
}

// waitEntry waits until the notification's entry on channel is in state
// (or fails the test after 30 s) and returns it.
func waitEntry(t *testing.T, base, key, id, channel, state string) lookup.Delivery {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := call(t, base, http.MethodGet, "/v1/notifications/"+id, key, "")
		var n lookup.Notification
		if err := json.Unmarshal(body, &n); code != http.StatusOK || err != nil {
			t.Fatalf("lookup %s: %d %s", id, code, body)
		}
		for _, d := range n.Deliveries {
			if d.Channel == channel && d.State == state {
				return d
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("notification %s: no %s entry in %s after 30s: %s", id, channel, state, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func notifyPayment(t *testing.T, base, event string) string {
	t.Helper()
	code, body := call(t, base, http.MethodPost, "/v1/notifications", config.DevAPIKey,
		`{"recipient":"r-dlr","event_id":"`+event+`","kind":"payment.approved","params":{"amount":"1000","merchant":"m"}}`)
	var accepted struct{ ID string }
	if err := json.Unmarshal(body, &accepted); code != http.StatusAccepted || err != nil {
		t.Fatalf("notify: %d %s", code, body)
	}
	return accepted.ID
}

func postCallback(t *testing.T, base, name, sig, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/v1/callbacks/"+name, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if sig != "" {
		req.Header.Set("X-Test-Signature", sig)
	}
	resp, err := testenv.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p struct{ Detail string }
	_ = json.NewDecoder(resp.Body).Decode(&p)
	return resp.StatusCode, p.Detail
}

// A provider's delivery report through POST /v1/callbacks/{provider}: a
// bad signature is 401 and changes nothing; a good one moves the delivery
// to DELIVERED once; a late or repeated report changes nothing; a provider
// that takes no callbacks, or none of that name, is 404.
func TestDeliveryReportsThroughTheCallbackEndpoint(t *testing.T) {
	for _, driver := range testdb.Drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t, driverDatabase(t, driver), nil)
			a, base := newHerald(t, cfg, app.Options{Providers: map[string]provider.Provider{"sim-webhook": dlrProvider{}}})
			runHerald(t, a)
			id := notifyPayment(t, base, "e1")
			d := webhookEntry(t, base, id, "PROVIDER_ACCEPTED")
			report := func(status string) string {
				return `{"message_id":"` + d.MessageID + `","status":"` + status + `"}`
			}

			for _, sig := range []string{"", "forged"} {
				if code, _ := postCallback(t, base, "sim-webhook", sig, report("delivered")); code != http.StatusUnauthorized {
					t.Fatalf("signature %q: %d, want 401", sig, code)
				}
			}
			if got := webhookEntry(t, base, id, "PROVIDER_ACCEPTED"); got.Reason != "" {
				t.Fatalf("after refused reports: %+v, want it untouched", got)
			}
			if code, detail := postCallback(t, base, "sim-webhook", "good", `{"message_id":`); code != http.StatusBadRequest {
				t.Fatalf("unreadable report: %d %s, want 400", code, detail)
			}
			if code, detail := postCallback(t, base, "sim-webhook", "good", report("delivered")); code != http.StatusNoContent {
				t.Fatalf("good report: %d %s, want 204", code, detail)
			}
			if got := webhookEntry(t, base, id, "DELIVERED"); got.Reason != "TEST_DELIVERED" {
				t.Fatalf("after the report: %+v, want DELIVERED(TEST_DELIVERED)", got)
			}
			// Late and repeated reports are taken (204) and change nothing.
			for _, status := range []string{"sent", "failed", "delivered"} {
				if code, detail := postCallback(t, base, "sim-webhook", "good", report(status)); code != http.StatusNoContent {
					t.Fatalf("late %s: %d %s, want 204", status, code, detail)
				}
			}
			if got := webhookEntry(t, base, id, "DELIVERED"); got.Reason != "TEST_DELIVERED" {
				t.Fatalf("after late reports: %+v, want DELIVERED(TEST_DELIVERED) still", got)
			}
			// A report about a message herald does not know: taken, ignored.
			if code, _ := postCallback(t, base, "sim-webhook", "good", `{"message_id":"nope","status":"failed"}`); code != http.StatusNoContent {
				t.Fatalf("a report about no message: %d, want 204", code)
			}
			for _, name := range []string{"sim-push", "nope"} {
				if code, _ := postCallback(t, base, name, "good", report("delivered")); code != http.StatusNotFound {
					t.Fatalf("callback to %s: %d, want 404", name, code)
				}
			}
			if code, _ := postCallback(t, base, "sim-webhook", "good", strings.Repeat("x", 300<<10)); code != http.StatusRequestEntityTooLarge {
				t.Fatalf("oversized report: %d, want 413", code)
			}
		})
	}
}

// The simulator's delivery reports and status look-ups, as configured: a
// call it accepted is reported DELIVERED; a call answered UNKNOWN is
// settled by the leader's look-up round.
func TestSimulatorReportsAndLookups(t *testing.T) {
	for _, driver := range testdb.Drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t, driverDatabase(t, driver), func(c *config.Config) {
				c.LookupInterval = config.Duration(100 * time.Millisecond)
				for i := range c.Providers {
					if c.Providers[i].Name == "sim-webhook" {
						c.Providers[i].ReportAfter = config.Duration(10 * time.Millisecond)
					}
				}
			})
			a, base := newHerald(t, cfg, app.Options{})
			runHerald(t, a)
			id := notifyPayment(t, base, "e-reported")
			if got := webhookEntry(t, base, id, "DELIVERED"); got.Reason != "SIM_DELIVERED" {
				t.Fatalf("reported: %+v, want DELIVERED(SIM_DELIVERED)", got)
			}

			cfg = testConfig(t, driverDatabase(t, driver), func(c *config.Config) {
				c.LookupInterval = config.Duration(100 * time.Millisecond)
				for i := range c.Providers {
					if c.Providers[i].Name == "sim-webhook" {
						c.Providers[i].Faults.Unknown = 1
						c.Providers[i].StatusLookup = true
					}
				}
			})
			a, base = newHerald(t, cfg, app.Options{})
			runHerald(t, a)
			id = notifyPayment(t, base, "e-unknown")
			if got := webhookEntry(t, base, id, "DELIVERED"); got.Reason != "SIM_DELIVERED" || got.Attempts != 1 {
				t.Fatalf("looked up: %+v, want DELIVERED(SIM_DELIVERED) after one call", got)
			}
			if n := a.Sim("sim-webhook").CallCount(webhookEntry(t, base, id, "DELIVERED").MessageID); n != 1 {
				t.Fatalf("%d calls, want 1: a look-up never sends again", n)
			}
		})
	}
}

// A chain that skipped its later steps on its first send's acceptance,
// whose send a delivery report then says failed, has told the recipient
// nothing: herald does not send the next channel by itself, and says so
// with FALLBACK_UNSENT. A delivered report, and a failed report of a send
// off a chain, raise nothing.
func TestAFailedReportOnAChainThatSkippedRaisesFallbackUnsent(t *testing.T) {
	for _, driver := range testdb.Drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t, driverDatabase(t, driver), func(c *config.Config) {
				for i := range c.Kinds {
					if c.Kinds[i].Name == "payment.approved" {
						c.Kinds[i].Policy = "first" // webhook, then push
					}
				}
			})
			rec := &alert.Recorder{}
			a, base := newHerald(t, cfg, app.Options{Providers: map[string]provider.Provider{"sim-webhook": dlrProvider{}}, Alerts: rec})
			runHerald(t, a)
			report := func(mid, status string) {
				t.Helper()
				if code, detail := postCallback(t, base, "sim-webhook", "good", `{"message_id":"`+mid+`","status":"`+status+`"}`); code != http.StatusNoContent {
					t.Fatalf("report %s: %d %s", status, code, detail)
				}
			}
			unsent := func() (n int) {
				for _, al := range rec.Alerts() {
					if al.Kind == alert.FallbackUnsent {
						n++
					}
				}
				return n
			}

			delivered := notifyPayment(t, base, "e-delivered")
			report(webhookEntry(t, base, delivered, "PROVIDER_ACCEPTED").MessageID, "delivered")
			webhookEntry(t, base, delivered, "DELIVERED")

			failed := notifyPayment(t, base, "e-failed")
			mid := webhookEntry(t, base, failed, "PROVIDER_ACCEPTED").MessageID
			if push := waitEntry(t, base, config.DevAPIKey, failed, "push", "SKIPPED"); push.Fallback == nil || push.Fallback.After != "PROVIDER_ACCEPTED" {
				t.Fatalf("push before the report: %+v, want skipped after PROVIDER_ACCEPTED", push)
			}
			if n := unsent(); n != 0 {
				t.Fatalf("%d FALLBACK_UNSENT before any failed report", n)
			}
			report(mid, "failed")
			if got := webhookEntry(t, base, failed, "PERMANENT_FAILURE"); got.Reason != "TEST_FAILED" {
				t.Fatalf("after the failed report: %+v", got)
			}
			var got []alert.Alert
			for _, al := range rec.Alerts() {
				if al.Kind == alert.FallbackUnsent {
					got = append(got, al)
				}
			}
			if len(got) != 1 || got[0].MessageID != mid || got[0].Tenant != "dev" || got[0].Reason != "TEST_FAILED" {
				t.Fatalf("FALLBACK_UNSENT alerts %+v, want one for %s", got, mid)
			}
			waitEntry(t, base, config.DevAPIKey, failed, "push", "SKIPPED") // not moved
			report(mid, "failed")                                           // repeated: moves nothing, raises nothing
			if n := unsent(); n != 1 {
				t.Fatalf("%d FALLBACK_UNSENT after a repeated report, want 1", n)
			}
		})
	}
}

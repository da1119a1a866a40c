package app_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/internal/testdb"
	"github.com/heraldhq/herald/reconcile"
)

// A webhook's UNKNOWN has no report and no look-up to settle it: a person
// who found out how it ended says so through the admin route, once, for
// the tenant's own messages, and the audit log keeps who did. The
// reconciliation's count of UNKNOWN falls with it.
func TestAPersonSettlesAnUnknown(t *testing.T) {
	t.Parallel()
	for _, driver := range testdb.Drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t, driverDatabase(t, driver), func(c *config.Config) {
				c.OperatorKeys = []string{operatorKey}
				c.ReconcileInterval = config.Duration(100 * time.Millisecond)
				c.APIKeys = append(c.APIKeys, config.APIKey{Key: "other-key", Tenant: "other"},
					config.APIKey{Key: "sender-key", Tenant: config.DevTenant, Scopes: []string{"send", "read"}})
				for i := range c.Providers {
					if c.Providers[i].Name == "sim-webhook" {
						c.Providers[i].Faults.Unknown = 1 // every call times out
					}
				}
			})
			base, _ := startHerald(t, cfg)
			key := config.DevAPIKey
			lost, kept := notifyPayment(t, base, "e-lost"), notifyPayment(t, base, "e-kept")
			lostMID := webhookEntry(t, base, lost, "UNKNOWN").MessageID
			keptMID := webhookEntry(t, base, kept, "UNKNOWN").MessageID
			lastReport(t, base, "a report listing both unknown", func(r reconcile.Report) bool { return r.Unknown == 2 })

			settlePath := func(mid string) string { return "/v1/deliveries/" + mid + "/settle" }
			for _, c := range []struct {
				name, cred, mid, body string
				status                int
				says                  string
			}{
				{"AnotherTenant", "other-key", lostMID, `{"result":"failed"}`, http.StatusNotFound, "no delivery"},
				{"NotAnAdmin", "sender-key", lostMID, `{"result":"failed"}`, http.StatusForbidden, ""},
				{"NoSuchMessage", key, lostMID + "x", `{"result":"failed"}`, http.StatusNotFound, "no delivery"},
				{"NoResult", key, lostMID, `{}`, http.StatusUnprocessableEntity, `"param":"result"`},
				{"AnotherResult", key, lostMID, `{"result":"maybe"}`, http.StatusUnprocessableEntity, `"param":"result"`},
				{"UnknownField", key, lostMID, `{"result":"failed","note":"x"}`, http.StatusBadRequest, ""},
			} {
				if code, body := call(t, base, http.MethodPost, settlePath(c.mid), c.cred, c.body); code != c.status || !strings.Contains(string(body), c.says) {
					t.Errorf("%s: %d %s, want %d saying %q", c.name, code, body, c.status, c.says)
				}
			}
			if _, body := call(t, base, http.MethodGet, "/v1/notifications/"+lost, key, ""); !strings.Contains(string(body), `"message_id":"`+lostMID+`","channel":"webhook","state":"UNKNOWN"`) {
				t.Fatalf("after the refused settles: %s, want the webhook still UNKNOWN", body)
			}

			code, body := call(t, base, http.MethodPost, settlePath(lostMID), key, `{"result":"failed"}`)
			if code != http.StatusOK || string(body) != `{"message_id":"`+lostMID+`","state":"PERMANENT_FAILURE","reason":"SETTLED_FAILED"}`+"\n" {
				t.Fatalf("settle failed: %d %s", code, body)
			}
			webhookEntry(t, base, lost, "PERMANENT_FAILURE")
			// A retry of it (its answer lost) is answered the same, and
			// recorded once.
			if code, again := call(t, base, http.MethodPost, settlePath(lostMID), key, `{"result":"failed"}`); code != http.StatusOK || string(again) != string(body) {
				t.Fatalf("the same settle again: %d %s, want %s", code, again, body)
			}
			if code, body := call(t, base, http.MethodPost, settlePath(lostMID), key, `{"result":"delivered"}`); code != http.StatusConflict ||
				!strings.Contains(string(body), "this one is PERMANENT_FAILURE") {
				t.Fatalf("a second settle: %d %s, want 409 naming the state", code, body)
			}
			if code, body := call(t, base, http.MethodPost, settlePath(keptMID), key, `{"result":"delivered"}`); code != http.StatusOK ||
				!strings.Contains(string(body), `"state":"DELIVERED","reason":"SETTLED_DELIVERED"`) {
				t.Fatalf("settle delivered: %d %s", code, body)
			}
			if got := webhookEntry(t, base, kept, "DELIVERED"); got.Reason != "SETTLED_DELIVERED" {
				t.Fatalf("settled delivered: %+v", got)
			}
			lastReport(t, base, "a report with nothing unknown", func(r reconcile.Report) bool { return r.Unknown == 0 })
			_, metrics := get(t, base, "/metrics", "")
			for _, want := range []string{`herald_deliveries_settled_by_person_total{result="delivered"} 1`,
				`herald_deliveries_settled_by_person_total{result="failed"} 1`} {
				if !strings.Contains(string(metrics), want) {
					t.Errorf("/metrics lacks %q (a retry counts nothing more)", want)
				}
			}

			// Two entries, one per settle that moved a delivery, each with
			// its message id and result; none for the refused ones.
			code, body = call(t, base, http.MethodGet, "/v1/admin/audit", key, "")
			var page struct {
				Entries []struct {
					Action, Target string
					Detail         json.RawMessage
				}
			}
			if code != http.StatusOK || json.Unmarshal(body, &page) != nil {
				t.Fatalf("audit: %d %s", code, body)
			}
			var settles []string
			for _, e := range page.Entries {
				if e.Action == "delivery.settle" {
					settles = append(settles, e.Target+" "+string(e.Detail))
				}
			}
			if len(settles) != 2 || !strings.Contains(strings.Join(settles, "|"), lostMID+` {"failed":1,"status":200}`) ||
				!strings.Contains(strings.Join(settles, "|"), keptMID+` {"delivered":1,"status":200}`) {
				t.Fatalf("audit entries of the settles: %q", settles)
			}
		})
	}
}

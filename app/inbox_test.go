package app_test

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/inbox"
	"github.com/heraldhq/herald/reconcile"
)

// call sends method base+path with the bearer credential (none when
// cred is "") and body, and returns the status and body. A request other
// than a GET carries an idempotency key of its path and body.
func call(t *testing.T, base, method, path, cred, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if cred != "" {
		req.Header.Set("Authorization", "Bearer "+cred)
	}
	if method != http.MethodGet {
		req.Header.Set("Idempotency-Key", "idem-"+path+body)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, raw
}

// A push whose provider call ended UNKNOWN is listed unsettled by
// reconciliation until the app's receipt settles it: then it is
// DELIVERED(RECEIPT_AFTER_UNKNOWN), counted in herald_receipts_total
// {from="UNKNOWN"}, and the next report no longer lists it. The whole
// path runs in one herald on the development config: intake with the
// inbox, the sender, the token mint, the feed and the receipt.
func TestAnUnknownPushIsSettledByItsReceipt(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			database := driverDatabase(t, driver)
			cfg := testConfig(t, database, func(c *config.Config) {
				c.OperatorKeys = []string{operatorKey}
				c.ReconcileInterval = config.Duration(100 * time.Millisecond)
				for i := range c.Providers {
					if c.Providers[i].Channel == "push" {
						c.Providers[i].Faults.Unknown = 1 // every push call times out
					}
				}
			})
			base, _ := startHerald(t, cfg)
			key := config.DevAPIKey
			if code, body := call(t, base, http.MethodPut, "/v1/recipients/user-1/profile", key, `{"addresses":{"push":"device-token"}}`); code != http.StatusNoContent {
				t.Fatalf("profile: %d %s", code, body)
			}
			code, body := call(t, base, http.MethodPost, "/v1/notifications", key,
				`{"recipient":"user-1","event_id":"e1","kind":"order.shipped","params":{"item":"mug","tracking":"T1"}}`)
			var acc struct{ ID string }
			if code != http.StatusAccepted || json.Unmarshal(body, &acc) != nil {
				t.Fatalf("notify: %d %s", code, body)
			}
			push := acc.ID + ".push"
			lastReport(t, base, "a report listing the push unknown", func(r reconcile.Report) bool {
				return r.Unknown == 1 && slices.Equal(r.UnknownSample, []string{push})
			})

			var m inbox.Minted
			code, body = call(t, base, http.MethodPost, "/v1/recipients/user-1/tokens", key, "")
			if code != http.StatusCreated || json.Unmarshal(body, &m) != nil {
				t.Fatalf("mint: %d %s", code, body)
			}
			var page inbox.Page
			code, body = call(t, base, http.MethodGet, "/v1/me/feed", m.Token, "")
			if code != http.StatusOK || json.Unmarshal(body, &page) != nil || len(page.Items) != 1 || page.Items[0].NotificationID != acc.ID {
				t.Fatalf("feed: %d %s", code, body)
			}
			if code, body = call(t, base, http.MethodPost, "/v1/me/receipts", m.Token, `{"message_id":"`+push+`"}`); code != http.StatusNoContent {
				t.Fatalf("receipt: %d %s", code, body)
			}
			_, body = call(t, base, http.MethodGet, "/v1/notifications/"+acc.ID, key, "")
			if !strings.Contains(string(body), `"message_id":"`+push+`","channel":"push","state":"DELIVERED","reason":"RECEIPT_AFTER_UNKNOWN"`) {
				t.Fatalf("lookup after the receipt: %s", body)
			}
			lastReport(t, base, "a report with nothing unknown", func(r reconcile.Report) bool { return r.Unknown == 0 })
			// Read afresh: lastReport decodes each poll into one value,
			// whose by_state keeps keys an older report had.
			var rep reconcile.Report
			if _, body := get(t, base, "/v1/ops/reconcile", operatorKey); json.Unmarshal(body, &rep) != nil {
				t.Fatalf("report %s", body)
			}
			if rep.Unknown != 0 || rep.ByState["DELIVERED"] != 1 || rep.ByState["UNKNOWN"] != 0 || len(rep.UnknownSample) != 0 {
				t.Fatalf("report after the receipt: unknown %d %v, by_state %v", rep.Unknown, rep.UnknownSample, rep.ByState)
			}
			_, metrics := get(t, base, "/metrics", "")
			for _, want := range []string{`herald_receipts_total{from="UNKNOWN"} 1`, `herald_receipts_total{from="PROVIDER_ACCEPTED"} 0`,
				`herald_deliveries_total{channel="push",lane="transactional",state="DELIVERED"} 1`} {
				if !strings.Contains(string(metrics), want) {
					t.Errorf("/metrics lacks %q", want)
				}
			}
		})
	}
}

// A push to two devices has a message id per device; the app on one
// device sends its receipt with the id its push carried, and only that
// device's delivery becomes DELIVERED.
func TestAReceiptSettlesThePushOfItsDeviceOnly(t *testing.T) {
	t.Parallel()
	h := startDevicesHerald(t, "sqlite")
	phone, tablet := h.register(t, "user-1", "tok-phone-000000000001", http.StatusCreated), h.register(t, "user-1", "tok-tablet-00000000002", http.StatusCreated)
	id := h.notify(t, "user-1", "e1")
	push := h.pushes(t, id)
	if len(push) != 2 {
		t.Fatalf("pushes %+v, want one per device", push)
	}
	mid := map[string]string{}
	for _, p := range push {
		if p.State != "PROVIDER_ACCEPTED" {
			t.Fatalf("push %+v", p)
		}
		mid[p.MessageID[strings.LastIndexByte(p.MessageID, '.')+1:]] = p.MessageID
	}
	code, body := h.call(t, http.MethodPost, "/v1/recipients/user-1/tokens", "")
	var m inbox.Minted
	if code != http.StatusCreated || json.Unmarshal(body, &m) != nil {
		t.Fatalf("mint: %d %s", code, body)
	}
	if code, body := call(t, h.base, http.MethodPost, "/v1/me/receipts", m.Token, `{"message_id":"`+mid[phone]+`"}`); code != http.StatusNoContent {
		t.Fatalf("receipt: %d %s", code, body)
	}
	for _, p := range h.pushes(t, id) {
		want := map[string]string{mid[phone]: "DELIVERED/RECEIPT", mid[tablet]: "PROVIDER_ACCEPTED/"}[p.MessageID]
		if p.State+"/"+p.Reason != want {
			t.Fatalf("push %s is %s(%s), want %s", p.MessageID, p.State, p.Reason, want)
		}
	}
}

package app_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testsqlite"
	"github.com/heraldhq/herald/lookup"
)

// fakeBizppurio is the vendor's WebAPI as herald's adapter calls it: a
// token for any account, an AlimTalk accepted, an SMS answered with the
// vendor's "unknown error" (9000), which leaves it UNKNOWN.
func fakeBizppurio(t *testing.T) *httptest.Server {
	t.Helper()
	kst := time.FixedZone("KST", 9*60*60)
	var mu sync.Mutex
	n := 0
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/token", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"accesstoken":"tok","type":"Bearer","expired":%q}`, time.Now().Add(24*time.Hour).In(kst).Format("20060102150405"))
	})
	mux.HandleFunc("POST /v3/message", func(w http.ResponseWriter, r *http.Request) {
		var req struct{ RefKey, Type string }
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &req)
		w.Header().Set("Content-Type", "application/json")
		if req.Type != "at" {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, `{"code":9000,"description":"unknown error"}`)
			return
		}
		mu.Lock()
		n++
		fmt.Fprintf(w, `{"code":1000,"description":"success","refkey":%q,"messagekey":"mk-%d"}`, req.RefKey, n)
		mu.Unlock()
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// bizppurioHerald runs herald with Bizppurio as it is configured: one
// entry for alimtalk (biz-at, account herald_api) and one for sms
// (biz-sms, on smsAccount), both with the same callback token, against a
// fake vendor. It returns herald's base URL and the token.
func bizppurioHerald(t *testing.T, smsAccount string) (base, token string) {
	t.Helper()
	const cbToken = "biz-callback-token-0123456789"
	vendor := fakeBizppurio(t)
	dir := t.TempDir()
	for name, v := range map[string]string{"biz.pw": "BIZ-SECRET-PW", "biz.token": cbToken} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	text := `environment: production
database: sqlite:` + testsqlite.Path(t) + `
api_keys: [{key: k1, tenant: shop}]
providers:
  - {name: biz-at, type: bizppurio, channel: alimtalk, account: herald_api, password: {file: biz.pw}, from: "0212345678",
     sender_key: sk, templates: {paid: T001}, callback_token: {file: biz.token}, endpoint: "` + vendor.URL + `"}
  - {name: biz-sms, type: bizppurio, channel: sms, account: ` + smsAccount + `, password: {file: biz.pw}, from: "0212345678",
     callback_token: {file: biz.token}, endpoint: "` + vendor.URL + `"}
kinds:
  - name: paid
    category: transactional
    channels: [alimtalk, sms]
    templates:
      alimtalk: {title: "", body: "Paid {{.amount}} won"}
      sms: {title: "", body: "Paid {{.amount}} won"}
`
	cfg := loadConfigFile(t, dir, text)
	a, base := newHerald(t, cfg, app.Options{})
	runHerald(t, a)
	if code, body := call(t, base, http.MethodPut, "/v1/recipients/r1/profile", "k1",
		`{"addresses":{"sms":"010-1234-5678","alimtalk":"010-1234-5678"}}`); code != http.StatusNoContent {
		t.Fatalf("profile: %d %s", code, body)
	}
	return base, cbToken
}

// bizppurioReport POSTs one report as the vendor pushes it to the URL
// registered for the account, /v1/callbacks/{name}?token=…
func bizppurioReport(t *testing.T, base, name, token, body string) int {
	t.Helper()
	resp, err := testenv.HTTP.Post(base+"/v1/callbacks/"+name+"?token="+url.QueryEscape(token), "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// bizppurioEntry is the notification's entry on channel as it is now (a
// report is applied before its answer: no waiting).
func bizppurioEntry(t *testing.T, base, id, channel string) lookup.Delivery {
	t.Helper()
	code, body := call(t, base, http.MethodGet, "/v1/notifications/"+id, "k1", "")
	var n lookup.Notification
	if err := json.Unmarshal(body, &n); code != http.StatusOK || err != nil {
		t.Fatalf("lookup %s: %d %s", id, code, body)
	}
	for _, d := range n.Deliveries {
		if d.Channel == channel {
			return d
		}
	}
	t.Fatalf("notification %s has no %s entry: %s", id, channel, body)
	return lookup.Delivery{}
}

// Bizppurio pushes every report of an account to the one URL registered
// with it, while herald runs the account as two entries (alimtalk, sms):
// a report that reaches either entry's URL settles the message whichever
// of them sent it — an SMS left UNKNOWN included — once; a report for
// another account's message changes nothing.
func TestBizppurioReportsReachEveryEntryOfTheAccount(t *testing.T) {
	t.Parallel()
	send := func(t *testing.T, base string) (id string) {
		t.Helper()
		code, body := call(t, base, http.MethodPost, "/v1/notifications", "k1", `{"recipient":"r1","event_id":"e1","kind":"paid","params":{"amount":1000}}`)
		var acc struct{ ID string }
		if err := json.Unmarshal(body, &acc); code != http.StatusAccepted || err != nil {
			t.Fatalf("notify: %d %s", code, body)
		}
		waitEntry(t, base, "k1", acc.ID, "alimtalk", "PROVIDER_ACCEPTED")
		if d := waitEntry(t, base, "k1", acc.ID, "sms", "UNKNOWN"); d.Reason != "BIZPPURIO_9000" {
			t.Fatalf("sms: %+v, want UNKNOWN(BIZPPURIO_9000)", d)
		}
		return acc.ID
	}
	t.Run("OneAccount", func(t *testing.T) {
		t.Parallel()
		base, token := bizppurioHerald(t, "herald_api")
		id := send(t, base)
		smsReport := `{"DEVICE":"SMS","MEDIA":"SMS","RESULT":"4100","REFKEY":"` + id + `.s"}`
		if code := bizppurioReport(t, base, "biz-at", "wrong-token-0123456789", smsReport); code != http.StatusUnauthorized {
			t.Fatalf("a report with a wrong token: %d, want 401", code)
		}
		if d := bizppurioEntry(t, base, id, "sms"); d.State != "UNKNOWN" || d.Reason != "BIZPPURIO_9000" {
			t.Fatalf("after a refused report: %+v, want it untouched", d)
		}
		// The SMS's report at the AlimTalk entry's URL settles it.
		if code := bizppurioReport(t, base, "biz-at", token, smsReport); code != http.StatusNoContent {
			t.Fatalf("the SMS's report at biz-at: %d, want 204", code)
		}
		if d := bizppurioEntry(t, base, id, "sms"); d.State != "DELIVERED" || d.Reason != "BIZPPURIO_4100" {
			t.Fatalf("sms after its report: %+v, want DELIVERED(BIZPPURIO_4100)", d)
		}
		// A late failure for it, at either URL, changes nothing.
		late := `{"DEVICE":"SMS","MEDIA":"SMS","RESULT":"4401","REFKEY":"` + id + `.s"}`
		for _, name := range []string{"biz-at", "biz-sms"} {
			if code := bizppurioReport(t, base, name, token, late); code != http.StatusNoContent {
				t.Fatalf("a late report at %s: %d, want 204", name, code)
			}
		}
		if d := bizppurioEntry(t, base, id, "sms"); d.State != "DELIVERED" || d.Reason != "BIZPPURIO_4100" {
			t.Fatalf("sms after late reports: %+v, want DELIVERED(BIZPPURIO_4100) still", d)
		}
		// And the other way round: the AlimTalk's report at the SMS entry's URL.
		atReport := `{"DEVICE":"AT","MEDIA":"KAT","RESULT":"7000","REFKEY":"` + id + `.a"}`
		if code := bizppurioReport(t, base, "biz-sms", token, atReport); code != http.StatusNoContent {
			t.Fatalf("the AlimTalk's report at biz-sms: %d, want 204", code)
		}
		if d := bizppurioEntry(t, base, id, "alimtalk"); d.State != "DELIVERED" || d.Reason != "BIZPPURIO_7000" {
			t.Fatalf("alimtalk after its report: %+v, want DELIVERED(BIZPPURIO_7000)", d)
		}
	})
	t.Run("TwoAccounts", func(t *testing.T) {
		t.Parallel()
		base, token := bizppurioHerald(t, "other_api")
		id := send(t, base)
		smsReport := `{"DEVICE":"SMS","MEDIA":"SMS","RESULT":"4100","REFKEY":"` + id + `.s"}`
		if code := bizppurioReport(t, base, "biz-at", token, smsReport); code != http.StatusNoContent {
			t.Fatalf("another account's SMS report at biz-at: %d, want 204", code)
		}
		if d := bizppurioEntry(t, base, id, "sms"); d.State != "UNKNOWN" || d.Reason != "BIZPPURIO_9000" {
			t.Fatalf("sms after another account's entry took its report: %+v, want UNKNOWN untouched", d)
		}
		// Its own account's URL settles it.
		if code := bizppurioReport(t, base, "biz-sms", token, smsReport); code != http.StatusNoContent {
			t.Fatalf("the SMS's report at biz-sms: %d, want 204", code)
		}
		if d := bizppurioEntry(t, base, id, "sms"); d.State != "DELIVERED" || d.Reason != "BIZPPURIO_4100" {
			t.Fatalf("sms after its own entry's report: %+v, want DELIVERED(BIZPPURIO_4100)", d)
		}
	})
}

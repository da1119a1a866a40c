package app_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/consent"
	"github.com/heraldhq/herald/internal/testdb"
)

// consentHistory reads one page of recipient's consent history with key.
func consentHistory(t *testing.T, base, key, recipient, query string) consent.Page {
	t.Helper()
	code, body := call(t, base, http.MethodGet, "/v1/recipients/"+recipient+"/consent-history"+query, key, "")
	var page consent.Page
	if err := json.Unmarshal(body, &page); code != http.StatusOK || err != nil {
		t.Fatalf("consent history %s%s: %d %s", recipient, query, code, body)
	}
	return page
}

// consentPut PUTs recipient's profile with key; any answer but 204 fails.
func consentPut(t *testing.T, base, key, recipient, body string) {
	t.Helper()
	if code, raw := call(t, base, http.MethodPut, "/v1/recipients/"+recipient+"/profile", key, body); code != http.StatusNoContent {
		t.Fatalf("profile %s: %d %s", recipient, code, raw)
	}
}

// Marketing consent over HTTP, on both stores: each profile PUT that
// changes a channel's consent is in the history (who, when, which
// channel, old → new), newest first and paged; a PUT that changes none
// adds nothing; the history is the tenant's own; its errors are
// problem+json; consent is read at send time and is marketing consent
// only (a transactional SMS goes with the SMS consent false); erasing the
// recipient erases the history.
func TestConsentHistory(t *testing.T) {
	for _, driver := range testdb.Drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t, driverDatabase(t, driver), func(c *config.Config) {
				c.APIKeys = append(c.APIKeys, config.APIKey{Key: "other-key", Tenant: "other"})
				// Marketing at any hour: the test's marketing send must not
				// wait for the morning.
				off := false
				c.QuietHours.Enabled = &off
			})
			a, base := newHerald(t, cfg, app.Options{})
			runHerald(t, a)
			key := config.DevAPIKey
			const addresses = `"addresses":{"sms":"010-1234-5678","email":"r@example.com","push":"token-1"}`

			t0 := time.Now()
			consentPut(t, base, key, "r-c", `{`+addresses+`,"consent":{"sms":true,"email":false}}`)
			consentPut(t, base, key, "r-c", `{`+addresses+`,"consent":{"sms":true,"email":false},"language":"ko"}`)
			consentPut(t, base, key, "r-c", `{`+addresses+`,"consent":{"sms":false,"email":true}}`)
			t1 := time.Now()

			got := consentHistory(t, base, key, "r-c", "")
			type entry struct {
				channel  string
				old, new string
			}
			show := func(b *bool) string {
				if b == nil {
					return "null"
				}
				if *b {
					return "true"
				}
				return "false"
			}
			want := []entry{{"sms", "true", "false"}, {"email", "false", "true"}, {"sms", "null", "true"}, {"email", "null", "false"}}
			var entries []entry
			for _, c := range got.Changes {
				entries = append(entries, entry{c.Channel, show(c.Old), show(c.New)})
				if c.By.Tenant != config.DevTenant || c.ChangedAt.Before(t0.Add(-time.Second)) || c.ChangedAt.After(t1.Add(time.Second)) {
					t.Errorf("change %+v: by %+v at %s, want tenant %s between %s and %s", c, c.By, c.ChangedAt, config.DevTenant, t0, t1)
				}
			}
			// Newest first: one PUT records its channels in their order, so
			// they read back reversed.
			if len(entries) != len(want) {
				t.Fatalf("history %+v, want %+v", entries, want)
			}
			for i := range want {
				if entries[i] != want[i] {
					t.Fatalf("history %+v, want %+v", entries, want)
				}
			}
			if got.NextCursor != nil {
				t.Fatalf("one page, yet next_cursor %q", *got.NextCursor)
			}

			// Pages of one: the same four, in the same order, then null.
			var walked []consent.Change
			query := "?limit=1"
			for range 10 {
				page := consentHistory(t, base, key, "r-c", query)
				walked = append(walked, page.Changes...)
				if page.NextCursor == nil {
					break
				}
				query = "?limit=1&cursor=" + url.QueryEscape(*page.NextCursor)
			}
			if len(walked) != len(got.Changes) {
				t.Fatalf("pages of one gave %d changes, want %d", len(walked), len(got.Changes))
			}
			for i := range walked {
				if walked[i].Channel != got.Changes[i].Channel || !walked[i].ChangedAt.Equal(got.Changes[i].ChangedAt) {
					t.Fatalf("page %d: %+v, want %+v", i, walked[i], got.Changes[i])
				}
			}

			// Bad requests are problem+json 400s; no key is 401.
			first := consentHistory(t, base, key, "r-c", "?limit=1")
			consentPut(t, base, key, "r-other", `{"consent":{"push":true}}`)
			// A parameter the history does not know (a filter it does not
			// have) or one given twice is refused, not ignored.
			for _, q := range []string{"?limit=0", "?limit=201", "?limit=x", "?cursor=nope", "?since=2030-01-01T00:00:00Z", "?limit=1&limit=2",
				"?cursor=" + url.QueryEscape(*first.NextCursor) + "A"} {
				consentProblem(t, base, key, "/v1/recipients/r-c/consent-history"+q, http.StatusBadRequest)
			}
			// A cursor of another recipient, or of another tenant, is not this history's.
			consentProblem(t, base, key, "/v1/recipients/r-other/consent-history?cursor="+url.QueryEscape(*first.NextCursor), http.StatusBadRequest)
			consentProblem(t, base, "other-key", "/v1/recipients/r-c/consent-history?cursor="+url.QueryEscape(*first.NextCursor), http.StatusBadRequest)
			consentProblem(t, base, "", "/v1/recipients/r-c/consent-history", http.StatusUnauthorized)
			// Another tenant's recipient of the same id has its own (empty) history.
			if page := consentHistory(t, base, "other-key", "r-c", ""); len(page.Changes) != 0 {
				t.Fatalf("tenant other sees %d of dev's changes", len(page.Changes))
			}

			// Read at send time, marketing only: push consent is absent and
			// e-mail consent true, so coupon.expiring (marketing) goes by
			// e-mail only; appointment.reminder (transactional) goes by SMS
			// although the SMS consent is false now.
			coupon := consentNotify(t, base, "r-c", "coupon-1", "coupon.expiring", `{"coupon":"C1","date":"5/1"}`)
			waitEntry(t, base, key, coupon, "email", "PROVIDER_ACCEPTED")
			if d := waitEntry(t, base, key, coupon, "push", "SUPPRESSED"); d.Reason != "CONSENT_DENIED" {
				t.Fatalf("marketing push without consent: SUPPRESSED(%s), want CONSENT_DENIED", d.Reason)
			}
			reminder := consentNotify(t, base, "r-c", "reminder-1", "appointment.reminder", `{"date":"5/1","time":"10:00"}`)
			waitEntry(t, base, key, reminder, "sms", "PROVIDER_ACCEPTED")

			// Erasure erases the history with the profile; another
			// recipient's stays.
			if code, body := call(t, base, http.MethodDelete, "/v1/recipients/r-c", key, ""); code != http.StatusOK {
				t.Fatalf("erase: %d %s", code, body)
			}
			if page := consentHistory(t, base, key, "r-c", ""); len(page.Changes) != 0 || page.NextCursor != nil {
				t.Fatalf("after the erasure: %+v", page)
			}
			if page := consentHistory(t, base, key, "r-other", ""); len(page.Changes) != 1 {
				t.Fatalf("another recipient's history after the erasure: %+v", page)
			}
		})
	}
}

// consentNotify sends kind with params to recipient and returns the notification id.
func consentNotify(t *testing.T, base, recipient, event, kind, params string) string {
	t.Helper()
	code, body := call(t, base, http.MethodPost, "/v1/notifications", config.DevAPIKey,
		`{"recipient":"`+recipient+`","event_id":"`+event+`","kind":"`+kind+`","params":`+params+`}`)
	var accepted struct{ ID string }
	if err := json.Unmarshal(body, &accepted); code != http.StatusAccepted || err != nil {
		t.Fatalf("notify %s: %d %s", event, code, body)
	}
	return accepted.ID
}

// consentProblem GETs path with key and wants an application/problem+json
// answer with status.
func consentProblem(t *testing.T, base, key, path string, status int) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != status || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("GET %s: %d %s, want %d problem+json", path, resp.StatusCode, resp.Header.Get("Content-Type"), status)
	}
}

package app_test

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testdb"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/lookup"
)

// postEvent posts a notification of kind for recipient's event under the
// Idempotency-Key key and returns its id.
func postEvent(t *testing.T, base, key, recipient, event, kind, params string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/v1/notifications",
		strings.NewReader(`{"recipient":"`+recipient+`","event_id":"`+event+`","kind":"`+kind+`","params":`+params+`}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+config.DevAPIKey)
	req.Header.Set("Idempotency-Key", key)
	resp, err := testenv.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var accepted struct{ ID string }
	if err := json.NewDecoder(resp.Body).Decode(&accepted); resp.StatusCode != http.StatusAccepted || err != nil {
		t.Fatalf("post %s: %s %v", key, resp.Status, err)
	}
	return accepted.ID
}

// settled waits until no planned send of notification id is still on its
// way and returns each one's "STATE" or "STATE(REASON)" by channel.
func settled(t *testing.T, base, id string) map[string]string {
	t.Helper()
	var got map[string]string
	testenv.WaitFor(t, "the sends of "+id+" to settle", testenv.Patience, func() bool {
		code, body := call(t, base, http.MethodGet, "/v1/notifications/"+id, config.DevAPIKey, "")
		var n lookup.Notification
		if err := json.Unmarshal(body, &n); code != http.StatusOK || err != nil {
			t.Fatalf("lookup %s: %d %s", id, code, body)
		}
		got = map[string]string{}
		for _, d := range n.Deliveries {
			switch d.State {
			case "PENDING", "SCHEDULED", "WAITING", string(heraldtype.DeliverySending), string(heraldtype.DeliveryRetryWait):
				return false
			}
			got[d.Channel] = d.State
			if d.Reason != "" {
				got[d.Channel] += "(" + d.Reason + ")"
			}
		}
		return true
	})
	return got
}

// putRecipient PUTs recipient's profile; any answer but 204 fails.
func putRecipient(t *testing.T, base, recipient, profile string) {
	t.Helper()
	if code, body := call(t, base, http.MethodPut, "/v1/recipients/"+recipient+"/profile", config.DevAPIKey, profile); code != http.StatusNoContent {
		t.Fatalf("profile: %d %s", code, body)
	}
}

const (
	sent      = "PROVIDER_ACCEPTED"
	duplicate = "SUPPRESSED(DUPLICATE_EVENT)"
)

// The producer sends one event twice, under two Idempotency-Keys: two
// notifications, one provider call; the other send is
// SUPPRESSED(DUPLICATE_EVENT). The first key again is the first answer,
// and another event of the recipient is sent.
func TestTwoNotificationsOfOneEventMakeOneCall(t *testing.T) {
	for _, driver := range testdb.Drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			a, base := newHerald(t, testConfig(t, driverDatabase(t, driver), nil), app.Options{})
			runHerald(t, a)
			putRecipient(t, base, "r-evt", `{"addresses":{"sms":"010-1234-5678"}}`)
			const params = `{"date":"3/2","time":"10:00"}`
			first := postEvent(t, base, "booking-7-try-1", "r-evt", "booking-7", "appointment.reminder", params)
			second := postEvent(t, base, "booking-7-try-2", "r-evt", "booking-7", "appointment.reminder", params)
			if first == second {
				t.Fatalf("two keys gave one notification %s", first)
			}
			if again := postEvent(t, base, "booking-7-try-1", "r-evt", "booking-7", "appointment.reminder", params); again != first {
				t.Fatalf("the first key again answered %s, want %s", again, first)
			}
			states := []string{settled(t, base, first)["sms"], settled(t, base, second)["sms"]}
			slices.Sort(states)
			if !slices.Equal(states, []string{sent, duplicate}) {
				t.Fatalf("the two notifications' SMS ended %v, want one sent and one a duplicate", states)
			}
			other := postEvent(t, base, "booking-8", "r-evt", "booking-8", "appointment.reminder", params)
			if got := settled(t, base, other)["sms"]; got != sent {
				t.Fatalf("another event's SMS ended %s", got)
			}
			if n := a.Sim("sim-sms").Total(); n != 2 {
				t.Fatalf("%d SMS calls, want 2 (one per event)", n)
			}
		})
	}
}

// The channel is in the key of a kind of policy all, not of a kind of
// policy first. The first notification of the event reaches the recipient
// by SMS only (no push address yet); once the profile has one, a second
// notification of the event sends a push for the all kind (each planned
// channel once per event) and nothing for the first kind (push after SMS
// for one event is a duplicate).
func TestThePolicyDecidesWhetherTheChannelIsInTheKey(t *testing.T) {
	for _, driver := range testdb.Drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t, driverDatabase(t, driver), func(c *config.Config) {
				tmpl := config.Template{Title: "Notice", Body: "Something happened"}
				for _, policy := range []string{config.PolicyAll, config.PolicyFirst} {
					c.Kinds = append(c.Kinds, config.Kind{Name: "notice." + policy, Category: "transactional", Policy: policy,
						Channels: []string{"push", "sms"}, Templates: map[string]config.Template{"push": tmpl, "sms": tmpl}})
				}
			})
			a, base := newHerald(t, cfg, app.Options{})
			runHerald(t, a)
			putRecipient(t, base, "r-pol", `{"addresses":{"sms":"010-1234-5678"}}`)
			for _, policy := range []string{config.PolicyAll, config.PolicyFirst} {
				got := settled(t, base, postEvent(t, base, policy+"-1", "r-pol", "e1", "notice."+policy, "{}"))
				if got["sms"] != sent || got["push"] != "SUPPRESSED(DESTINATION_UNAVAILABLE)" {
					t.Fatalf("policy %s, the first notification: %v", policy, got)
				}
			}
			putRecipient(t, base, "r-pol", `{"addresses":{"sms":"010-1234-5678","push":"device-token"}}`)
			all := settled(t, base, postEvent(t, base, "all-2", "r-pol", "e1", "notice.all", "{}"))
			if all["push"] != sent || all["sms"] != duplicate {
				t.Fatalf("policy all, the second notification: %v, want the push sent and the SMS a duplicate", all)
			}
			first := settled(t, base, postEvent(t, base, "first-2", "r-pol", "e1", "notice.first", "{}"))
			if first["push"] != duplicate || first["sms"] == sent {
				t.Fatalf("policy first, the second notification: %v, want the push a duplicate and no SMS", first)
			}
			if push, sms := a.Sim("sim-push").Total(), a.Sim("sim-sms").Total(); push != 1 || sms != 2 {
				t.Fatalf("%d push and %d SMS calls, want 1 and 2", push, sms)
			}
		})
	}
}

// With the event keys out of reach (their table renamed behind herald's
// back), each category does what seed 003 §7 says: an alert is sent (a
// duplicate is the lesser harm), a transactional send with an inbox item
// is SUPPRESSED(SUPPRESSION_UNAVAILABLE) and the item stands in, one
// without an inbox item is sent (nothing would stand in), marketing is
// SUPPRESSED(SUPPRESSION_UNAVAILABLE), internal is sent.
func TestWithoutTheKeysTheCategoryDecides(t *testing.T) {
	for _, driver := range testdb.Drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			db := testdb.Open(t, driver, nil)
			cfg := testConfig(t, db.Database, func(c *config.Config) {
				off := false // marketing at any hour: the test runs on the real clock
				c.QuietHours.Enabled = &off
				c.Kinds = append(c.Kinds, config.Kind{Name: "disk.full", Category: "internal", Channels: []string{"webhook"},
					Templates: map[string]config.Template{"webhook": {Title: "Disk", Body: "{{.host}} is full"}}})
			})
			a, base := newHerald(t, cfg, app.Options{})
			runHerald(t, a)
			db.Exec(t, `ALTER TABLE event_keys RENAME TO event_keys_away`)
			putRecipient(t, base, "r-down", `{"addresses":{"sms":"010-1234-5678","push":"device-token","email":"r@example.com"},`+
				`"consent":{"push":true,"email":true}}`)
			unavailable := "SUPPRESSED(" + heraldtype.ReasonSuppressionUnavailable + ")"
			for _, c := range []struct {
				kind, params string
				want         map[string]string
			}{
				{"fraud.alert", `{"amount":"5000"}`, map[string]string{"sms": sent, "push": sent}},
				{"appointment.reminder", `{"date":"3/2","time":"10:00"}`, map[string]string{"sms": sent}},
				{"order.shipped", `{"item":"mug","tracking":"T1"}`, map[string]string{"inbox": "STORED(STORED)", "push": unavailable}},
				{"coupon.expiring", `{"coupon":"C10","date":"3/9"}`, map[string]string{"push": unavailable, "email": unavailable}},
				{"disk.full", `{"host":"db-1"}`, map[string]string{"webhook": sent}},
			} {
				got := settled(t, base, postEvent(t, base, c.kind, "r-down", "e-"+c.kind, c.kind, c.params))
				if !maps.Equal(got, c.want) {
					t.Errorf("%s: %v, want %v", c.kind, got, c.want)
				}
			}
		})
	}
}

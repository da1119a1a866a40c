package app_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/internal/testenv"
)

// limits.lane_quotas reaches both places that take from it: a campaign of
// the tenant is fanned out only as far as the bucket its sends left
// allows, and a send once the campaign took the rest is 429.
func TestLaneQuotaFromConfigPacesIntakeAndCampaigns(t *testing.T) {
	t.Parallel()
	base := serveWith(t, func(c *config.Config) {
		// Three tokens, then one every 1,000 s: nothing refills in the test.
		c.Limits.LaneQuotas = []config.LaneQuota{{Lane: "marketing", Rate: 0.001, Burst: 3}}
	})
	key := config.DevAPIKey
	coupon := func(event string) string {
		return `{"recipient":"u1","event_id":"` + event + `","kind":"coupon.expiring","params":{"coupon":"C","date":"d"}}`
	}
	for _, event := range []string{"e1", "e2"} {
		if got, b := call(t, base, "POST", "/v1/notifications", key, coupon(event)); got != http.StatusAccepted {
			t.Fatalf("marketing send %s: %d %s; want 202", event, got, b)
		}
	}
	if got, b := call(t, base, "POST", "/v1/notifications", key,
		`{"recipient":"u1","event_id":"p1","kind":"payment.approved","params":{"amount":"1","merchant":"m"}}`); got != http.StatusAccepted {
		t.Fatalf("a transactional send beside the marketing quota: %d %s", got, b)
	}
	got, b := call(t, base, "POST", "/v1/campaigns", key, `{"kind":"coupon.expiring","params":{"coupon":"C","date":"d"},`+
		`"recipients":[{"recipient":"a"},{"recipient":"b"},{"recipient":"c"}]}`)
	var created struct{ ID string }
	if got != http.StatusAccepted || json.Unmarshal(b, &created) != nil {
		t.Fatalf("create campaign: %d %s", got, b)
	}
	if got, b := call(t, base, "POST", "/v1/campaigns/"+created.ID+"/start", key, ""); got >= 300 {
		t.Fatalf("start campaign: %d %s", got, b)
	}
	// The leader's runner looks every second. Without the quota it fans
	// the three out in one batch; with it, one (the token intake left).
	testenv.WaitFor(t, "the campaign's one paced recipient", testenv.Patience, func() bool {
		var c struct {
			State    string
			Enqueued int
		}
		if got, b := get(t, base, "/v1/campaigns/"+created.ID, key); got != http.StatusOK || json.Unmarshal(b, &c) != nil {
			t.Fatalf("get campaign: %d %s", got, b)
		}
		if c.Enqueued > 1 || c.State != "RUNNING" {
			t.Fatalf("campaign %s with %d enqueued; want RUNNING with at most 1 (the quota's last token)", c.State, c.Enqueued)
		}
		return c.Enqueued == 1
	})
	if got, b := call(t, base, "POST", "/v1/notifications", key, coupon("e3")); got != http.StatusTooManyRequests {
		t.Fatalf("a marketing send once the campaign took the last token: %d %s; want 429", got, b)
	}
}

// A send refused by its lane's quota spends none of the tenant's send
// rate (limits.send_rate, which every lane of the tenant shares): a
// marketing client retrying past its quota leaves the tenant's
// transactional sends their rate.
func TestASendOverItsLaneQuotaSpendsNoSendRate(t *testing.T) {
	t.Parallel()
	base := serveWith(t, func(c *config.Config) {
		// Nothing refills in the test: 3 sends of the tenant's, 1 of them marketing.
		c.Limits.SendRate, c.Limits.SendBurst = 0.001, 3
		c.Limits.LaneQuotas = []config.LaneQuota{{Lane: "marketing", Rate: 0.001, Burst: 1}}
	})
	key := config.DevAPIKey
	coupon := func(event string) string {
		return `{"recipient":"u1","event_id":"` + event + `","kind":"coupon.expiring","params":{"coupon":"C","date":"d"}}`
	}
	for i, want := range []int{http.StatusAccepted, http.StatusTooManyRequests, http.StatusTooManyRequests, http.StatusTooManyRequests} {
		if got, b := call(t, base, "POST", "/v1/notifications", key, coupon(fmt.Sprint("e", i))); got != want {
			t.Fatalf("marketing send %d: %d %s; want %d", i, got, b, want)
		}
	}
	for i, want := range []int{http.StatusAccepted, http.StatusAccepted, http.StatusTooManyRequests} {
		if got, b := call(t, base, "POST", "/v1/notifications", key,
			fmt.Sprintf(`{"recipient":"u1","event_id":"p%d","kind":"payment.approved","params":{"amount":"1","merchant":"m"}}`, i)); got != want {
			t.Fatalf("transactional send %d after the marketing quota's refusals: %d %s; want %d (the send rate's 2 left, then its own 429)", i, got, b, want)
		}
	}
}

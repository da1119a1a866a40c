package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/campaign"
	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/httpapi"
	"github.com/heraldhq/herald/intake"
	"github.com/heraldhq/herald/store"
)

// The campaigns over HTTP on both stores: create (replayed by its key),
// pages, start, the leader's fan-out, progress, cancel.

// campaignCall sends one request as tenant a (key: Idempotency-Key, "" for
// none) and decodes a JSON answer into out when it is set.
func (e *everyday) campaignCall(t *testing.T, method, path, key, body string, out any) *http.Response {
	t.Helper()
	res, raw := e.campaignDo(t, method, path, key, body)
	if out != nil && res.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %s: %v", method, path, raw, err)
		}
	}
	return res
}

// createCampaign posts body to POST /v1/campaigns as tenant a with an
// Idempotency-Key header for each of keys, and returns the answer with
// its problem, if it is one.
func (e *everyday) createCampaign(t *testing.T, body string, keys ...string) (*http.Response, problemBody) {
	t.Helper()
	req, _ := http.NewRequest("POST", e.url+"/v1/campaigns", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+keyA)
	for _, k := range keys {
		req.Header.Add("Idempotency-Key", k)
	}
	res, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var p problemBody
	_ = json.NewDecoder(res.Body).Decode(&p)
	return res, p
}

// wantStateConflict sends a request the campaign's state refuses and
// fails unless it is a 409 whose detail says the state: detail.
func (e *everyday) wantStateConflict(t *testing.T, method, path, body, detail string) {
	t.Helper()
	res, raw := e.campaignDo(t, method, path, "", body)
	var p problemBody
	_ = json.Unmarshal(raw, &p)
	if res.StatusCode != http.StatusConflict || !strings.HasPrefix(p.Detail, detail) {
		t.Fatalf("%s %s = %d %q; want 409 saying %q", method, path, res.StatusCode, p.Detail, detail)
	}
}

// campaignDo sends one request as tenant a and returns the answer with its
// body read.
func (e *everyday) campaignDo(t *testing.T, method, path, key, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+keyA)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return res, raw
}

type campaignStatus struct {
	ID                                                 string
	Kind                                               string
	CreatedAt                                          time.Time `json:"created_at"`
	State                                              string
	Scope                                              string
	Total, Enqueued, Sent, Suppressed, Failed, Unknown int64
	Cancelled                                          *int64
	InFlight                                           *int64     `json:"in_flight"`
	ExpiresAt                                          *time.Time `json:"expires_at"`
	SendAt                                             *time.Time `json:"send_at"`
	Reason                                             string
}

func recipientsJSON(from, n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`{"recipient":"u%d"}`, from+i)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func TestCampaignsOverHTTP(t *testing.T) {
	t.Parallel()
	onEachStore(t, nil, func(t *testing.T, e *everyday) {
		body := `{"kind":"coupon.expiring","params":{"coupon":"C10","date":"May 1"},"scope":"brand-a","recipients":` + recipientsJSON(1, 3) + `}`
		var created struct{ ID string }
		if res := e.campaignCall(t, "POST", "/v1/campaigns", "", body, nil); res.StatusCode != http.StatusBadRequest {
			t.Fatalf("create without Idempotency-Key = %d; want 400", res.StatusCode)
		}
		if res := e.campaignCall(t, "POST", "/v1/campaigns", "c1", body, &created); res.StatusCode != http.StatusAccepted || created.ID == "" {
			t.Fatalf("create = %d %+v; want 202 with an id", res.StatusCode, created)
		}
		var again struct{ ID string }
		res := e.campaignCall(t, "POST", "/v1/campaigns", "c1", body, &again)
		if res.StatusCode != http.StatusAccepted || again.ID != created.ID || res.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("create replayed = %d %+v; want 202 with the same id", res.StatusCode, again)
		}
		if res := e.campaignCall(t, "POST", "/v1/campaigns", "c1", strings.Replace(body, "C10", "C20", 1), nil); res.StatusCode != http.StatusConflict {
			t.Fatalf("same key, other body = %d; want 409", res.StatusCode)
		}
		path := "/v1/campaigns/" + created.ID
		// u3 again, u4 with its own params overriding the coupon.
		page := `{"recipients":[{"recipient":"u3"},{"recipient":"u4","params":{"coupon":"VIP"}}]}`
		var added struct{ Added int }
		if res := e.campaignCall(t, "POST", path+"/recipients", "", page, &added); res.StatusCode != http.StatusOK || added.Added != 1 {
			t.Fatalf("page = %d %+v; want 200, 1 added", res.StatusCode, added)
		}
		var st campaignStatus
		if e.campaignCall(t, "GET", path, "", "", &st); st.State != "DRAFT" || st.Total != 4 || st.Enqueued != 0 || st.Scope != "brand-a" {
			t.Fatalf("GET = %+v; want DRAFT, total 4, scope brand-a", st)
		}
		if res := e.campaignCall(t, "POST", path+"/start", "", "", &st); res.StatusCode != http.StatusAccepted || st.State != "RUNNING" {
			t.Fatalf("start = %d %+v; want 202 RUNNING", res.StatusCode, st)
		}
		e.wantStateConflict(t, "POST", path+"/recipients", page, "the campaign is RUNNING: it has started, and takes no more pages")
		r := campaign.NewRunner(campaign.RunnerConfig{Store: e.st.(store.Campaigns), Batch: 3})
		if n, err := r.Round(context.Background()); err != nil || n != 4 {
			t.Fatalf("fan-out round = %d, %v; want 4 recipients", n, err)
		}
		if e.campaignCall(t, "GET", path, "", "", &st); st.State != "DONE" || st.Total != 4 || st.Enqueued != 4 {
			t.Fatalf("GET after fan-out = %+v; want DONE, 4 of 4", st)
		}
		jobs, err := e.st.OutboxClaim(context.Background(), store.OutboxClaimParams{Lane: heraldtype.LaneMarketing, Owner: "w", Limit: 100, Lease: 60e9})
		if err != nil {
			t.Fatal(err)
		}
		coupons := map[string]string{}
		for _, j := range jobs {
			var p struct{ Coupon string }
			_ = json.Unmarshal(j.Params, &p)
			coupons[j.Recipient] += p.Coupon + "/" + string(j.Channel) + " "
			if j.Scope != "brand-a" {
				t.Fatalf("claimed %s with scope %q; want the campaign's brand-a", j.MessageID, j.Scope)
			}
		}
		if len(jobs) != 8 || coupons["u4"] != "VIP/push VIP/email " || coupons["u1"] != "C10/push C10/email " {
			t.Fatalf("claimed %d sends: %v; want 8 (push and email each), u4 with its own coupon", len(jobs), coupons)
		}
		if res := e.campaignCall(t, "POST", path+"/cancel", "", "", &st); res.StatusCode != http.StatusOK || st.State != "CANCELLED" ||
			st.Cancelled == nil || *st.Cancelled != 8 || st.InFlight == nil || *st.InFlight != 0 || st.Sent != 0 {
			t.Fatalf("cancel = %d %+v; want 200 CANCELLED, 8 cancelled, none in flight", res.StatusCode, st)
		}
		if e.campaignCall(t, "GET", path, "", "", &st); st.State != "CANCELLED" || st.Suppressed != 8 {
			t.Fatalf("GET after cancel = %+v; want CANCELLED, 8 suppressed", st)
		}
		e.wantStateConflict(t, "POST", path+"/recipients", page, "the campaign is CANCELLED; it takes no pages and does not start")
		if res := e.campaignCall(t, "GET", "/v1/campaigns/cmp_nope", "", "", nil); res.StatusCode != http.StatusNotFound {
			t.Fatalf("GET of no campaign = %d; want 404", res.StatusCode)
		}
	})
}

func TestCampaignsRefuseWhatCannotBeSent(t *testing.T) {
	t.Parallel()
	onEachStore(t, nil, func(t *testing.T, e *everyday) {
		for _, c := range []struct{ name, body, param string }{
			{"InboxKind", `{"kind":"order.shipped","params":{"order":"1"}}`, "kind"},
			{"UnknownKind", `{"kind":"nope"}`, "kind"},
			{"RecipientMissingAParam", `{"kind":"coupon.expiring","params":{"coupon":"C"},"recipients":[{"recipient":"u1","params":{"date":"d"}},{"recipient":"u2"}]}`, "recipients[1].params.date"},
			{"BadRecipient", `{"kind":"coupon.expiring","params":{"coupon":"C","date":"d"},"recipients":[{"recipient":"u1"},{"recipient":""}]}`, "recipients[1].recipient"},
			{"BadScope", `{"kind":"coupon.expiring","params":{"coupon":"C","date":"d"},"scope":"brand a"}`, "scope"},
			{"ParamsNotAnObject", `{"kind":"coupon.expiring","params":{"coupon":"C","date":"d"},"recipients":[{"recipient":"u1","params":[1]}]}`, "recipients[0].params"},
		} {
			t.Run(c.name, func(t *testing.T) {
				res, p := e.createCampaign(t, c.body, c.name)
				if res.StatusCode != http.StatusUnprocessableEntity || p.Param != c.param {
					t.Fatalf("%s = %d param %q; want 422 naming %s", c.body, res.StatusCode, p.Param, c.param)
				}
				// Only an unknown kind's answer points at the list of kinds.
				if lists := strings.Contains(p.Detail, "GET /v1/kinds"); lists != (c.name == "UnknownKind") {
					t.Fatalf("%s: detail %q; pointing at GET /v1/kinds: %v", c.name, p.Detail, lists)
				}
			})
		}
	})
}

// Two Idempotency-Key headers are refused (400): the request cannot say
// which one it meant, and nothing is created.
func TestACampaignWithTwoIdempotencyKeysIsRefused(t *testing.T) {
	t.Parallel()
	onEachStore(t, nil, func(t *testing.T, e *everyday) {
		res, p := e.createCampaign(t, `{"kind":"coupon.expiring","params":{"coupon":"C","date":"d"}}`, "one", "two")
		if res.StatusCode != http.StatusBadRequest || p.Param != "Idempotency-Key" || p.Detail != "send one Idempotency-Key header, not 2" {
			t.Fatalf("two keys = %d %+v; want 400 naming the two Idempotency-Key headers", res.StatusCode, p)
		}
		// Neither key names a campaign: each creates one afresh.
		for _, key := range []string{"one", "two"} {
			res, _ := e.createCampaign(t, `{"kind":"coupon.expiring","params":{"coupon":"C","date":"d"}}`, key)
			if res.StatusCode != http.StatusAccepted || res.Header.Get("Idempotent-Replayed") != "" {
				t.Fatalf("key %s alone = %d (replayed %q); want a new campaign", key, res.StatusCode, res.Header.Get("Idempotent-Replayed"))
			}
		}
	})
}

// TestADraftShowsWhenItExpiresAndWhyItEnded: GET shows a DRAFT
// campaign's expires_at (its creation + campaign_draft_ttl, a week by
// default); once the leader's round has ended it, the campaign is
// CANCELLED with reason DRAFT_EXPIRED and no expires_at, and a start or a
// page is 409.
func TestADraftShowsWhenItExpiresAndWhyItEnded(t *testing.T) {
	t.Parallel()
	onEachStore(t, nil, func(t *testing.T, e *everyday) {
		body := `{"kind":"coupon.expiring","params":{"coupon":"C10","date":"May 1"},"recipients":` + recipientsJSON(1, 2) + `}`
		var created struct{ ID string }
		if res := e.campaignCall(t, "POST", "/v1/campaigns", "d1", body, &created); res.StatusCode != http.StatusAccepted {
			t.Fatalf("create = %d; want 202", res.StatusCode)
		}
		path := "/v1/campaigns/" + created.ID
		want := e.clock.Now().Add(campaign.DefaultDraftTTL)
		var st campaignStatus
		if e.campaignCall(t, "GET", path, "", "", &st); st.State != "DRAFT" || st.ExpiresAt == nil || !st.ExpiresAt.Equal(want) || st.Reason != "" {
			t.Fatalf("GET of a draft = %+v; want DRAFT, expires_at %v, no reason", st, want)
		}
		e.clock.Advance(campaign.DefaultDraftTTL)
		// Past its deadline, before the leader has ended it.
		e.wantStateConflict(t, "POST", path+"/start", "", "the campaign is a DRAFT past its expires_at; it takes no pages and does not start")
		r := campaign.NewRunner(campaign.RunnerConfig{Store: e.st.(store.Campaigns), Logger: slog.New(slog.DiscardHandler)})
		if _, err := r.Round(context.Background()); err != nil {
			t.Fatal(err)
		}
		st = campaignStatus{}
		if e.campaignCall(t, "GET", path, "", "", &st); st.State != "CANCELLED" || st.Reason != "DRAFT_EXPIRED" || st.ExpiresAt != nil || st.Total != 2 {
			t.Fatalf("GET of an expired draft = %+v; want CANCELLED, reason DRAFT_EXPIRED, no expires_at, its 2 recipients", st)
		}
		e.wantStateConflict(t, "POST", path+"/start", "", "the campaign is CANCELLED (DRAFT_EXPIRED); it takes no pages and does not start")
		e.wantStateConflict(t, "POST", path+"/recipients", `{"recipients":[{"recipient":"u9"}]}`, "the campaign is CANCELLED (DRAFT_EXPIRED)")
	})
}

// A scheduled campaign's GET shows when its sends are due (send_at), so
// that whoever scheduled it can check; an unscheduled one shows none.
func TestACampaignShowsItsSchedule(t *testing.T) {
	t.Parallel()
	onEachStore(t, nil, func(t *testing.T, e *everyday) {
		at := e.clock.Now().Add(3 * time.Hour).Truncate(time.Second).UTC()
		for key, sendAt := range map[string]*time.Time{"scheduled": &at, "now": nil} {
			body := `{"kind":"coupon.expiring","params":{"coupon":"C10","date":"May 1"}`
			if sendAt != nil {
				body += `,"send_at":"` + sendAt.Format(time.RFC3339) + `"`
			}
			var created struct{ ID string }
			if res := e.campaignCall(t, "POST", "/v1/campaigns", key, body+"}", &created); res.StatusCode != http.StatusAccepted {
				t.Fatalf("%s: create = %d; want 202", key, res.StatusCode)
			}
			var st campaignStatus
			e.campaignCall(t, "GET", "/v1/campaigns/"+created.ID, "", "", &st)
			if (st.SendAt == nil) != (sendAt == nil) || (sendAt != nil && !st.SendAt.Equal(*sendAt)) {
				t.Fatalf("%s: GET shows send_at %v; want %v", key, st.SendAt, sendAt)
			}
		}
	})
}

// GET /v1/campaigns lists the tenant's campaigns newest first, each as
// GET /v1/campaigns/{id} shows it, in pages a cursor walks; state filters
// it; another tenant's are never listed; a bad parameter or a cursor of
// another listing is 400.
func TestCampaignsAreListedNewestFirst(t *testing.T) {
	t.Parallel()
	onEachStore(t, nil, func(t *testing.T, e *everyday) {
		var ids []string // oldest first
		for i := range 5 {
			body := `{"kind":"coupon.expiring","params":{"coupon":"C10","date":"May 1"},"recipients":` + recipientsJSON(1, i+1) + `}`
			var created struct{ ID string }
			if res := e.campaignCall(t, "POST", "/v1/campaigns", fmt.Sprint("list-", i), body, &created); res.StatusCode != http.StatusAccepted {
				t.Fatalf("create %d = %d", i, res.StatusCode)
			}
			ids = append(ids, created.ID)
			e.clock.Advance(time.Second)
		}
		if res := e.campaignCall(t, "POST", "/v1/campaigns/"+ids[1]+"/start", "", "", nil); res.StatusCode != http.StatusAccepted {
			t.Fatalf("start = %d", res.StatusCode)
		}
		type page struct {
			Campaigns  []campaignStatus
			NextCursor *string `json:"next_cursor"`
		}
		var got []string
		path := "/v1/campaigns?limit=2"
		for pages := 0; ; pages++ {
			var p page
			if res := e.campaignCall(t, "GET", path, "", "", &p); res.StatusCode != http.StatusOK {
				t.Fatalf("GET %s = %d", path, res.StatusCode)
			}
			for _, c := range p.Campaigns {
				got = append(got, c.ID)
				if c.Kind != "coupon.expiring" || c.CreatedAt.IsZero() {
					t.Fatalf("listed %+v; want its kind and created_at", c)
				}
				var one campaignStatus
				e.campaignCall(t, "GET", "/v1/campaigns/"+c.ID, "", "", &one)
				if fmt.Sprint(one) != fmt.Sprint(c) {
					t.Fatalf("listed %+v; GET shows %+v", c, one)
				}
			}
			if p.NextCursor == nil {
				break
			}
			if pages > 5 {
				t.Fatalf("paging does not end: %v", got)
			}
			path = "/v1/campaigns?limit=2&cursor=" + *p.NextCursor
		}
		if want := []string{ids[4], ids[3], ids[2], ids[1], ids[0]}; !slices.Equal(got, want) {
			t.Fatalf("listed %v; want newest first %v", got, want)
		}
		var running page
		if e.campaignCall(t, "GET", "/v1/campaigns?state=RUNNING", "", "", &running); len(running.Campaigns) != 1 ||
			running.Campaigns[0].ID != ids[1] || running.Campaigns[0].Total != 2 || running.NextCursor != nil {
			t.Fatalf("RUNNING = %+v; want the one started", running)
		}
		// Tenant b has none of them.
		req, _ := http.NewRequest("GET", e.url+"/v1/campaigns", nil)
		req.Header.Set("Authorization", "Bearer "+keyB)
		res, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var other page
		_ = json.NewDecoder(res.Body).Decode(&other)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || len(other.Campaigns) != 0 {
			t.Fatalf("tenant b's listing = %d %+v; want none", res.StatusCode, other)
		}
		var first page
		e.campaignCall(t, "GET", "/v1/campaigns?limit=1", "", "", &first)
		for q, param := range map[string]string{
			"state=SENT": "state", "limit=0": "limit", "limit=101": "limit", "kind=x": "kind", "limit=1&limit=2": "limit",
			"state=DONE&cursor=" + *first.NextCursor: "cursor", "cursor=abc": "cursor",
		} {
			res, raw := e.campaignDo(t, "GET", "/v1/campaigns?"+q, "", "")
			var p problemBody
			_ = json.Unmarshal(raw, &p)
			if res.StatusCode != http.StatusBadRequest || p.Param != param {
				t.Errorf("GET /v1/campaigns?%s = %d %+v; want 400 naming %s", q, res.StatusCode, p, param)
			}
		}
	})
}

// cappedCampaigns is e's store behind a router whose campaigns hold at
// most max recipients (limits.campaign_max_recipients).
func cappedCampaigns(t *testing.T, e *everyday, max int64) *everyday {
	return campaignRouter(t, e, func(c *httpapi.Config) { c.CampaignMaxRecipients = max })
}

// campaignRouter is e's store behind a router of the two test tenants'
// keys, configured further by set.
func campaignRouter(t *testing.T, e *everyday, set func(*httpapi.Config)) *everyday {
	t.Helper()
	cat, err := catalog.New(config.Dev().Kinds)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(t.Output(), nil))
	cfg := httpapi.Config{
		Keys:   auth.NewKeys(map[string]string{keyA: "a", keyB: "b"}),
		Intake: &intake.Handler{Store: e.st, Catalog: cat, Clock: e.clock, IdempotencyTTL: time.Hour, Logger: logger},
		Store:  e.st, Logger: logger,
	}
	set(&cfg)
	srv := httptest.NewServer(httpapi.New(cfg))
	t.Cleanup(srv.Close)
	return &everyday{bundle: &bundle{url: srv.URL, client: srv.Client(), clock: e.clock}, st: e.st}
}

// campaignRefused sends a request that must be refused 422 naming
// "recipients" and the cap of 5.
func (e *everyday) campaignRefused(t *testing.T, path, key, body string) {
	t.Helper()
	res, raw := e.campaignDo(t, "POST", path, key, body)
	var p problemBody
	_ = json.Unmarshal(raw, &p)
	if res.StatusCode != http.StatusUnprocessableEntity || res.Header.Get("Content-Type") != "application/problem+json" ||
		p.Param != "recipients" || !strings.Contains(p.Detail, "at most 5 recipients") || !strings.Contains(p.Detail, "campaign_max_recipients") {
		t.Fatalf("POST %s = %d %q %+v; want 422 problem+json, param recipients, naming the cap of 5", path, res.StatusCode, res.Header.Get("Content-Type"), p)
	}
}

func TestCampaignSizeIsCapped(t *testing.T) {
	t.Parallel()
	onEachStore(t, nil, func(t *testing.T, e *everyday) {
		e = cappedCampaigns(t, e, 5)
		create := func(n int) string {
			return `{"kind":"coupon.expiring","params":{"coupon":"C10","date":"May 1"},"recipients":` + recipientsJSON(1, n) + `}`
		}
		// A first page past the cap creates nothing, so the key is free.
		e.campaignRefused(t, "/v1/campaigns", "cap", create(6))
		var created struct{ ID string }
		if res := e.campaignCall(t, "POST", "/v1/campaigns", "cap", create(3), &created); res.StatusCode != http.StatusAccepted || created.ID == "" {
			t.Fatalf("create of 3 = %d; want 202 (the refused create used up nothing)", res.StatusCode)
		}
		path := "/v1/campaigns/" + created.ID
		// u3 again, u4..u6 new: 6 > 5, refused whole although two would fit.
		e.campaignRefused(t, path+"/recipients", "", `{"recipients":`+recipientsJSON(3, 4)+`}`)
		var st campaignStatus
		if e.campaignCall(t, "GET", path, "", "", &st); st.Total != 3 {
			t.Fatalf("total after the refused page = %d; want 3 (nothing of it written)", st.Total)
		}
		var added struct{ Added int }
		if res := e.campaignCall(t, "POST", path+"/recipients", "", `{"recipients":`+recipientsJSON(2, 4)+`}`, &added); res.StatusCode != http.StatusOK || added.Added != 2 {
			t.Fatalf("a page up to the cap = %d %+v; want 200, 2 added", res.StatusCode, added)
		}
		added.Added = -1
		if res := e.campaignCall(t, "POST", path+"/recipients", "", `{"recipients":`+recipientsJSON(1, 5)+`}`, &added); res.StatusCode != http.StatusOK || added.Added != 0 {
			t.Fatalf("the campaign's recipients sent again at the cap = %d %+v; want 200, 0 added", res.StatusCode, added)
		}
		e.campaignRefused(t, path+"/recipients", "", `{"recipients":`+recipientsJSON(6, 1)+`}`)
		if e.campaignCall(t, "GET", path, "", "", &st); st.Total != 5 || st.State != "DRAFT" {
			t.Fatalf("GET = %+v; want DRAFT, total 5", st)
		}
	})
}

// A campaign request carries up to 16 MiB, which costs several times that
// in memory while it is decoded and written: only CampaignBodies of them
// are read at once, and one more waits CampaignBodyWait, then is 503 with
// Retry-After, its body unread. A slot comes free when its request ends.
func TestCampaignBodiesAreReadAFewAtATime(t *testing.T) {
	t.Parallel()
	// The wait is long beside a page's few milliseconds: the create, queued
	// for the slot while pages come and go, takes it at the next release
	// (a channel hands it to the sender waiting longest) rather than
	// giving up (with 20 ms a CI run's loaded pages held the slot past the
	// create's wait, and it was refused before it could hold it).
	e := campaignRouter(t, setupEveryday(t, "sqlite", nil), func(c *httpapi.Config) {
		c.CampaignBodies, c.CampaignBodyWait = 1, 2*time.Second
	})

	// A create whose body trickles in holds the one slot while it is read.
	body, send := io.Pipe()
	t.Cleanup(func() { send.Close() }) // before srv.Close, which waits for the create
	slow := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("POST", e.url+"/v1/campaigns", body)
		req.Header.Set("Authorization", "Bearer "+keyA)
		req.Header.Set("Idempotency-Key", "slow")
		res, err := e.client.Do(req)
		if err != nil {
			slow <- 0
			return
		}
		res.Body.Close()
		slow <- res.StatusCode
	}()
	go func() { _, _ = send.Write([]byte(`{"kind":"coupon.expiring",`)) }()

	page := func() (*http.Response, problemBody) {
		res, raw := e.campaignDo(t, "POST", "/v1/campaigns/cmp_none/recipients", "", `{"recipients":[{"recipient":"r1"}]}`)
		var p problemBody
		_ = json.Unmarshal(raw, &p)
		return res, p
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, p := page()
		if res.StatusCode == http.StatusServiceUnavailable {
			if res.Header.Get("Retry-After") != "1" || res.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(p.Detail, "retry") {
				t.Fatalf("page while the slot is held = 503 Retry-After %q %q %+v; want Retry-After 1, problem+json saying retry",
					res.Header.Get("Retry-After"), res.Header.Get("Content-Type"), p)
			}
			break
		}
		if res.StatusCode != http.StatusNotFound || time.Now().After(deadline) {
			t.Fatalf("page while a create's body is read = %d %+v; want 503 once the create holds the only slot", res.StatusCode, p)
		}
	}

	send.Close() // the create's body ends, cut short: 400, and its slot is free
	if code := <-slow; code != http.StatusBadRequest {
		t.Fatalf("the cut-short create = %d; want 400", code)
	}
	if res, p := page(); res.StatusCode != http.StatusNotFound {
		t.Fatalf("page after the create ended = %d %+v; want 404 (no such campaign): the slot is free again", res.StatusCode, p)
	}
}

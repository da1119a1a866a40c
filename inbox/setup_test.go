package inbox_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/httpapi"
	"github.com/heraldhq/herald/inbox"
	"github.com/heraldhq/herald/intake"
	"github.com/heraldhq/herald/internal/testdb"
	"github.com/heraldhq/herald/lookup"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/store"
)

// API keys: tenants a and b have recipient token keys, c has none.
const (
	keyA = "key-a"
	keyB = "key-b"
	keyC = "key-c"
)

var (
	secret1 = []byte("inbox-test-secret-one-0123456789abcdef")
	secret2 = []byte("inbox-test-secret-two-0123456789abcdef")
	secret3 = []byte("inbox-test-secret-three-0123456789abcd")
	// keysAB gives a and b one key each, the same id and secret: a token
	// or a cursor still never crosses tenants (keys are derived per tenant).
	keysAB = map[string][]auth.RecipientKey{"a": {{ID: "k1", Secret: secret1}}, "b": {{ID: "k1", Secret: secret1}}}
)

var epoch = time.Date(2030, 3, 14, 9, 0, 0, 0, time.UTC)

type bundle struct {
	url     string
	client  *http.Client
	store   store.Store
	clock   *clock.Fake
	tokens  *auth.RecipientTokens
	metrics *metrics.Metrics
}

type options struct {
	// keys are the recipient token keys; defaults to keysAB.
	keys map[string][]auth.RecipientKey
	// store and clock reuse another bundle's (a restart with other keys).
	store store.Store
	clock *clock.Fake
}

// opener opens a fresh store on clk: SQLite in t.TempDir() or PostgreSQL
// in a fresh schema (testdb.Open).
type opener func(t *testing.T, clk clock.Clock) store.Store

func openWith(driver string) opener {
	return func(t *testing.T, clk clock.Clock) store.Store { return testdb.Open(t, driver, clk).Store }
}

// drivers are the stores the tests of store behaviour run on.
var drivers = []struct {
	name string
	open opener
}{{"SQLite", openWith("sqlite")}, {"PostgreSQL", openWith("postgres")}}

// setup serves httpapi's router, with the inbox, intake and lookup, over a
// real SQLite store (or opts.store) and a fake clock that the store, the
// intake and the tokens share.
func setup(t *testing.T, opts options) *bundle {
	t.Helper()
	clk := opts.clock
	if clk == nil {
		clk = clock.NewFake(epoch)
	}
	st := opts.store
	if st == nil {
		st = testdb.Open(t, "sqlite", clk).Store
	}
	keys := opts.keys
	if keys == nil {
		keys = keysAB
	}
	tokens, err := auth.NewRecipientTokens(auth.RecipientTokensConfig{Keys: keys, TTL: time.Hour, MaxTTL: 24 * time.Hour, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	cat, err := catalog.New(config.Dev().Kinds)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(t.Output(), nil))
	m := metrics.New(nil)
	h := httpapi.New(httpapi.Config{
		Keys:    auth.NewKeys(map[string]string{keyA: "a", keyB: "b", keyC: "c"}),
		Intake:  &intake.Handler{Store: st, Catalog: cat, Clock: clk, IdempotencyTTL: time.Hour, Logger: logger, Metrics: m},
		Lookup:  &lookup.Handler{Store: st, Logger: logger},
		Inbox:   &inbox.API{Store: st, Tokens: tokens, Metrics: m, Logger: logger},
		Store:   st,
		Metrics: m,
		Logger:  logger,
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	client := srv.Client()
	client.Timeout = 30 * time.Second
	return &bundle{url: srv.URL, client: client, store: st, clock: clk, tokens: tokens, metrics: m}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request with Authorization: Bearer cred (none when cred is
// "") and body (JSON-encoded unless a string).
func (b *bundle) do(t *testing.T, method, path, cred string, body any) response {
	t.Helper()
	var rd io.Reader = http.NoBody
	switch v := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(v)
	default:
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		rd = strings.NewReader(string(raw))
	}
	req, err := http.NewRequest(method, b.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if cred != "" {
		req.Header.Set("Authorization", "Bearer "+cred)
	}
	res, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: res.StatusCode, header: res.Header, body: raw}
}

// decode wants status and decodes the JSON body into v.
func (r response) decode(t *testing.T, status int, v any) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	if v == nil {
		return
	}
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

type problemBody struct {
	Title  string `json:"title"`
	Status int    `json:"status"`
	Param  string `json:"param"`
	Detail string `json:"detail"`
}

// wantProblem wants an application/problem+json answer of status.
func wantProblem(t *testing.T, r response, status int) problemBody {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json; body %s", ct, r.body)
	}
	var p problemBody
	if err := json.Unmarshal(r.body, &p); err != nil || p.Status != status || p.Title == "" {
		t.Fatalf("problem body %s: %+v (%v)", r.body, p, err)
	}
	return p
}

// mint mints a token for recipient with apiKey's tenant through the API.
func (b *bundle) mint(t *testing.T, apiKey, recipient string) string {
	t.Helper()
	var m inbox.Minted
	b.do(t, http.MethodPost, "/v1/recipients/"+recipient+"/tokens", apiKey, nil).decode(t, http.StatusCreated, &m)
	if m.Token == "" {
		t.Fatal("minted an empty token")
	}
	return m.Token
}

var events atomic.Int64

// notify sends n order.shipped notifications (inbox and push) to
// recipient through intake, one clock tick apart, and returns their ids,
// oldest first.
func (b *bundle) notify(t *testing.T, apiKey, recipient string, n int) []string {
	t.Helper()
	var ids []string
	for range n {
		e := events.Add(1)
		body := fmt.Sprintf(`{"recipient":%q,"event_id":"e%d","kind":"order.shipped","params":{"item":"book %d","tracking":"T%d"}}`,
			recipient, e, e, e)
		req, err := http.NewRequest(http.MethodPost, b.url+"/v1/notifications", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+apiKey)
		req.Header.Set("Idempotency-Key", fmt.Sprintf("idem-%d", e))
		res, err := b.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var acc intake.Accepted
		if res.StatusCode != http.StatusAccepted || json.Unmarshal(raw, &acc) != nil {
			t.Fatalf("notify: %d %s", res.StatusCode, raw)
		}
		ids = append(ids, acc.ID)
		b.clock.Advance(time.Millisecond)
	}
	return ids
}

// itemID is the inbox item id of notification id.
func itemID(id string) string { return store.MessageID(id, heraldtype.ChannelInbox) }

// itemIDs maps itemID over ids, newest first (the feed's order).
func itemIDs(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[len(ids)-1-i] = itemID(id)
	}
	return out
}

// feed reads a page of the feed with token and query (without "?").
func (b *bundle) feed(t *testing.T, token, query string) inbox.Page {
	t.Helper()
	var p inbox.Page
	b.do(t, http.MethodGet, "/v1/me/feed?"+query, token, nil).decode(t, http.StatusOK, &p)
	return p
}

// badge reads the unread count with token.
func (b *bundle) badge(t *testing.T, token string) int64 {
	t.Helper()
	var bd inbox.Badge
	b.do(t, http.MethodGet, "/v1/me/badge", token, nil).decode(t, http.StatusOK, &bd)
	return bd.UnreadCount
}

// pageIDs are the ids of a page's items.
func pageIDs(p inbox.Page) []string {
	out := []string{}
	for _, it := range p.Items {
		out = append(out, it.ID)
	}
	return out
}

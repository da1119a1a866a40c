package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/audit"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/httpapi"
	"github.com/heraldhq/herald/internal/storefault"
	"github.com/heraldhq/herald/internal/testdb"
	"github.com/heraldhq/herald/store"
)

// DELETE /v1/recipients/{recipient} through HTTP on both stores: what the
// answer says, what the read API and the store show afterwards, that a
// second erasure is harmless, and that it reaches only the key's tenant.
func TestEraseRecipient(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			e := setupEveryday(t, driver, nil)
			ctx := context.Background()
			for _, who := range []string{"u-gone", "u-stays"} {
				if r := e.do(t, http.MethodPut, "/v1/recipients/"+who+"/profile", "Bearer "+keyA,
					`{"addresses":{"sms":"+821012345678"},"consent":{"push":true},"language":"ko"}`); r.status != http.StatusNoContent {
					t.Fatalf("PUT profile: %d %s", r.status, r.body)
				}
				if r := e.do(t, http.MethodPut, "/v1/recipients/"+who+"/devices/fcm-token-of-"+who, "Bearer "+keyA,
					`{"platform":"fcm"}`); r.status/100 != 2 {
					t.Fatalf("PUT device: %d %s", r.status, r.body)
				}
			}
			gone := []string{
				e.accept(t, "u-gone"),
				e.acceptKind(t, "u-gone", "order.shipped", `{"item":"Mori mug","tracking":"CJ-123"}`),
				e.acceptKind(t, "u-gone", "order.shipped", `{"item":"Mori plate","tracking":"CJ-124"}`),
			}
			stays := e.acceptKind(t, "u-stays", "order.shipped", `{"item":"Mori bowl","tracking":"CJ-125"}`)

			r := e.do(t, http.MethodDelete, "/v1/recipients/u-gone", "Bearer "+keyA, "")
			if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
				t.Fatalf("DELETE: %d %s %s", r.status, r.header.Get("Content-Type"), r.body)
			}
			var sum map[string]any
			if err := json.Unmarshal(r.body, &sum); err != nil {
				t.Fatalf("body %s: %v", r.body, err)
			}
			if sum["profile"] != true || sum["devices"] != 1.0 || sum["notifications"] != 3.0 || sum["inbox_items"] != 2.0 {
				t.Errorf("summary %s, want the profile, 1 device, 3 notifications, 2 inbox items", r.body)
			}

			// Every send that waited ended SUPPRESSED(ERASED); the inbox
			// sends stay STORED: the accounting of what happened stays.
			suppressed := 0
			for _, id := range gone {
				v, err := e.st.NotificationGet(ctx, "a", id)
				if err != nil {
					t.Fatal(err)
				}
				for _, dv := range v.Deliveries {
					state, reason, _ := v.EntryState(dv)
					switch {
					case dv.Channel == heraldtype.ChannelInbox && state == string(heraldtype.DeliveryStored):
					case state == string(heraldtype.DeliverySuppressed) && reason == store.ReasonErased:
						suppressed++
					default:
						t.Errorf("%s: %s(%s) after the erasure", dv.MessageID, state, reason)
					}
				}
			}
			if suppressed == 0 || sum["suppressed"] != float64(suppressed) {
				t.Errorf("summary says %v suppressed, the read API shows %d", sum["suppressed"], suppressed)
			}
			wantProblem(t, e.do(t, http.MethodGet, "/v1/recipients/u-gone/profile", "Bearer "+keyA, ""), http.StatusNotFound)
			if r := e.do(t, http.MethodGet, "/v1/recipients/u-gone/devices", "Bearer "+keyA, ""); r.status != http.StatusOK ||
				string(r.body) == "" || json.Valid(r.body) && countDevices(t, r.body) != 0 {
				t.Errorf("devices after the erasure: %d %s", r.status, r.body)
			}
			page, err := e.st.InboxFeed(ctx, store.InboxFeedParams{Tenant: "a", Recipient: "u-gone", Limit: 100, Archived: true})
			if err != nil || len(page.Items) != 0 || page.Badge.Unread != 0 {
				t.Errorf("feed after the erasure: %d items, badge %+v (%v)", len(page.Items), page.Badge, err)
			}
			for _, id := range gone {
				if erased, err := e.st.NotificationErased(ctx, id); err != nil || !erased {
					t.Errorf("NotificationErased(%s) = %v, %v", id, erased, err)
				}
			}

			// The other recipient and the other tenant keep everything.
			if erased, _ := e.st.NotificationErased(ctx, stays); erased {
				t.Error("the other recipient's notification was erased")
			}
			if _, err := e.st.ProfileGet(ctx, "a", "u-stays"); err != nil {
				t.Errorf("the other recipient's profile: %v", err)
			}
			if bd, _ := e.st.InboxBadge(ctx, "a", "u-stays"); bd.Unread != 1 {
				t.Errorf("the other recipient's badge %+v, want 1 unread", bd)
			}
			r = e.do(t, http.MethodDelete, "/v1/recipients/u-stays", "Bearer "+keyB, "")
			if r.status != http.StatusOK || string(r.body) != `{"profile":false,"devices":0,"notifications":0,"inbox_items":0,"suppressed":0}`+"\n" {
				t.Errorf("tenant b erasing a's recipient id: %d %s, want 200 and nothing erased", r.status, r.body)
			}
			if _, err := e.st.ProfileGet(ctx, "a", "u-stays"); errors.Is(err, store.ErrNotFound) {
				t.Error("tenant b's erasure reached tenant a's recipient")
			}

			// Again: harmless, nothing left.
			r = e.do(t, http.MethodDelete, "/v1/recipients/u-gone", "Bearer "+keyA, "")
			if r.status != http.StatusOK || string(r.body) != `{"profile":false,"devices":0,"notifications":0,"inbox_items":0,"suppressed":0}`+"\n" {
				t.Errorf("erasing again: %d %s, want 200 and nothing erased", r.status, r.body)
			}
			wantProblem(t, e.do(t, http.MethodDelete, "/v1/recipients/u-gone", "", ""), http.StatusUnauthorized)
		})
	}
}

func countDevices(t *testing.T, body []byte) int {
	t.Helper()
	var v struct {
		Devices []json.RawMessage `json:"devices"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		var list []json.RawMessage
		if err := json.Unmarshal(body, &list); err != nil {
			t.Fatalf("devices %s: %v", body, err)
		}
		return len(list)
	}
	return len(v.Devices)
}

// An erasure's audit entry carries what it erased, and one that failed
// part-way is recorded too, with what its committed batches erased, on both
// stores. Batches of 2 (erasureFault) make three notifications take two.
func TestErasureAuditEntryHasItsFigures(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := clock.NewFake(time.Date(2030, 3, 14, 9, 0, 0, 0, time.UTC))
			st := &erasureFault{Store: testdb.Open(t, driver, clk).Store, limit: 2}
			srv := httptest.NewServer(httpapi.New(fullConfig(t, st, clk)))
			t.Cleanup(srv.Close)
			w := &walk{url: srv.URL, client: srv.Client()}
			key := mustKey(t, st, clk, "a")
			// A recipient id that is personal data, as the audit log must not show.
			const who = "erin@example.com"
			path := "/v1/recipients/" + who
			if got, b := w.do(t, http.MethodPut, path+"/profile", key, `{"addresses":{"sms":"+821012345678"},"consent":{"push":true}}`); got != http.StatusNoContent {
				t.Fatalf("PUT profile: %d %s", got, b)
			}
			if got, b := w.do(t, http.MethodPut, path+"/devices/fcm-token-of-erin", key, `{"platform":"fcm"}`); got/100 != 2 {
				t.Fatalf("PUT device: %d %s", got, b)
			}
			var ids []string
			for i := range 3 {
				resp, b := w.send(t, http.MethodPost, "/v1/notifications", key, fmt.Sprint("erase-audit-", i),
					fmt.Sprintf(`{"recipient":%q,"event_id":"e%d","kind":"order.shipped","params":{"item":"Mori mug","tracking":"CJ-%d"}}`, who, i, i))
				var a struct{ ID string }
				if resp.StatusCode != http.StatusAccepted || json.Unmarshal([]byte(b), &a) != nil {
					t.Fatalf("POST /v1/notifications: %d %s", resp.StatusCode, b)
				}
				ids = append(ids, a.ID)
			}
			// erasures are a's recipient.erase entries, oldest first; none
			// names the recipient.
			erasures := func() []map[string]int {
				t.Helper()
				entries, err := st.AuditList(ctx, store.AuditListParams{Tenant: "a"})
				if err != nil {
					t.Fatal(err)
				}
				var out []map[string]int
				for _, e := range slices.Backward(entries) {
					if e.Action != audit.RecipientErase {
						continue
					}
					if e.Target != audit.Recipient("a", who) || strings.Contains(e.Target+e.Detail, "erin") {
						t.Errorf("entry target %q detail %s: want the recipient's digest and no trace of its id", e.Target, e.Detail)
					}
					var figures map[string]int
					if err := json.Unmarshal([]byte(e.Detail), &figures); err != nil {
						t.Fatalf("entry detail %s: %v", e.Detail, err)
					}
					out = append(out, figures)
				}
				return out
			}
			// suppressed counts the sends of the erased notifications that
			// ended SUPPRESSED(ERASED).
			suppressed := func() int {
				t.Helper()
				n := 0
				for _, id := range ids {
					if erased, err := st.NotificationErased(ctx, id); err != nil || !erased {
						continue
					}
					v, err := st.NotificationGet(ctx, "a", id)
					if err != nil {
						t.Fatal(err)
					}
					for _, dv := range v.Deliveries {
						if state, reason, _ := v.EntryState(dv); state == string(heraldtype.DeliverySuppressed) && reason == store.ReasonErased {
							n++
						}
					}
				}
				return n
			}

			// The store fails on the first batch: nothing erased, no entry,
			// as for any action that failed without effect.
			st.failBatch(1)
			if got, b := w.do(t, http.MethodDelete, path, key, ""); got != http.StatusServiceUnavailable {
				t.Fatalf("erasure failing on its first batch: %d %s, want 503", got, b)
			}
			if got := erasures(); len(got) != 0 {
				t.Fatalf("entries after an erasure that erased nothing: %v, want none", got)
			}
			if _, err := st.ProfileGet(ctx, "a", who); err != nil {
				t.Fatalf("the profile after an erasure that failed at once: %v, want it still there", err)
			}

			// The store fails on the second batch: the first one's erasure
			// stays, and its entry says so.
			st.failBatch(2)
			if got, b := w.do(t, http.MethodDelete, path, key, ""); got != http.StatusServiceUnavailable {
				t.Fatalf("erasure failing on its second batch: %d %s, want 503", got, b)
			}
			got := erasures()
			want := map[string]int{"status": http.StatusServiceUnavailable, "batches": 1, "profile": 1, "devices": 1,
				"notifications": 2, "inbox_items": 2, "suppressed": suppressed()}
			if len(got) != 1 || !maps.Equal(got[0], want) || want["suppressed"] == 0 {
				t.Fatalf("entries after an erasure failing part-way: %v, want one with %v (and sends suppressed)", got, want)
			}
			partial := got[0]

			// Sent again, it finishes: its entry has the answer's figures.
			st.failBatch(0)
			status, b := w.do(t, http.MethodDelete, path, key, "")
			var answer struct {
				Profile                            bool
				Devices, Notifications, Suppressed int
				InboxItems                         int `json:"inbox_items"`
			}
			if status != http.StatusOK || json.Unmarshal([]byte(b), &answer) != nil {
				t.Fatalf("erasure sent again: %d %s, want 200", status, b)
			}
			got = erasures()
			if len(got) != 2 || got[1]["batches"] < 1 {
				t.Fatalf("entries after the erasure sent again: %v, want a second one, with its batches", got)
			}
			want = map[string]int{"status": http.StatusOK, "batches": got[1]["batches"], "profile": 0, "devices": answer.Devices,
				"notifications": answer.Notifications, "inbox_items": answer.InboxItems, "suppressed": answer.Suppressed}
			if answer.Profile {
				want["profile"] = 1
			}
			if !maps.Equal(got[1], want) {
				t.Errorf("the second entry %v, want the answer's figures %v", got[1], want)
			}
			// Together the two entries account for everything erased.
			if n, i := partial["notifications"]+got[1]["notifications"], partial["inbox_items"]+got[1]["inbox_items"]; n != 3 || i != 3 ||
				partial["suppressed"]+got[1]["suppressed"] != suppressed() {
				t.Errorf("the entries %v and %v count %d notifications and %d inbox items, want 3 and 3, and %d sends suppressed",
					partial, got[1], n, i, suppressed())
			}
		})
	}
}

// erasureFault is a store whose erasure batches erase limit notifications
// (and inbox items) at most, and whose batch number failOn of an erasure
// (counted from 1 since failBatch; 0: none) fails without running, as
// when the store goes away between two batches.
type erasureFault struct {
	store.Store
	limit int

	mu            sync.Mutex
	calls, failOn int
}

func (f *erasureFault) RecipientErase(ctx context.Context, p store.RecipientEraseParams) (store.RecipientEraseResult, error) {
	f.mu.Lock()
	f.calls++
	fail := f.calls == f.failOn
	f.mu.Unlock()
	if fail {
		return store.RecipientEraseResult{}, storefault.ErrConnReset
	}
	p.Limit = f.limit
	return f.Store.RecipientErase(ctx, p)
}

// failBatch makes batch n of the next erasure fail (0: none).
func (f *erasureFault) failBatch(n int) {
	f.mu.Lock()
	f.calls, f.failOn = 0, n
	f.mu.Unlock()
}

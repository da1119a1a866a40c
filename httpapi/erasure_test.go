package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/heraldhq/herald/heraldtype"
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

package audit_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/heraldhq/herald/audit"
	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/internal/testdb"
	"github.com/heraldhq/herald/store"
)

// listAudit serves GET /v1/admin/audit?query for tenant t.
func listAudit(t *testing.T, h *audit.Handler, tenant, query string) (int, []byte) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/v1/admin/audit"+query, nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r.WithContext(auth.WithTenant(r.Context(), tenant)))
	return w.Code, w.Body.Bytes()
}

// The audit log's listing pages as the docs say, on both stores: pages of
// limit walk every entry once, newest first, and next_cursor is null on
// the last page also when that page is exactly full; a query parameter it
// does not know (a filter an exporter might expect, since=) is a 400
// naming it, not ignored.
func TestAuditListPages(t *testing.T) {
	t.Parallel()
	for _, driver := range testdb.Drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			db := testdb.Open(t, driver, nil)
			for _, target := range []string{"k1", "k2", "k3", "k4"} {
				if _, err := db.Store.AuditAppend(context.Background(), store.AuditEntry{Tenant: "shop", ActorKey: "config:1",
					ActorName: "config", Action: string(audit.KeyCreate), Target: target, Detail: "{}"}); err != nil {
					t.Fatal(err)
				}
			}
			h := &audit.Handler{Store: db.Store, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}

			t.Run("LastFullPageHasNoCursor", func(t *testing.T) {
				for _, limit := range []string{"1", "2", "4"} {
					var walked []string
					query := "?limit=" + limit
					for pages := 0; ; pages++ {
						if pages > 10 {
							t.Fatalf("limit %s: more than 10 pages", limit)
						}
						code, body := listAudit(t, h, "shop", query)
						var page struct {
							Entries    []audit.EntryBody `json:"entries"`
							NextCursor *string           `json:"next_cursor"`
						}
						if code != http.StatusOK || json.Unmarshal(body, &page) != nil {
							t.Fatalf("limit %s: %d %s", limit, code, body)
						}
						if len(page.Entries) == 0 {
							t.Fatalf("limit %s: an empty page after %v: the page before it gave a next_cursor", limit, walked)
						}
						for _, e := range page.Entries {
							walked = append(walked, e.Target)
						}
						if page.NextCursor == nil {
							break
						}
						query = "?limit=" + limit + "&cursor=" + url.QueryEscape(*page.NextCursor)
					}
					if got := strings.Join(walked, ","); got != "k4,k3,k2,k1" {
						t.Fatalf("limit %s walked %s, want k4,k3,k2,k1", limit, got)
					}
				}
			})
			t.Run("UnknownOrRepeatedParameterIs400", func(t *testing.T) {
				for query, param := range map[string]string{
					"?since=2030-01-01T00:00:00Z": "since",
					"?action=key.create":          "action",
					"?limit=1&limit=2":            "limit",
				} {
					code, body := listAudit(t, h, "shop", query)
					if code != http.StatusBadRequest || !strings.Contains(string(body), `"param":"`+param+`"`) {
						t.Errorf("%s: %d %s, want 400 naming %s", query, code, body, param)
					}
				}
			})
		})
	}
}

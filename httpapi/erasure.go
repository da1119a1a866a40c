package httpapi

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"

	"github.com/heraldhq/herald/audit"
	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/erasure"
	"github.com/heraldhq/herald/problem"
)

// The erasure of a recipient (package erasure has what it erases and what
// it keeps):
//
//	DELETE /v1/recipients/{recipient}   (API key) → 200 {"profile", "devices", "notifications",
//	                                    "inbox_items", "suppressed"}: what this erasure erased;
//	                                    all zero (and still 200) when there was nothing left
//	                                    to erase; 503 when the store failed (what the batches
//	                                    before the failure erased stays erased: send it again)
//
// It is synchronous: the answer comes once the last batch committed. A
// client that hangs up does not stop it (an erasure half done is finished
// rather than left).
//
// Its audit entry (recipient.erase, the recipient as its digest) has the
// answer's figures and the batches that committed; one that failed after
// a batch committed is recorded too, with what it erased before the
// failure (and status 503). One that failed before is not: it erased
// nothing.
type erasureAPI struct {
	eraser *erasure.Eraser
	logger *slog.Logger
}

// routeErasure adds DELETE /v1/recipients/{recipient} to mux.
func routeErasure(mux *router, cfg Config, authed func(http.Handler) http.Handler) {
	e := &erasureAPI{eraser: erasure.New(erasure.Config{Store: cfg.Store, Metrics: cfg.Metrics, Logger: cfg.Logger}), logger: cfg.Logger}
	mux.Handle("DELETE /v1/recipients/{recipient}", authed(http.HandlerFunc(e.erase)))
}

func (e *erasureAPI) erase(w http.ResponseWriter, r *http.Request) {
	ctx := context.WithoutCancel(r.Context())
	sum, err := e.eraser.Erase(ctx, auth.Tenant(ctx), r.PathValue("recipient"))
	if sum.Batches > 0 {
		// Even if a later batch failed: the batches before it committed.
		audit.Took(r, erasureFigures(sum))
	}
	if err != nil {
		// The eraser logged it, without the recipient.
		problem.New(w, http.StatusServiceUnavailable, "the store is unavailable; what was erased stays erased: send the request again")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(sum)
}

// erasureFigures are an erasure's audit figures: the answer's counts (the
// profile as 0 or 1) and the batches that committed. Counts only: nothing
// that names the person.
func erasureFigures(sum erasure.Summary) map[string]int {
	profile := 0
	if sum.Profile {
		profile = 1
	}
	return map[string]int{"profile": profile, "devices": sum.Devices, "notifications": sum.Notifications,
		"inbox_items": sum.InboxItems, "suppressed": sum.Suppressed, "batches": sum.Batches}
}

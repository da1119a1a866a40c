package httpapi

import (
	"net/http"

	"github.com/heraldhq/herald/consent"
)

// A recipient's consent history (package consent has the answer and what
// consent means):
//
//	GET /v1/recipients/{recipient}/consent-history?limit=&cursor=   (API key)
//	  → 200 {"changes": [{"channel", "old", "new", "changed_at", "by"}], "next_cursor"}
//
// The changes themselves are recorded by PUT /v1/recipients/{recipient}/profile
// (consent.Actor is who it records).
func routeConsent(mux *router, cfg Config, authed func(http.Handler) http.Handler) {
	h := &consent.History{Store: cfg.Store, Logger: cfg.Logger}
	mux.Handle("GET /v1/recipients/{recipient}/consent-history", authed(h))
}

package httpapi

import (
	"net/http"

	"github.com/heraldhq/herald/cancel"
	"github.com/heraldhq/herald/lookup"
)

// routeEveryday adds the API a support person and an integrating developer
// use every day, built from cfg's store, catalog and metrics:
//
//	GET  /v1/notifications              the caller's notifications, newest first (lookup.ListHandler)
//	POST /v1/notifications/{id}/cancel  cancel the sends not yet gone out (cancel.Handler)
//	GET  /v1/kinds                      the kinds, their channels and params (kindsAPI)
func routeEveryday(mux *router, cfg Config, authed func(http.Handler) http.Handler) {
	mux.Handle("GET /v1/notifications", authed(&lookup.ListHandler{Store: cfg.Store, Logger: cfg.Logger}))
	c := &cancel.Canceller{Store: cfg.Store, Metrics: cfg.Metrics, Logger: cfg.Logger}
	mux.Handle("POST /v1/notifications/{id}/cancel", authed(&cancel.Handler{Canceller: c}))
	if cfg.Intake != nil && cfg.Intake.Catalog != nil {
		k := &kindsAPI{catalog: cfg.Intake.Catalog}
		mux.Handle("GET /v1/kinds", authed(http.HandlerFunc(k.list)))
	}
}

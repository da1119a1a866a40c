package httpapi

import (
	"net/http"

	"github.com/heraldhq/herald/devices"
)

// routeDevices adds a recipient's push devices (package devices), with an
// API key:
//
//	PUT    /v1/recipients/{recipient}/devices/{token}  register (or re-register) a token
//	DELETE /v1/recipients/{recipient}/devices/{token}  delete it
//	GET    /v1/recipients/{recipient}/devices          list them, tokens masked
func routeDevices(mux *router, cfg Config, authed func(http.Handler) http.Handler) {
	h := &devices.Handler{Store: cfg.Store, Logger: cfg.Logger, Seal: cfg.Seal}
	mux.Handle("PUT /v1/recipients/{recipient}/devices/{token}", authed(http.HandlerFunc(h.Put)))
	mux.Handle("DELETE /v1/recipients/{recipient}/devices/{token}", authed(http.HandlerFunc(h.Delete)))
	mux.Handle("GET /v1/recipients/{recipient}/devices", authed(http.HandlerFunc(h.List)))
}

package httpapi

// routeStream adds GET /v1/me/stream, the recipient's inbox as Server-Sent
// Events (package stream), behind the recipient token of every /v1/me/…
// route (meAuth). cfg.Stream nil leaves it out.
func routeStream(mux *router, cfg Config) {
	if cfg.Stream == nil {
		return
	}
	mux.Handle("GET /v1/me/stream", meAuth(cfg)(cfg.Stream))
}

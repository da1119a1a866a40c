package httpapi

// routeCallbacks adds POST /v1/callbacks/{provider}: providers' delivery
// reports (package settle). No API key: each provider's own check says who
// sent a report. cfg.Callbacks nil leaves it out.
func routeCallbacks(mux *router, cfg Config) {
	if cfg.Callbacks == nil {
		return
	}
	mux.Handle("POST /v1/callbacks/{provider}", cfg.Callbacks)
}

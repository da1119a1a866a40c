package httpapi

import (
	"crypto/subtle"
	"log/slog"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/metrics"
)

// MetricsHandler serves GET /metrics (Prometheus text) from m. With a
// token, a scrape must send Authorization: Bearer <token> (401 otherwise).
// A collector that fails is logged and left out of the answer: a scrape
// never answers an error's text, which could name the database.
func MetricsHandler(m *metrics.Metrics, token string, logger *slog.Logger) http.Handler {
	h := promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      slog.NewLogLogger(logger.Handler(), slog.LevelError),
	})
	if token == "" {
		return h
	}
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		header, ok := auth.Authorization(w, r)
		if !ok {
			return
		}
		got, ok := strings.CutPrefix(header, "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			auth.Refuse(w, "herald metrics", "", "a valid metrics token is required: Authorization: Bearer <token>")
			return
		}
		h.ServeHTTP(w, r)
	})
}

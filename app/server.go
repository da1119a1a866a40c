package app

import (
	"log/slog"
	"net"
	"net/http"
	"sync"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/httpapi"
	"github.com/heraldhq/herald/problem"
)

// httpServer is an HTTP server for h with cfg's timeouts and limits
// (config.Server; docs/hardening.md). The live stream is not cut by
// write_timeout: it moves its connection's write deadline on before each
// write (package stream), and net/http lifts the read deadline once a
// request's body is read.
func httpServer(cfg config.Server, h http.Handler, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout.D(),
		ReadTimeout:       cfg.ReadTimeout.D(),
		WriteTimeout:      cfg.WriteTimeout.D(),
		IdleTimeout:       cfg.IdleTimeout.D(),
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// metricsServer serves GET /metrics alone, for config metrics.listen.
func (a *App) metricsServer() *http.Server {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", httpapi.MetricsHandler(a.metrics, a.cfg.Metrics.Token(), a.logger))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		problem.New(w, http.StatusNotFound, "no such endpoint: this listener serves GET /metrics only")
	})
	return httpServer(a.cfg.Server, mux, a.logger)
}

// limitConns caps the connections open at once from l at n: Accept waits
// for one to close before it takes the next, which meanwhile waits in the
// kernel's accept queue.
func limitConns(l net.Listener, n int) net.Listener {
	return &limitListener{Listener: l, slots: make(chan struct{}, n), closed: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	slots     chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// refuseWhileDraining answers 503 (Retry-After: 1, Connection: close) to a
// request that reaches herald once it has begun to drain: between SIGTERM
// and the listener's close a new request would otherwise be accepted by a
// process on its way out. An idempotent client retries it, with the same
// key, on another process. Liveness and readiness still answer (readiness
// says draining).
func (a *App) refuseWhileDraining(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.draining.Load() && r.URL.Path != "/healthz" && r.URL.Path != "/readyz" {
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Connection", "close")
			problem.New(w, http.StatusServiceUnavailable, "herald is shutting down: retry, with the same Idempotency-Key")
			return
		}
		h.ServeHTTP(w, r)
	})
}

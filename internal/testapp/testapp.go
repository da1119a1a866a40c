// Package testapp runs a whole herald (app.App) inside a test, for the
// tests that need herald running beside what they test: the root package's
// tests of package herald and the examples' tests.
package testapp

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/config"
)

// Start runs herald on cfg, on a free port of 127.0.0.1 and with its logs
// discarded, until the test ends; it returns the app and its base URL
// ("http://127.0.0.1:port"). A config that does not validate or an app that
// cannot be built fails the test at once; a Run that returns an error, or
// has not returned within twice cfg's shutdown_timeout of the test's end,
// fails it at cleanup.
func Start(t testing.TB, cfg *config.Config) (*app.App, string) {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h, err := app.New(context.Background(), cfg, app.Options{Listener: l, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("herald: %v", err)
			}
		case <-time.After(2 * cfg.ShutdownTimeout.D()):
			t.Errorf("herald did not stop within %s of its context's end", 2*cfg.ShutdownTimeout.D())
		}
	})
	return h, "http://" + l.Addr().String()
}

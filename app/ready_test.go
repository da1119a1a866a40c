package app_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/internal/testenv"
)

// newApp builds an app on testConfig(t, "", edit) and serves its handler;
// it is never Run.
func newApp(t *testing.T, edit func(*config.Config)) (*app.App, string) {
	t.Helper()
	a, err := app.New(context.Background(), testConfig(t, "", edit), app.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	return a, srv.URL
}

type readyAnswer struct {
	code        int
	contentType string
	Status      any    `json:"status"`
	Detail      string `json:"detail"`
	Checks      []app.Check
}

func readyz(t *testing.T, base string) readyAnswer {
	t.Helper()
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := readyAnswer{code: resp.StatusCode, contentType: resp.Header.Get("Content-Type")}
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("readyz body %s: %v", raw, err)
	}
	return r
}

func TestReadyz(t *testing.T) {
	t.Parallel()

	t.Run("DBTransportReadyWithAWritableStore", func(t *testing.T) {
		t.Parallel()
		a, base := newApp(t, nil)
		t.Cleanup(func() { _ = a.Close() })
		r := readyz(t, base)
		if r.code != http.StatusOK || r.contentType != "application/json" || r.Status != "ready" ||
			len(r.Checks) != 1 || r.Checks[0] != (app.Check{Name: "store", Status: "ok"}) {
			t.Fatalf("readyz = %d %s %+v, want 200 ready with the store check ok", r.code, r.contentType, r)
		}
	})

	t.Run("StoreThatCannotBeWrittenIs503", func(t *testing.T) {
		t.Parallel()
		a, base := newApp(t, nil)
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		r := readyz(t, base)
		if r.code != http.StatusServiceUnavailable || r.contentType != "application/problem+json" ||
			r.Detail != "not ready: store" || len(r.Checks) != 1 || r.Checks[0].Status != "failing" || r.Checks[0].Reason == "" {
			t.Fatalf("readyz = %d %s %+v, want 503 problem naming the store with a reason", r.code, r.contentType, r)
		}
	})

	t.Run("RabbitMQNotConnectedIs503", func(t *testing.T) {
		t.Parallel()
		// Never Run: nothing is connected yet.
		a, base := newApp(t, func(c *config.Config) {
			c.Transport = "rabbitmq"
			c.RabbitMQURL = "amqp://guest:s3cr3t@127.0.0.1:1/"
		})
		t.Cleanup(func() { _ = a.Close() })
		r := readyz(t, base)
		if r.code != http.StatusServiceUnavailable || r.contentType != "application/problem+json" {
			t.Fatalf("readyz = %d %s %+v, want 503 problem", r.code, r.contentType, r)
		}
		var failing []string
		for _, c := range r.Checks {
			if c.Status != "ok" {
				failing = append(failing, c.Name)
				if c.Reason != "not connected yet" {
					t.Errorf("check %s: reason %q, want not connected yet", c.Name, c.Reason)
				}
			}
		}
		want := "rabbitmq.relay.alert rabbitmq.consumer.alert rabbitmq.relay.transactional rabbitmq.consumer.transactional " +
			"rabbitmq.relay.marketing rabbitmq.consumer.marketing rabbitmq.relay.internal rabbitmq.consumer.internal"
		if strings.Join(failing, " ") != want {
			t.Errorf("failing checks %v, want %s", failing, want)
		}
		if r.Detail != "not ready: "+strings.ReplaceAll(want, " ", ", ") {
			t.Errorf("detail %q does not name every failing check", r.Detail)
		}
	})

	t.Run("ShutdownIs503WhateverTheChecksSay", func(t *testing.T) {
		t.Parallel()
		a, base := newApp(t, func(c *config.Config) { c.Listen = "127.0.0.1:0" })
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // Run drains at once
		if err := a.Run(ctx); err != nil {
			t.Fatalf("Run: %v", err)
		}
		r := readyz(t, base)
		if r.code != http.StatusServiceUnavailable || r.contentType != "application/problem+json" || r.Detail != "not ready: shutdown" ||
			len(r.Checks) != 1 || r.Checks[0] != (app.Check{Name: "shutdown", Status: "failing", Reason: "herald is shutting down"}) {
			t.Fatalf("readyz after shutdown began = %d %s %+v, want 503 problem naming only the shutdown", r.code, r.contentType, r)
		}
	})

	t.Run("HealthzStaysLiveness", func(t *testing.T) {
		t.Parallel()
		a, base := newApp(t, nil)
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		resp, err := testenv.HTTP.Get(base + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("healthz = %d with the store closed, want 200", resp.StatusCode)
		}
	})
}

// With shutdown_delay, SIGTERM first makes /readyz answer 503 (shutdown)
// while herald goes on serving, so a load balancer polling it stops
// sending before the listener closes; the drain begins after the delay.
func TestShutdownDelayServesWhileNotReady(t *testing.T) {
	t.Parallel()
	const delay = time.Second
	a, base := newHerald(t, testConfig(t, "", func(c *config.Config) { c.ShutdownDelay = config.Duration(delay) }), app.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	testenv.WaitFor(t, "herald ready", testenv.Patience, func() bool { return readyz(t, base).code == http.StatusOK })
	began := time.Now()
	cancel()
	testenv.WaitFor(t, "readyz saying shutdown", testenv.Patience, func() bool {
		r := readyz(t, base)
		return r.code == http.StatusServiceUnavailable && r.Detail == "not ready: shutdown"
	})
	if code, body := call(t, base, http.MethodPost, "/v1/notifications", config.DevAPIKey,
		`{"recipient":"r1","event_id":"e1","kind":"payment.approved","params":{"amount":1,"merchant":"m"}}`); code != http.StatusAccepted {
		t.Fatalf("a notification during the delay: %d %s, want 202", code, body)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * testenv.Patience):
		t.Fatal("Run still running after the delay")
	}
	if took := time.Since(began); took < delay {
		t.Fatalf("Run ended %s after the stop, before the %s delay", took, delay)
	}
}

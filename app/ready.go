package app

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/heraldhq/herald/broker/rabbitmq"
	"github.com/heraldhq/herald/config"
)

// Readiness (GET /readyz) answers 200 only while this process can deliver:
// the store can be written and, with transport rabbitmq, every lane's relay
// publisher and consumer is connected. What does not block delivery is left
// out: PostgreSQL's LISTEN connection (polling every poll_interval takes
// over while it reconnects), the leader lock (another process may hold it),
// providers (a provider that fails is retried or alerted per message).
// During shutdown it answers 503 whatever the checks say.

// Check is one dependency's state in the readiness answer.
type Check struct {
	Name string `json:"name"`
	// Status is "ok" or "failing".
	Status string `json:"status"`
	// Reason says why a check fails, with URLs' passwords hidden.
	Reason string `json:"reason,omitempty"`
}

// readyBody is the 200 answer; notReadyBody the 503 (problem+json).
type readyBody struct {
	Status string  `json:"status"`
	Checks []Check `json:"checks"`
}

type notReadyBody struct {
	Type   string  `json:"type"`
	Title  string  `json:"title"`
	Status int     `json:"status"`
	Detail string  `json:"detail"`
	Checks []Check `json:"checks"`
}

// storePingTimeout bounds the store check.
const storePingTimeout = 2 * time.Second

// Ready runs every readiness check and reports whether all pass.
func (a *App) Ready(ctx context.Context) ([]Check, bool) {
	if a.draining.Load() || a.stopping.Load() {
		return []Check{{Name: "shutdown", Status: "failing", Reason: "herald is shutting down"}}, false
	}
	checks := []Check{a.storeCheck(ctx)}
	for _, rl := range a.rabbit {
		checks = append(checks,
			linkCheck("rabbitmq.relay."+string(rl.lane), rl.pub.Status()),
			linkCheck("rabbitmq.consumer."+string(rl.lane), rl.cons.Status()))
	}
	ok := true
	for i := range checks {
		checks[i].Reason = a.redact(checks[i].Reason)
		ok = ok && checks[i].Status == "ok"
	}
	return checks, ok
}

func (a *App) storeCheck(ctx context.Context) Check {
	ctx, cancel := context.WithTimeout(ctx, storePingTimeout)
	defer cancel()
	if err := a.store.Ping(ctx); err != nil {
		return Check{Name: "store", Status: "failing", Reason: "the store cannot be written: " + err.Error()}
	}
	return Check{Name: "store", Status: "ok"}
}

func linkCheck(name string, s rabbitmq.Status) Check {
	switch {
	case s.Connected:
		return Check{Name: name, Status: "ok"}
	case s.Err == nil:
		return Check{Name: name, Status: "failing", Reason: "not connected yet"}
	}
	return Check{Name: name, Status: "failing", Reason: "not connected: " + s.Err.Error()}
}

// redact hides the passwords of the database and broker URLs in s
// (config.URLSecrets: the userinfo's, password= and sslpassword=), in case
// an error quoted one (the broker's dial errors already hide it).
func (a *App) redact(s string) string {
	for _, raw := range []string{a.cfg.Database, a.cfg.RabbitMQURL} {
		// The userinfo's password when it is the user's name (guest/guest)
		// hides only where it stands as the password: elsewhere it is the
		// name, which the error needs and which tells nothing the name
		// does not. Every other secret hides wherever it appears.
		nameAsPassword := ""
		if u, err := url.Parse(raw); err == nil && u.User != nil {
			if pw, ok := u.User.Password(); ok && pw == u.User.Username() {
				nameAsPassword = pw
				s = strings.ReplaceAll(s, ":"+pw+"@", ":xxxxx@")
			}
		}
		for _, pw := range config.URLSecrets(raw) {
			if pw != nameAsPassword {
				s = strings.ReplaceAll(s, pw, "xxxxx")
			}
		}
	}
	return s
}

// serveReadyz is the handler httpapi serves at GET /readyz. It answers 200
// {"status": "ready", "checks": […]} or 503 application/problem+json whose
// detail names the failing checks and whose checks list every check with
// its reason.
func (a *App) serveReadyz(w http.ResponseWriter, r *http.Request) {
	checks, ok := a.Ready(r.Context())
	w.Header().Set("Cache-Control", "no-store")
	if ok {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(readyBody{Status: "ready", Checks: checks})
		return
	}
	var failing []string
	for _, c := range checks {
		if c.Status != "ok" {
			failing = append(failing, c.Name)
		}
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusServiceUnavailable)
	_ = json.NewEncoder(w).Encode(notReadyBody{
		Type: "about:blank", Title: http.StatusText(http.StatusServiceUnavailable), Status: http.StatusServiceUnavailable,
		Detail: "not ready: " + strings.Join(failing, ", "), Checks: checks,
	})
}

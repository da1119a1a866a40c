// Command webhook-receiver receives herald's signed webhooks and checks each
// one as the Standard Webhooks specification asks
// (https://github.com/standard-webhooks/standard-webhooks, "Verifying
// signatures"), with the Go standard library alone: copy it, or just Verify,
// into your service.
//
//	export WEBHOOK_SECRET=whsec_…        # during a rotation: "whsec_new… whsec_old…"
//	go run . -listen 127.0.0.1:9000
//
// What it answers, and what herald makes of it: 204 once the notification
// is handled (accepted); 401 for a missing, stale or wrong signature (not
// sent: herald retries later with a fresh timestamp, so a receiver whose
// secret is being fixed loses nothing); 400 for a body that is no
// notification (a permanent failure); 429 with Retry-After if handling
// failed with nothing done (ErrNotProcessed: herald tries again later);
// 500 if handling failed and whether it took effect is not known (herald
// records UNKNOWN and does not resend it). docs/consumer.md has the rules.
package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9000", "address to listen on")
	flag.Parse()
	keys, err := ParseSecrets(os.Getenv("WEBHOOK_SECRET"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "webhook-receiver: WEBHOOK_SECRET:", err)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "webhook-receiver:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.Default()
	log.Info("webhook-receiver: listening", slog.String("addr", ln.Addr().String()))
	if err := serve(ctx, ln, Handler(keys, time.Now, logNotification(log))); err != nil {
		fmt.Fprintln(os.Stderr, "webhook-receiver:", err)
		os.Exit(1)
	}
}

// serve answers on ln until ctx ends, then lets requests in progress finish.
func serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return err
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// ErrNotProcessed is what a handler returns when it did nothing (its
// database unreachable before the transaction began, or the transaction
// rolled back): herald may send the notification again. Any other error
// means the outcome is not known.
var ErrNotProcessed = errors.New("not processed")

// Notification is the JSON body herald posts.
type Notification struct {
	MessageID string `json:"message_id"`
	Recipient string `json:"recipient"`
	Kind      string `json:"kind"`
	Channel   string `json:"channel"`
	Title     string `json:"title"`
	Body      string `json:"body"`
}

// logNotification is the example's handling: it logs the notification.
// Yours does the work, keyed by MessageID (equal to webhook-id): herald
// sends one message id once by its own choice, but a request can be
// replayed by a third party within the tolerance, and herald retries a
// 401/403/429 answer, so record the id in the same transaction as the
// effect and skip an id you have seen (package consumer does both on
// PostgreSQL: docs/consumer.md).
func logNotification(log *slog.Logger) func(context.Context, Notification) error {
	return func(ctx context.Context, n Notification) error {
		log.InfoContext(ctx, "webhook-receiver: notification",
			slog.String("message_id", n.MessageID), slog.String("kind", n.Kind))
		return nil
	}
}

// Handler verifies each request against keys at now() and passes the
// notification of a verified one to handle.
func Handler(keys [][]byte, now func() time.Time, handle func(context.Context, Notification) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		// Read the body as raw bytes: the signature covers exactly these,
		// and JSON decoded then encoded again may differ.
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, "body too large or unreadable", http.StatusRequestEntityTooLarge)
			return
		}
		if err := Verify(keys, r.Header, body, now(), Tolerance); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var n Notification
		if err := json.Unmarshal(body, &n); err != nil || n.MessageID == "" {
			http.Error(w, "not a notification", http.StatusBadRequest)
			return
		}
		switch err := handle(r.Context(), n); {
		case errors.Is(err, ErrNotProcessed):
			// A short wait: with a rate_limit on herald's provider, a
			// Retry-After pauses every send to this receiver that long.
			w.Header().Set("Retry-After", "5")
			http.Error(w, "not processed: send it again", http.StatusTooManyRequests)
			return
		case err != nil:
			http.Error(w, "handling failed", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// Tolerance is how far a request's webhook-timestamp may be from the
// receiver's clock, either way: the specification's libraries use 5 minutes.
const Tolerance = 5 * time.Minute

// The reasons Verify refuses a request. None holds a secret.
var (
	ErrMissingHeaders = errors.New("webhook-id, webhook-timestamp and webhook-signature are required")
	ErrBadTimestamp   = errors.New("webhook-timestamp is not Unix seconds")
	ErrStale          = errors.New("webhook-timestamp is outside the tolerance")
	ErrNoSignature    = errors.New("no v1 signature matches")
)

// README:begin webhook-verify
// Verify checks a Standard Webhooks request: its timestamp is within
// tolerance of now, and one of the v1 signatures in webhook-signature is
// the HMAC-SHA256, under one of keys, of id + "." + timestamp + "." + body.
// body must be the raw bytes received.
func Verify(keys [][]byte, header http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	id, ts := header.Get("webhook-id"), header.Get("webhook-timestamp")
	sigs := strings.Fields(header.Get("webhook-signature"))
	if id == "" || ts == "" || len(sigs) == 0 {
		return ErrMissingHeaders
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return ErrBadTimestamp
	}
	if age := now.Sub(time.Unix(sec, 0)); age > tolerance || age < -tolerance {
		return ErrStale
	}
	for _, key := range keys {
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id + "." + ts + "."))
		mac.Write(body)
		want := mac.Sum(nil)
		for _, s := range sigs {
			version, b64, _ := strings.Cut(s, ",")
			got, err := base64.StdEncoding.DecodeString(b64)
			if version == "v1" && err == nil && hmac.Equal(got, want) { // constant time
				return nil
			}
		}
	}
	return ErrNoSignature
}

// README:end

// ParseSecrets decodes space-separated "whsec_<base64>" secrets (two during
// a rotation) to their keys. Its errors never quote a secret.
func ParseSecrets(s string) ([][]byte, error) {
	var keys [][]byte
	for i, secret := range strings.Fields(s) {
		b64, ok := strings.CutPrefix(secret, "whsec_")
		key, err := base64.StdEncoding.DecodeString(b64)
		if !ok || err != nil || len(key) == 0 {
			return nil, fmt.Errorf("secret %d is not whsec_ and a base64 key", i+1)
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil, errors.New("no secret: set it to the provider's whsec_… secret")
	}
	return keys, nil
}

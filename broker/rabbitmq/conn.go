package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/clock"
)

// dial opens a connection named for the broker's connection list, on a
// socket that can gather a batch's writes (coalescer). The library's own
// recovery stays off: each herald component runs its own session loop (see
// session), which redials and starts again from a clean channel, so no
// delivery tag or confirm sequence survives a reconnect.
func dial(ctx context.Context, rawURL, name string) (*amqp.Connection, *coalescer, error) {
	var out *coalescer
	tcp := amqp.DefaultDial(10 * time.Second)
	cfg := amqp.Config{
		Heartbeat:  10 * time.Second,
		Locale:     "en_US",
		Properties: amqp.Table{"connection_name": name, "product": "herald"},
		Dial: func(network, addr string) (net.Conn, error) {
			c, err := tcp(network, addr)
			if err != nil {
				return nil, err
			}
			out = &coalescer{Conn: c}
			return out, nil
		},
	}
	type result struct {
		c   *amqp.Connection
		out *coalescer
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := amqp.DialConfig(rawURL, cfg)
		done <- result{c, out, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, nil, fmt.Errorf("connect to %s: %w", redact(rawURL), r.err)
		}
		return r.c, r.out, nil
	case <-ctx.Done():
		go func() {
			if r := <-done; r.c != nil {
				_ = r.c.Close()
			}
		}()
		return nil, nil, ctx.Err()
	}
}

// redact hides the password of an AMQP URL.
func redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// Status is whether a component's broker connection is up, for readiness.
type Status struct {
	// Connected: the component is connected and working (its channel open,
	// the topology declared, consuming or in confirm mode).
	Connected bool
	// Err is why it is not, once a try failed: the last connection or
	// channel error, its URL without the password. Nil while the first try
	// is under way.
	Err error
}

// link is a component's Status, kept by session and the session function.
type link struct {
	mu     sync.Mutex
	status Status
}

func (l *link) up() { l.set(Status{Connected: true}) }

func (l *link) down(err error) { l.set(Status{Err: err}) }

func (l *link) set(s Status) {
	l.mu.Lock()
	l.status = s
	l.mu.Unlock()
}

func (l *link) get() Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.status
}

// errStopped is the Status error of a component whose Run has returned.
var errStopped = errors.New("rabbitmq: stopped")

// session keeps one connection up for fn: it dials, runs fn with the
// connection, and when fn returns an error (the connection or a channel
// broke) it closes the connection, waits with backoff and dials again. It
// returns when ctx is done or fn returns nil. fn marks lk up once it is
// working; session marks it down whenever a dial or fn fails, and when it
// returns.
func session(ctx context.Context, logger *slog.Logger, rawURL, name string, lk *link, fn func(ctx context.Context, conn *amqp.Connection, out *coalescer) error) {
	defer lk.down(errStopped)
	wait := time.Duration(0)
	for ctx.Err() == nil {
		if wait > 0 && !clock.Sleep(ctx, wait) {
			return
		}
		conn, out, err := dial(ctx, rawURL, name)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			lk.down(err)
			wait = nextWait(wait)
			level, msg := slog.LevelWarn, "rabbitmq: connect failed"
			if refusedSetup(err) {
				level, msg = slog.LevelError, refusedMessage
			}
			logger.LogAttrs(ctx, level, msg, slog.String("component", name), slog.Duration("retry_in", wait), slog.Any("error", err))
			continue
		}
		started := time.Now()
		err = fn(ctx, conn, out)
		_ = conn.Close()
		if err == nil || ctx.Err() != nil {
			return
		}
		lk.down(err)
		if time.Since(started) > 5*time.Second {
			wait = 0 // it was up for a while: redial at once, then back off
		}
		wait = nextWait(wait)
		level, msg := slog.LevelWarn, "rabbitmq: connection lost, reconnecting"
		if refusedSetup(err) {
			level, msg = slog.LevelError, refusedMessage
		}
		logger.LogAttrs(ctx, level, msg, slog.String("component", name), slog.Duration("retry_in", wait), slog.Any("error", err))
	}
}

// refusedMessage is logged, at error level, for a connection or session
// the broker refused for herald's own settings (refusedSetup): retrying
// goes on, since an administrator may fix the broker's side, but nothing
// will change by waiting alone.
const refusedMessage = "rabbitmq: the broker refuses herald's settings (credentials, vhost, permissions, or a queue declared with other arguments); " +
	"check rabbitmq_url and the rabbitmq settings against the broker; retrying"

// refusedSetup reports whether err is the broker refusing what herald
// asked for, not the connection failing: access refused (a wrong user or
// password, or no permission on the vhost), not allowed (no such vhost),
// or a precondition failed over a queue's arguments (one that exists with
// others, as after a change of delivery_limit). Another failed
// precondition, such as a consumer's acknowledgement timing out, is not
// herald's settings.
func refusedSetup(err error) bool {
	var e *amqp.Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code {
	case amqp.AccessRefused, amqp.NotAllowed:
		return true
	case amqp.PreconditionFailed:
		return strings.Contains(e.Reason, "inequivalent arg")
	}
	return false
}

func nextWait(w time.Duration) time.Duration {
	return min(max(2*w, 100*time.Millisecond), 5*time.Second)
}

// errClosed is what a session function returns when the broker closed its
// connection or channel.
func errClosed(e *amqp.Error) error {
	if e == nil {
		return errors.New("rabbitmq: connection closed")
	}
	return fmt.Errorf("rabbitmq: closed by broker: %w", e)
}

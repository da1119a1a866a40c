package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
)

const (
	// reconnectMin and reconnectMax bound the backoff between attempts to
	// re-establish a dedicated connection (listener, leader).
	reconnectMin = 100 * time.Millisecond
	reconnectMax = 5 * time.Second
	// listenCheck is how long the listener waits for a notification before
	// it pings its connection, so a silently dead one is noticed.
	listenCheck = 30 * time.Second
	// opTimeout bounds one statement on a dedicated connection.
	opTimeout = 5 * time.Second
)

// listen feeds Wakeups from LISTEN on a dedicated connection until Close,
// reconnecting with backoff whenever the connection fails.
func (s *Store) listen() {
	defer s.wg.Done()
	backoff := reconnectMin
	for s.life.Err() == nil {
		started := time.Now()
		err := s.listenOnce()
		if s.life.Err() != nil {
			return
		}
		if time.Since(started) > time.Minute {
			backoff = reconnectMin
		}
		wait := jitter(backoff)
		s.logger.LogAttrs(s.life, slog.LevelWarn, "postgres: wake-up listener disconnected; polling until it reconnects",
			slog.Duration("retry_in", wait), slog.Any("error", err))
		if !clock.Sleep(s.life, wait) {
			return
		}
		backoff = min(2*backoff, reconnectMax)
	}
}

// listenOnce runs one listener connection until it fails or the store closes.
func (s *Store) listenOnce() error {
	conn, err := s.dedicatedConn(s.life, "listener")
	if err != nil {
		return err
	}
	defer closeConn(conn)
	stmts := make([]string, 0, len(s.channels))
	for _, l := range heraldtype.Lanes {
		stmts = append(stmts, "LISTEN "+pgx.Identifier{s.channels[l]}.Sanitize())
	}
	stmts = append(stmts, "LISTEN "+pgx.Identifier{s.inboxChannel}.Sanitize(),
		"LISTEN "+pgx.Identifier{s.keyChannel}.Sanitize())
	if err := execTimeout(s.life, conn, strings.Join(stmts, "; ")); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	// Whatever was committed while nobody listened went unannounced.
	for _, l := range heraldtype.Lanes {
		s.wakeups.Notify(l)
	}
	s.inboxSignals.Missed()
	s.keyHeard()
	s.listenConns.Add(1)
	s.listening.Store(true)
	defer s.listening.Store(false)
	for {
		ctx, cancel := context.WithTimeout(s.life, listenCheck)
		n, err := conn.WaitForNotification(ctx)
		cancel()
		switch {
		case err == nil && n.Channel == s.inboxChannel:
			s.inboxHeard(n.Payload)
		case err == nil && n.Channel == s.keyChannel:
			s.keyHeard()
		case err == nil:
			if lane, ok := s.lanes[n.Channel]; ok {
				s.wakeups.Notify(lane)
			}
		case s.life.Err() != nil:
			return nil
		case errors.Is(err, context.DeadlineExceeded):
			// Quiet for a while: make sure the connection is still there.
			if err := pingTimeout(s.life, conn); err != nil {
				return fmt.Errorf("check listener connection: %w", err)
			}
		default:
			return fmt.Errorf("wait for notification: %w", err)
		}
	}
}

// dedicatedConn opens a connection outside the pool, named for its role in
// pg_stat_activity (application_name "herald listener", "herald leader").
func (s *Store) dedicatedConn(ctx context.Context, role string) (*pgx.Conn, error) {
	cfg := s.connCfg.Copy()
	cfg.RuntimeParams["application_name"] = s.connCfg.RuntimeParams["application_name"] + " " + role
	ctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout+opTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", role, err)
	}
	return conn, nil
}

func execTimeout(ctx context.Context, conn *pgx.Conn, sql string, args ...any) error {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	_, err := conn.Exec(ctx, sql, args...)
	return err
}

func pingTimeout(ctx context.Context, conn *pgx.Conn) error {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	return conn.Ping(ctx)
}

func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// jitter spreads d over [d/2, d) so reconnecting processes do not stampede.
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2+1)
}

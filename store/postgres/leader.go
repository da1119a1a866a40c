package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/clock"
)

// IsLeader reports whether this store holds the leader lock. The sweeper
// gates its leader-only sweeps on it. It is false until RunLeaderElection
// has taken the lock.
func (s *Store) IsLeader() bool { return s.leader.Load() }

// RunLeaderElection campaigns for the leader lock (a session-level
// pg_try_advisory_lock on a dedicated connection, keyed by the database and
// schema) until ctx is done or the store closes, then gives it up. It tries
// the lock every LeaderInterval while it does not hold it, and checks the
// connection that holds it as often; when that connection fails, IsLeader
// turns false and the campaign starts over on a new connection. It returns
// nil when stopped, ErrClosed if the store is already closed.
func (s *Store) RunLeaderElection(ctx context.Context) error {
	if err := s.goBackground(); err != nil {
		return err
	}
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.life, cancel)()
	backoff := reconnectMin
	for ctx.Err() == nil {
		started := time.Now()
		err := s.campaign(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(started) > time.Minute {
			backoff = reconnectMin
		}
		wait := jitter(backoff)
		s.logger.LogAttrs(ctx, slog.LevelWarn, "postgres: leader election lost its connection; retrying",
			slog.Duration("retry_in", wait), slog.Any("error", err))
		if !clock.Sleep(ctx, wait) {
			return nil
		}
		backoff = min(2*backoff, reconnectMax)
	}
	return nil
}

// campaign runs on one connection until it fails or ctx is done.
func (s *Store) campaign(ctx context.Context) (err error) {
	conn, err := s.dedicatedConn(ctx, "leader")
	if err != nil {
		return err
	}
	if err := s.boundLeaderSession(ctx, conn); err != nil {
		closeConn(conn)
		return err
	}
	defer func() {
		// Stop claiming leadership before the lock can pass to anyone else.
		if s.leader.Swap(false) {
			s.leaderLost.Add(1)
			if err == nil {
				// Stopping: release at once rather than when the session
				// ends (closing the connection does both anyway).
				_ = execTimeout(context.Background(), conn, qLeaderUnlock, s.leaderKey)
				s.logger.LogAttrs(context.Background(), slog.LevelInfo, "postgres: gave up leadership")
			} else {
				s.logger.LogAttrs(context.Background(), slog.LevelWarn, "postgres: lost leadership", slog.Any("error", err))
			}
		}
		closeConn(conn)
	}()
	tick := time.NewTicker(s.leaderInterval)
	defer tick.Stop()
	for {
		if s.leaderFrozen.Load() {
			// A frozen process (tests): nothing goes out on the session.
		} else if s.leader.Load() {
			if err := pingTimeout(ctx, conn); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("check leader connection: %w", err)
			}
		} else {
			got, err := tryLock(ctx, conn, s.leaderKey)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("try leader lock: %w", err)
			}
			s.leaderTries.Add(1)
			if got {
				s.leader.Store(true)
				s.logger.LogAttrs(ctx, slog.LevelInfo, "postgres: became leader")
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// boundLeaderSession sets the session's idle_session_timeout to
// LeaderIdleTimeout, so that PostgreSQL ends the session, releasing the
// lock, when its process stops checking it every LeaderInterval (frozen,
// not dead: a dead process's session ends with its connection). A server
// before PostgreSQL 14 has no such setting: the session is left as it is,
// and a frozen leader keeps the lock until it thaws, as before.
func (s *Store) boundLeaderSession(ctx context.Context, conn *pgx.Conn) error {
	err := execTimeout(ctx, conn, qLeaderIdleTimeout, strconv.FormatInt(s.leaderIdle.Milliseconds(), 10))
	if sqlState(err) == pgUndefinedObject {
		s.leaderIdleOld.Do(func() {
			s.logger.LogAttrs(ctx, slog.LevelWarn, "postgres: the server has no idle_session_timeout (PostgreSQL 14 and later); "+
				"a frozen leader keeps the leader lock until it thaws")
		})
		return nil
	}
	if err != nil {
		return fmt.Errorf("bound the leader session: %w", err)
	}
	return nil
}

func tryLock(ctx context.Context, conn *pgx.Conn, key int64) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	var got bool
	err := conn.QueryRow(ctx, qLeaderTry, key).Scan(&got)
	return got, err
}

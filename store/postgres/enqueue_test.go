package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/store"
)

// Tests of CreateTx: a notification written in the caller's transaction.

func TestWakeChannelInSQLMatchesTheListener(t *testing.T) {
	t.Parallel()
	base := testpg.Schema(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	suffix := uniqueName("w")
	names := []string{"", "MiXeD " + suffix, `quo"te ` + suffix, "예약_알림_" + suffix, "ü" + suffix}
	for _, name := range names {
		if name != "" {
			if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { testpg.Exec(t, base, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE") })
			if _, err := conn.Exec(ctx, "SET search_path = "+pgx.Identifier{name}.Sanitize()); err != nil {
				t.Fatal(err)
			}
		}
		db, schema, err := where(ctx, conn)
		if err != nil {
			t.Fatal(err)
		}
		var prefix string
		if err := conn.QueryRow(ctx, "WITH RECURSIVE "+qWakeHash+" SELECT prefix FROM wake").Scan(&prefix); err != nil {
			t.Fatal(err)
		}
		byLane, _ := wakeChannels(db, schema)
		for _, l := range heraldtype.Lanes {
			if got, want := prefix+string(l), byLane[l]; got != want {
				t.Errorf("schema %q, lane %s: SQL names %q, the listener listens on %q", schema, l, got, want)
			}
		}
	}
}

// enqueueSetup opens a store on a fresh schema (it migrates and listens)
// and a separate pool standing for the application, on the same schema.
func enqueueSetup(t *testing.T) (*Store, *pgxpool.Pool, string) {
	t.Helper()
	url := testpg.Schema(t)
	app := uniqueName("app")
	s, err := Open(context.Background(), url, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	pool, err := pgxpool.New(context.Background(), testpg.WithParams(url, "application_name", app))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return s, pool, app
}

func intent(dedup string, mutate func(p *store.NotificationCreateParams)) store.NotificationCreateParams {
	p := store.NotificationCreateParams{
		Tenant: "clinic-7", DedupKey: dedup, ID: ids.New("ntf", time.Now()), Recipient: "patient-1", EventID: "booking-42",
		Kind: "booking.confirmed", Lane: heraldtype.LaneTransactional, Params: json.RawMessage(`{"at":"10:30"}`),
		Channels: []heraldtype.Channel{heraldtype.ChannelSMS, heraldtype.ChannelPush},
	}
	if mutate != nil {
		mutate(&p)
	}
	return p
}

func begin(t *testing.T, pool *pgxpool.Pool) pgx.Tx {
	t.Helper()
	tx, err := pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(context.Background()) })
	return tx
}

// expectNoWake fails the test if anything committed so far woke lane: it
// commits a NOTIFY on another lane's channel and waits until the store's
// listener has passed it on. The listener reads notifications in commit
// order, one at a time, so a NOTIFY of lane committed before the marker
// (a wrong one sent outside the caller's transaction, say) has been passed
// on by then.
func expectNoWake(t *testing.T, s *Store, pool *pgxpool.Pool, lane heraldtype.Lane, what string) {
	t.Helper()
	marker := heraldtype.LaneInternal
	if lane == marker {
		t.Fatalf("the marker lane is %s itself", lane)
	}
	drain(s.Wakeups().C(marker))
	if _, err := pool.Exec(context.Background(), `SELECT pg_notify($1, '')`, s.channels[marker]); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Wakeups().C(marker):
	case <-time.After(10 * time.Second):
		t.Fatalf("the listener did not pass on the marker NOTIFY within 10s")
	}
	select {
	case <-s.Wakeups().C(lane):
		t.Fatalf("lane %s was woken %s", lane, what)
	default:
	}
}

func createIn(t *testing.T, tx pgx.Tx, p store.NotificationCreateParams) store.NotificationCreateResult {
	t.Helper()
	res, err := CreateTx(context.Background(), tx, p)
	if err != nil {
		t.Fatalf("CreateTx: %v", err)
	}
	return res
}

func TestCreateTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// Two statements write: qEnqueue when a send needs the devices or the
	// inbox (push here), qEnqueuePlain otherwise (email). Each case runs on
	// both.
	for _, second := range []heraldtype.Channel{heraldtype.ChannelPush, heraldtype.ChannelEmail} {
		in := func(dedup string, mutate func(p *store.NotificationCreateParams)) store.NotificationCreateParams {
			return intent(dedup, func(p *store.NotificationCreateParams) {
				p.Channels = []heraldtype.Channel{heraldtype.ChannelSMS, second}
				if mutate != nil {
					mutate(p)
				}
			})
		}
		t.Run(string(second), func(t *testing.T) {
			t.Parallel()
			t.Run("CommitWritesEverySendAndWakesClaimers", func(t *testing.T) {
				t.Parallel()
				s, pool, _ := enqueueSetup(t)
				wake := s.Wakeups().C(heraldtype.LaneTransactional)
				waitFor(t, 10*time.Second, "the listener is connected", s.listening.Load)
				drain(wake)
				tx := begin(t, pool)
				p := in("booking-42:confirmed", func(p *store.NotificationCreateParams) { p.Scope = "ward-3" })
				if res := createIn(t, tx, p); res.Outcome != store.Created || res.ID != p.ID {
					t.Fatalf("%+v, want Created %s", res, p.ID)
				}
				if _, err := s.NotificationGet(ctx, p.Tenant, p.ID); !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("visible before the commit: %v", err)
				}
				expectNoWake(t, s, pool, heraldtype.LaneTransactional, "before the commit")
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				select {
				case <-wake:
				case <-time.After(10 * time.Second):
					t.Fatal("the commit did not wake the lane within 10s")
				}
				v, err := s.NotificationGet(ctx, p.Tenant, p.ID)
				if err != nil {
					t.Fatal(err)
				}
				if len(v.Deliveries) != 2 || v.Deliveries[0].Channel != heraldtype.ChannelSMS || v.Deliveries[1].Channel != second ||
					v.Deliveries[0].OutboxState != heraldtype.OutboxPending || v.Deliveries[0].MessageID != store.MessageID(p.ID, heraldtype.ChannelSMS) {
					t.Fatalf("planned sends: %+v", v.Deliveries)
				}
				if v.Scope != "ward-3" {
					t.Fatalf("scope %q, want ward-3", v.Scope)
				}
				claimed, err := s.OutboxClaim(ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w", Limit: 10, Lease: time.Minute})
				if err != nil || len(claimed) != 2 || claimed[0].Kind != p.Kind || string(claimed[0].Params) != string(p.Params) ||
					claimed[0].Scope != "ward-3" || claimed[1].Scope != "ward-3" {
					t.Fatalf("claim: %v %+v", err, claimed)
				}
			})

			t.Run("RollbackLeavesNothing", func(t *testing.T) {
				t.Parallel()
				s, pool, _ := enqueueSetup(t)
				waitFor(t, 10*time.Second, "the listener is connected", s.listening.Load)
				drain(s.Wakeups().C(heraldtype.LaneTransactional))
				tx := begin(t, pool)
				p := in("booking-43:confirmed", nil)
				if res := createIn(t, tx, p); res.Outcome != store.Created {
					t.Fatalf("%+v, want Created", res)
				}
				if err := tx.Rollback(ctx); err != nil {
					t.Fatal(err)
				}
				if _, err := s.NotificationGet(ctx, p.Tenant, p.ID); !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("after rollback: %v", err)
				}
				if n, err := s.OutboxBacklog(ctx); err != nil || n[heraldtype.LaneTransactional] != 0 {
					t.Fatalf("backlog %v (%v) after rollback, want no transactional rows", n, err)
				}
				expectNoWake(t, s, pool, heraldtype.LaneTransactional, "by a rolled-back create")
			})

			t.Run("ScheduledSendWaitsForSendAt", func(t *testing.T) {
				t.Parallel()
				s, pool, _ := enqueueSetup(t)
				at := time.Now().Add(20 * time.Hour).UTC().Truncate(time.Microsecond)
				p := in("booking-42:reminder-d1", func(p *store.NotificationCreateParams) { p.SendAt = &at })
				tx := begin(t, pool)
				createIn(t, tx, p)
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				v, err := s.NotificationGet(ctx, p.Tenant, p.ID)
				if err != nil || v.SendAt == nil || !v.SendAt.Equal(at) || !v.Deliveries[0].AvailableAt.Equal(at) {
					t.Fatalf("%v %+v", err, v)
				}
				if n, err := s.OutboxBacklog(ctx); err != nil || n[heraldtype.LaneTransactional] != 0 {
					t.Fatalf("backlog %v (%v): a scheduled row is due", n, err)
				}
			})

			t.Run("TheSameDedupKeyAddsNothing", func(t *testing.T) {
				t.Parallel()
				_, pool, _ := enqueueSetup(t)
				first := in("booking-42:confirmed", nil)
				tx := begin(t, pool)
				createIn(t, tx, first)
				// Again in the same transaction…
				if res := createIn(t, tx, in(first.DedupKey, nil)); res.Outcome != store.Deduplicated || res.ID != first.ID {
					t.Fatalf("same transaction: %+v, want Deduplicated %s", res, first.ID)
				}
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				// …and in a later one.
				tx = begin(t, pool)
				if res := createIn(t, tx, in(first.DedupKey, nil)); res.Outcome != store.Deduplicated || res.ID != first.ID {
					t.Fatalf("later transaction: %+v, want Deduplicated %s", res, first.ID)
				}
				var n int
				if err := tx.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&n); err != nil || n != 2 {
					t.Fatalf("%d outbox rows (%v), want 2", n, err)
				}
				// Dedup keys are per tenant.
				other := in(first.DedupKey, func(p *store.NotificationCreateParams) { p.Tenant = "clinic-8" })
				if res := createIn(t, tx, other); res.Outcome != store.Created {
					t.Fatalf("another tenant: %+v", res)
				}
			})

			for _, commit := range []bool{true, false} {
				name := "AConcurrentHolderThatRollsBackLetsThisOneCreate"
				if commit {
					name = "AConcurrentHolderThatCommitsWins"
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					_, pool, app := enqueueSetup(t)
					holder := in("booking-44:confirmed", nil)
					tx1 := begin(t, pool)
					createIn(t, tx1, holder)
					type result struct {
						res store.NotificationCreateResult
						err error
					}
					done := make(chan result, 1)
					waiter := in(holder.DedupKey, nil)
					go func() {
						tx2, err := pool.Begin(ctx)
						if err != nil {
							done <- result{err: err}
							return
						}
						defer tx2.Rollback(ctx)
						res, err := CreateTx(ctx, tx2, waiter)
						if err == nil {
							err = tx2.Commit(ctx)
						}
						done <- result{res, err}
					}()
					// The second insert waits on the first one's row lock.
					waitFor(t, 10*time.Second, "the second transaction waits for the first", func() bool {
						var n int
						if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&n); err != nil {
							t.Fatal(err)
						}
						return n == 1
					})
					end := tx1.Rollback
					if commit {
						end = tx1.Commit
					}
					if err := end(ctx); err != nil {
						t.Fatal(err)
					}
					var r result
					select {
					case r = <-done:
					case <-time.After(10 * time.Second):
						t.Fatal("the second transaction did not finish within 10s of the first one ending")
					}
					switch {
					case r.err != nil:
						t.Fatal(r.err)
					case commit && (r.res.Outcome != store.Deduplicated || r.res.ID != holder.ID):
						t.Fatalf("%+v, want Deduplicated %s", r.res, holder.ID)
					case !commit && (r.res.Outcome != store.Created || r.res.ID != waiter.ID):
						t.Fatalf("%+v, want Created %s", r.res, waiter.ID)
					}
				})
			}
		})
	}

	t.Run("RefusesAnIdempotencyKey", func(t *testing.T) {
		t.Parallel()
		_, pool, _ := enqueueSetup(t)
		p := intent("d", func(p *store.NotificationCreateParams) { p.IdempotencyKey = "k" })
		if _, err := CreateTx(ctx, pool, p); err == nil {
			t.Fatal("an idempotency key was accepted")
		}
	})
}

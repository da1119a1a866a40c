package postgres

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/store"
)

// What the README promises of the runtime parameters in the URL's query.

func TestPoolMaxConnsDefaultsTo16AndComesFromTheURL(t *testing.T) {
	t.Parallel()
	url := testpg.Schema(t)
	for _, c := range []struct {
		name string
		url  string
		opts Options
		want int32
	}{
		{"Default", url, Options{}, 16},
		{"FromTheURL", testpg.WithParams(url, "pool_max_conns", "3"), Options{}, 3},
		{"OptionsWin", testpg.WithParams(url, "pool_max_conns", "3"), Options{MaxConns: 5}, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := setup(t, c.url, c.opts)
			if got := s.pool.Config().MaxConns; got != c.want {
				t.Fatalf("pool_max_conns %d, want %d", got, c.want)
			}
		})
	}
}

// TestApplicationNameNamesEverySession opens stores on a database of their
// own, so that every session pg_stat_activity shows there is theirs.
func TestApplicationNameNamesEverySession(t *testing.T) {
	t.Parallel()
	url := testpg.Database(t)
	for _, c := range []struct {
		name, url, want string
	}{
		{"DefaultsToHerald", url, "herald"},
		{"FromTheURL", appURL(url, "billing-herald"), "billing-herald"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := setup(t, c.url, Options{LeaderInterval: 50 * time.Millisecond})
			go s.RunLeaderElection(t.Context())
			waitFor(t, 10*time.Second, "the store leads", s.IsLeader)
			waitFor(t, 10*time.Second, "the listener is connected", s.listening.Load)
			var names []string
			waitFor(t, 10*time.Second, "the pool, listener and leader sessions are named "+c.want, func() bool {
				rows, err := s.pool.Query(context.Background(), `SELECT DISTINCT application_name FROM pg_stat_activity
WHERE datname = current_database() AND application_name LIKE $1 || '%' ORDER BY 1`, c.want)
				if err == nil {
					names, err = pgx.CollectRows(rows, pgx.RowTo[string])
				}
				if err != nil {
					t.Fatal(err)
				}
				return slices.Equal(names, []string{c.want, c.want + " leader", c.want + " listener"})
			})
			// Nothing of the store's goes unnamed.
			var unnamed int
			if err := s.pool.QueryRow(context.Background(),
				`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'
  AND application_name NOT LIKE 'herald%' AND application_name NOT LIKE 'billing-herald%'`).Scan(&unnamed); err != nil {
				t.Fatal(err)
			}
			if unnamed != 0 {
				t.Fatalf("%d sessions on the store's database carry another application_name", unnamed)
			}
		})
	}
}

func TestSearchPathPicksTheSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	urlA, urlB := testpg.Schema(t), testpg.Schema(t)
	a, b := setup(t, urlA, Options{}), setup(t, urlB, Options{})
	for _, s := range []*Store{a, b} {
		var schema string
		var tables int
		if err := s.pool.QueryRow(ctx, `SELECT current_schema(), (SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()
  AND tablename IN ('notifications', 'outbox', 'deliveries', 'idempotency_keys', 'schema_migrations'))`).Scan(&schema, &tables); err != nil {
			t.Fatal(err)
		}
		if tables != 5 {
			t.Fatalf("schema %s holds %d of herald's 5 tables", schema, tables)
		}
	}
	p := params(nil)
	mustCreate(t, a, p)
	if _, err := a.NotificationGet(ctx, p.Tenant, p.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.NotificationGet(ctx, p.Tenant, p.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a store on another schema reads the notification: %v", err)
	}
}

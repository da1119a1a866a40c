package herald_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/heraldhq/herald"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/internal/testapp"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/store/postgres"
	"github.com/heraldhq/herald/store/sqlite"
)

// clinic is the booking service of the tests: its own table in herald's
// PostgreSQL database, and a herald Client.
type clinic struct {
	t      *testing.T
	url    string
	pool   *pgxpool.Pool
	client *herald.Client
	at     time.Time // the appointment
}

func newClinic(t *testing.T) *clinic {
	t.Helper()
	url := testpg.Schema(t)
	// herald's schema first (herald migrate, or herald serve at start).
	if _, err := postgres.Migrate(context.Background(), url); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(context.Background(), `CREATE TABLE bookings (id text PRIMARY KEY, patient text NOT NULL, at timestamptz NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	client, err := herald.NewClient(herald.Options{KindsFile: clinicKindsFile})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	at := time.Date(now.Year(), now.Month(), now.Day()+3, 10, 30, 0, 0, time.UTC)
	return &clinic{t: t, url: url, pool: pool, client: client, at: at}
}

func clinicConfig(t *testing.T, url string) *config.Config {
	t.Helper()
	kinds, err := config.LoadKinds(clinicKindsFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{
		Database:     url,
		Providers:    []config.Provider{{Name: "sim", Type: "sim", Channel: "webhook"}},
		Kinds:        kinds,
		PollInterval: config.Duration(time.Hour), // only a wake-up can make it look
	}
	return cfg.WithDefaults()
}

// intents are a booking's confirmation and its two reminders.
func (c *clinic) intents(booking string) []herald.Intent {
	base := herald.Intent{Tenant: "clinic-7", Recipient: "patient-1", EventID: booking, Params: map[string]any{"at": c.at.Format("Jan 2 15:04")}}
	confirmation, dayBefore, sameMorning := base, base, base
	confirmation.Kind, confirmation.DedupKey = "booking.confirmed", booking+":confirmed"
	dayBefore.Kind, dayBefore.DedupKey, dayBefore.SendAt, dayBefore.ExpiresAt = "booking.reminder", booking+":reminder-d1", c.at.AddDate(0, 0, -1), c.at
	sameMorning.Kind, sameMorning.DedupKey, sameMorning.SendAt, sameMorning.ExpiresAt = "booking.reminder", booking+":reminder-d0", c.at.Add(-3*time.Hour), c.at
	return []herald.Intent{confirmation, dayBefore, sameMorning}
}

// confirm runs the booking step on a pgx transaction; commit decides its end.
func (c *clinic) confirm(booking string, commit bool) []herald.Enqueued {
	c.t.Helper()
	ctx := context.Background()
	var out []herald.Enqueued
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO bookings (id, patient, at) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING`,
			booking, "patient-1", c.at); err != nil {
			return err
		}
		for _, in := range c.intents(booking) {
			e, err := c.client.EnqueueTx(ctx, tx, in)
			if err != nil {
				return err
			}
			out = append(out, e)
		}
		if !commit {
			return errDeclined
		}
		return nil
	})
	if err != nil && !(errors.Is(err, errDeclined) && !commit) {
		c.t.Fatalf("confirm %s: %v", booking, err)
	}
	return out
}

var errDeclined = errors.New("declined")

// count returns how many rows of the clinic's and herald's tables belong to booking.
func (c *clinic) count(booking string) (bookings, notifications, outbox int) {
	c.t.Helper()
	err := c.pool.QueryRow(context.Background(), `SELECT
    (SELECT count(*) FROM bookings WHERE id = $1),
    (SELECT count(*) FROM notifications WHERE event_id = $1),
    (SELECT count(*) FROM outbox o JOIN notifications n ON n.id = o.notification_id WHERE n.event_id = $1)`, booking).
		Scan(&bookings, &notifications, &outbox)
	if err != nil {
		c.t.Fatal(err)
	}
	return
}

func created(es []herald.Enqueued) []bool {
	out := make([]bool, len(es))
	for i, e := range es {
		out[i] = e.Created
	}
	return out
}

// TestEnqueueInTransaction is the booking example on PostgreSQL: the
// booking and its three notifications commit together, a rollback leaves
// neither, a re-run adds nothing, and a real herald on the same database
// sends the confirmation (woken by the commit) and keeps the reminders
// SCHEDULED.
func TestEnqueueInTransaction(t *testing.T) {
	t.Parallel()
	c := newClinic(t)
	ctx := context.Background()

	first := c.confirm("booking-42", true)
	if got := created(first); len(got) != 3 || !got[0] || !got[1] || !got[2] {
		t.Fatalf("first confirmation: %+v, want three created", first)
	}
	if b, n, o := c.count("booking-42"); b != 1 || n != 3 || o != 3 {
		t.Fatalf("after commit: %d bookings, %d notifications, %d outbox rows; want 1, 3, 3", b, n, o)
	}

	t.Run("ConfirmingAgainAddsNothing", func(t *testing.T) {
		again := c.confirm("booking-42", true)
		for i := range again {
			if again[i].Created || again[i].ID != first[i].ID {
				t.Fatalf("%d: %+v, want the existing %s", i, again[i], first[i].ID)
			}
		}
		if b, n, o := c.count("booking-42"); b != 1 || n != 3 || o != 3 {
			t.Fatalf("%d bookings, %d notifications, %d outbox rows; want 1, 3, 3", b, n, o)
		}
	})

	t.Run("RollbackLeavesNeither", func(t *testing.T) {
		c.confirm("booking-43", false)
		if b, n, o := c.count("booking-43"); b != 0 || n != 0 || o != 0 {
			t.Fatalf("%d bookings, %d notifications, %d outbox rows; want none", b, n, o)
		}
	})

	t.Run("DatabaseSQLTransaction", func(t *testing.T) {
		db, err := sql.Open("pgx", c.url)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		for _, commit := range []bool{false, true, true} {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO bookings (id, patient, at) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING`,
				"booking-44", "patient-2", c.at); err != nil {
				t.Fatal(err)
			}
			var es []herald.Enqueued
			for _, in := range c.intents("booking-44") {
				e, err := c.client.EnqueueSQLTx(ctx, tx, in)
				if err != nil {
					t.Fatal(err)
				}
				es = append(es, e)
			}
			if !commit {
				if err := tx.Rollback(); err != nil {
					t.Fatal(err)
				}
				if b, n, o := c.count("booking-44"); b != 0 || n != 0 || o != 0 {
					t.Fatalf("after rollback: %d bookings, %d notifications, %d outbox rows", b, n, o)
				}
				continue
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			if b, n, o := c.count("booking-44"); b != 1 || n != 3 || o != 3 {
				t.Fatalf("after commit: %d bookings, %d notifications, %d outbox rows (%+v)", b, n, o, es)
			}
		}
	})

	t.Run("OwnTransaction", func(t *testing.T) {
		in := c.intents("booking-45")[0]
		e1, err := c.client.Enqueue(ctx, c.pool, in)
		if err != nil || !e1.Created {
			t.Fatalf("%+v %v", e1, err)
		}
		e2, err := c.client.Enqueue(ctx, c.pool, in)
		if err != nil || e2.Created || e2.ID != e1.ID {
			t.Fatalf("again: %+v %v, want %s not created", e2, err, e1.ID)
		}
	})

	// Get reads a notification back as the read API shows it: in the
	// transaction that enqueued it before it commits, nowhere else until
	// then, and not at all after a rollback; another tenant's is not found.
	t.Run("GetReadsItBack", func(t *testing.T) {
		tx, err := c.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		e, err := c.client.EnqueueTx(ctx, tx, c.intents("booking-49")[1])
		if err != nil {
			t.Fatal(err)
		}
		n, err := c.client.Get(ctx, tx, "clinic-7", e.ID)
		if err != nil || n.ID != e.ID || n.Kind != "booking.reminder" || len(n.Deliveries) == 0 || n.Deliveries[0].State != "SCHEDULED" {
			t.Fatalf("in its transaction: %+v, %v; want it SCHEDULED", n, err)
		}
		if _, err := c.client.Get(ctx, c.pool, "clinic-7", e.ID); !errors.Is(err, herald.ErrNotFound) {
			t.Fatalf("outside it before the commit: %v, want ErrNotFound", err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := c.client.Get(ctx, c.pool, "clinic-7", e.ID); !errors.Is(err, herald.ErrNotFound) {
			t.Fatalf("after the rollback: %v, want ErrNotFound", err)
		}
		if _, err := c.client.Get(ctx, c.pool, "clinic-8", first[0].ID); !errors.Is(err, herald.ErrNotFound) {
			t.Fatalf("another tenant's: %v, want ErrNotFound", err)
		}
	})

	// An intent's scope is kept on the notification and its outbox rows,
	// where the claim shares the tenant's turns between its scopes.
	t.Run("AScopeIsKept", func(t *testing.T) {
		in := c.intents("booking-48")[0]
		in.Scope = "ward-3"
		e, err := c.client.Enqueue(ctx, c.pool, in)
		if err != nil || !e.Created {
			t.Fatalf("%+v %v", e, err)
		}
		var n, o string
		if err := c.pool.QueryRow(ctx, `SELECT n.scope, min(o.scope) FROM notifications n JOIN outbox o ON o.notification_id = n.id
WHERE n.id = $1 GROUP BY n.scope`, e.ID).Scan(&n, &o); err != nil || n != "ward-3" || o != "ward-3" {
			t.Fatalf("notification scope %q, outbox %q (%v); want ward-3", n, o, err)
		}
	})

	t.Run("AnInvalidIntentWritesNothingAndLeavesTheTransactionUsable", func(t *testing.T) {
		tx, err := c.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		before := tableRows(t, tx)
		for _, table := range []string{"notifications", "outbox", "idempotency_keys", "deliveries", "delivery_attempts", "profiles", "bookings"} {
			if _, ok := before[table]; !ok {
				t.Fatalf("no table %s among %v: the count below would check nothing", table, before)
			}
		}
		for _, tc := range []struct {
			name, param string
			mutate      func(in *herald.Intent)
		}{
			{"MissingParam", "params.at", func(in *herald.Intent) { in.Params = map[string]any{"when": "soon"} }},
			{"UnknownKind", "kind", func(in *herald.Intent) { in.Kind = "booking.cancelled" }},
			{"NoDedupKey", "dedup_key", func(in *herald.Intent) { in.DedupKey = "" }},
			{"TenantWithSpacesAround", "tenant", func(in *herald.Intent) { in.Tenant = " " + in.Tenant + " " }},
			{"NoRecipient", "recipient", func(in *herald.Intent) { in.Recipient = "" }},
			{"ExpiresBeforeItIsSent", "expires_at", func(in *herald.Intent) { in.ExpiresAt = in.SendAt.Add(-time.Minute) }},
			// PostgreSQL's jsonb refuses \u0000: the caller's transaction
			// would abort (issue 13).
			{"ParamWithNUL", "params", func(in *herald.Intent) { in.Params["at"] = "10:00\x00" }},
			{"ScopeWithASpace", "scope", func(in *herald.Intent) { in.Scope = "ward 3" }},
		} {
			in := c.intents("booking-46")[1]
			tc.mutate(&in)
			_, err := c.client.EnqueueTx(ctx, tx, in)
			var invalid *herald.InvalidIntentError
			if !errors.As(err, &invalid) || invalid.Param != tc.param {
				t.Errorf("%s: %v, want an invalid %s", tc.name, err, tc.param)
			}
		}
		// Counted inside tx, which sees its own writes: nothing may have
		// been written to any table, herald's or the clinic's.
		if after := tableRows(t, tx); !maps.Equal(after, before) {
			t.Fatalf("invalid intents wrote rows: before %v, after %v", before, after)
		}
		if _, err := c.client.EnqueueTx(ctx, tx, c.intents("booking-46")[0]); err != nil {
			t.Fatalf("the transaction is no longer usable: %v", err)
		}
	})

	t.Run("HeraldSendsTheConfirmationAndSchedulesTheReminders", func(t *testing.T) {
		name := "herald_app_" + strings.ToLower(strings.TrimPrefix(first[0].ID, "ntf_"))
		h, _ := testapp.Start(t, clinicConfig(t, testpg.WithParams(c.url, "application_name", name)))
		// Read back through the library, as the application would.
		state := func(id string) string {
			n, err := c.client.Get(ctx, c.pool, "clinic-7", id)
			if err != nil {
				return err.Error()
			}
			return n.Deliveries[0].State
		}
		waitState := func(id, want string) {
			t.Helper()
			deadline := time.Now().Add(30 * time.Second)
			for state(id) != want {
				if time.Now().After(deadline) {
					t.Fatalf("%s is still %s after 30 s, want %s", id, state(id), want)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		// Committed before herald started: found by its first claim.
		waitState(first[0].ID, "PROVIDER_ACCEPTED")
		for _, r := range first[1:] {
			if got := state(r.ID); got != "SCHEDULED" {
				t.Errorf("reminder %s is %s, want SCHEDULED", r.ID, got)
			}
		}
		// Committed while herald runs, with a poll interval of an hour:
		// only the NOTIFY the commit delivered can make herald send it.
		waitListening(t, name+" listener")
		later := c.confirm("booking-47", true)
		waitState(later[0].ID, "PROVIDER_ACCEPTED")
		if n := h.Sim("sim").Total(); n < 2 || len(h.Sim("sim").Duplicates()) > 0 {
			t.Fatalf("%d provider calls, duplicates %v", n, h.Sim("sim").Duplicates())
		}
	})
}

// tableRows counts the rows of every table in q's schema (the first on its
// search_path), as q sees them.
func tableRows(t *testing.T, q pgx.Tx) map[string]int {
	t.Helper()
	ctx := context.Background()
	rows, err := q.Query(ctx, `SELECT table_name FROM information_schema.tables
WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name`)
	if err != nil {
		t.Fatalf("list tables: %v", err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("list tables: %v", err)
	}
	counts := make(map[string]int, len(tables))
	for _, table := range tables {
		var n int
		if err := q.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{table}.Sanitize()).Scan(&n); err != nil {
			t.Fatalf("count %s: %v", table, err)
		}
		counts[table] = n
	}
	return counts
}

// waitListening waits until the session named name has run its LISTEN
// (herald's wake-up listener).
func waitListening(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testpg.BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	testenv.WaitFor(t, fmt.Sprintf("%q to LISTEN", name), 30*time.Second, func() bool {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND state = 'idle' AND query LIKE 'LISTEN %'`, name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
}

// TestEnqueueThrottlesItsWakeUps: a client sends a lane's wake-up NOTIFY
// at most once per WakeEvery (PostgreSQL serialises the commits of
// notifying transactions), and a scheduled notification takes no turn from
// a due one.
func TestEnqueueThrottlesItsWakeUps(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		every time.Duration
		want  int
	}{{"OncePerWindow", time.Hour, 1}, {"EveryEnqueue", -1, 3}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newClinic(t)
			ctx := context.Background()
			client, err := herald.NewClient(herald.Options{KindsFile: clinicKindsFile, WakeEvery: tc.every})
			if err != nil {
				t.Fatal(err)
			}
			// A notification already enqueued (by another client, before
			// the listener), whose enqueue again writes nothing: the
			// duplicate sends no wake-up, so it must not use up the turn.
			dup := c.intents("booking-89")[0]
			if _, err := client.Enqueue(ctx, c.pool, dup); err != nil {
				t.Fatal(err)
			}
			client, err = herald.NewClient(herald.Options{KindsFile: clinicKindsFile, WakeEvery: tc.every})
			if err != nil {
				t.Fatal(err)
			}
			listener, err := pgx.Connect(ctx, c.url)
			if err != nil {
				t.Fatal(err)
			}
			defer listener.Close(ctx)
			var channel string
			if err := listener.QueryRow(ctx, `SELECT 'herald_wake_' || left(md5(current_database() || '.' || current_schema()), 8) || '_transactional'`).Scan(&channel); err != nil {
				t.Fatal(err)
			}
			if _, err := listener.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
				t.Fatal(err)
			}
			if res, err := client.Enqueue(ctx, c.pool, dup); err != nil || res.Created {
				t.Fatalf("the duplicate: %+v, %v; want it deduplicated", res, err)
			}
			// A scheduled reminder next: it must not use up the turn either.
			reminder := c.intents("booking-90")[1]
			if _, err := client.Enqueue(ctx, c.pool, reminder); err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				in := c.intents(fmt.Sprintf("booking-9%d", i+1))[0]
				if _, err := client.Enqueue(ctx, c.pool, in); err != nil {
					t.Fatal(err)
				}
			}
			// A marker NOTIFY after them: every wake-up the enqueues sent
			// arrives before it.
			if _, err := c.pool.Exec(ctx, `SELECT pg_notify($1, 'end')`, channel); err != nil {
				t.Fatal(err)
			}
			got := 0
			for {
				wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				n, err := listener.WaitForNotification(wctx)
				cancel()
				if err != nil {
					t.Fatalf("after %d wake-ups: %v", got, err)
				}
				if n.Payload == "end" {
					break
				}
				got++
			}
			if got != tc.want {
				t.Fatalf("%d wake-ups for three due enqueues, want %d", got, tc.want)
			}
		})
	}
}

// noDatabase refuses to begin a transaction: an intent that gets that far
// passed the Client's checks.
type noDatabase struct{}

func (noDatabase) Begin(context.Context) (pgx.Tx, error) { return nil, errors.New("no database here") }

// A Client holds an intent to the caps the server runs with (its
// config's limits and send_at_horizon, given in Options), refusing with an
// *InvalidIntentError what intake would refuse with 422 rather than let
// the sender park it; params past intake's 64 KiB body are refused too,
// and a missing param is named as intake's missing_params names it.
func TestClientHoldsAnIntentToTheServersLimits(t *testing.T) {
	t.Parallel()
	kinds := []config.Kind{{Name: "note", Category: "transactional", Channels: []string{"webhook"},
		Templates: map[string]config.Template{"webhook": {Title: "Note", Body: "{{.text}}"}}}}
	strict, err := herald.NewClient(herald.Options{Kinds: kinds, SendAtHorizon: time.Hour,
		Limits: herald.Limits{ParamsMax: 4, ParamsDepthMax: 2, RenderedMaxBytes: 40}})
	if err != nil {
		t.Fatal(err)
	}
	loose, err := herald.NewClient(herald.Options{Kinds: kinds})
	if err != nil {
		t.Fatal(err)
	}
	intent := func(mutate func(*herald.Intent)) herald.Intent {
		in := herald.Intent{Tenant: "t", Recipient: "r", EventID: "e", Kind: "note", DedupKey: "d", Params: map[string]any{"text": "hi"}}
		mutate(&in)
		return in
	}
	for _, tc := range []struct {
		name, param, detail string
		in                  herald.Intent
		looseToo            bool // past herald's defaults as well
	}{
		{"TooManyParams", "params", "5 values", intent(func(in *herald.Intent) { in.Params["a"], in.Params["b"], in.Params["c"], in.Params["d"] = 1, 2, 3, 4 }), false},
		{"NestedTooDeep", "params", "3 deep", intent(func(in *herald.Intent) { in.Params["a"] = map[string]any{"b": map[string]any{"c": 1}} }), false},
		{"RenderedTooLong", "params", "longer", intent(func(in *herald.Intent) { in.Params["text"] = strings.Repeat("x", 41) }), false},
		{"SentPastTheHorizon", "send_at", "send_at", intent(func(in *herald.Intent) { in.SendAt = time.Now().Add(2 * time.Hour) }), false},
		{"ParamsPastIntakesBody", "params", "bytes", intent(func(in *herald.Intent) { in.Params["pad"] = strings.Repeat("x", 64<<10) }), true},
	} {
		for _, c := range []struct {
			client *herald.Client
			refuse bool
		}{{strict, true}, {loose, tc.looseToo}} {
			_, err := c.client.Enqueue(context.Background(), noDatabase{}, tc.in)
			var invalid *herald.InvalidIntentError
			switch refused := errors.As(err, &invalid); {
			case c.refuse && (!refused || invalid.Param != tc.param || !strings.Contains(invalid.Detail, tc.detail)):
				t.Errorf("%s: %v; want an invalid %s saying %q", tc.name, err, tc.param, tc.detail)
			case !c.refuse && refused:
				t.Errorf("%s with herald's defaults: %v; want it accepted", tc.name, err)
			}
		}
	}
	_, err = loose.Enqueue(context.Background(), noDatabase{}, intent(func(in *herald.Intent) { in.Params = nil }))
	var invalid *herald.InvalidIntentError
	if !errors.As(err, &invalid) || !slices.Equal(invalid.MissingParams, []string{"text"}) {
		t.Fatalf("no params: %v (%+v); want MissingParams [text]", err, invalid)
	}
	if _, err := herald.NewClient(herald.Options{Kinds: kinds, Limits: herald.Limits{ParamsMax: -1}}); err == nil {
		t.Fatal("a negative limit was accepted")
	}
}

// Params holding a string that is not UTF-8 are refused, naming where, as
// intake refuses such a body: encoding/json would store it as U+FFFD.
func TestAnIntentsParamsMustBeUTF8(t *testing.T) {
	t.Parallel()
	kinds := []config.Kind{{Name: "note", Category: "transactional", Channels: []string{"webhook"},
		Templates: map[string]config.Template{"webhook": {Title: "Note", Body: "{{.text}}"}}}}
	client, err := herald.NewClient(herald.Options{Kinds: kinds})
	if err != nil {
		t.Fatal(err)
	}
	bad := "\xff"
	for _, c := range []struct {
		want   string
		params map[string]any
	}{
		{"params.text", map[string]any{"text": "caf\xe9"}},
		{"params.text", map[string]any{"text": &bad}},
		{"params.items[1].name", map[string]any{"text": "ok", "items": []any{map[string]any{"name": "a"}, map[string]any{"name": "\xb1\xe8"}}}},
		{"params.tags[0]", map[string]any{"text": "ok", "tags": []string{"\xff"}}},
		{"params.shop (a key)", map[string]any{"text": "ok", "shop": map[string]string{"\xffk": "x"}}},
		{"params.who.Name", map[string]any{"text": "ok", "who": struct{ Name string }{"\xff"}}},
		{"params.raw", map[string]any{"text": "ok", "raw": json.RawMessage("\"\xff\"")}},
	} {
		in := herald.Intent{Tenant: "t", Recipient: "r", EventID: "e", Kind: "note", DedupKey: "d", Params: c.params}
		_, err := client.Enqueue(context.Background(), noDatabase{}, in)
		var invalid *herald.InvalidIntentError
		if !errors.As(err, &invalid) || invalid.Param != c.want || !strings.Contains(invalid.Detail, "not valid UTF-8") {
			t.Errorf("params %q: %v; want an invalid intent at %s", c.params, err, c.want)
		}
	}
	// Valid text, bytes (base64 in JSON), numbers, a value that marshals
	// itself and a struct's unexported field pass the check.
	in := herald.Intent{Tenant: "t", Recipient: "r", EventID: "e", Kind: "note", DedupKey: "d",
		Params: map[string]any{"text": "카페", "raw": []byte{0xff}, "n": 1, "at": time.Now(), "s": struct{ n string }{"\xff"}}}
	if _, err := client.Enqueue(context.Background(), noDatabase{}, in); err == nil || !strings.Contains(err.Error(), "no database here") {
		t.Fatalf("valid params: %v; want them past the checks", err)
	}
	// Params that refer to themselves, twice over, are refused as JSON
	// cannot hold them: the check neither loops nor walks every path.
	self := map[string]any{"text": "ok"}
	self["a"], self["b"] = self, self
	list := []any{nil, nil}
	list[0], list[1] = list, list
	for name, params := range map[string]map[string]any{"a map": self, "a slice": {"text": "ok", "l": list}} {
		in.Params = params
		_, err := client.Enqueue(context.Background(), noDatabase{}, in)
		var invalid *herald.InvalidIntentError
		if !errors.As(err, &invalid) || invalid.Param != "params" || !strings.Contains(invalid.Detail, "cannot be stored as JSON") {
			t.Errorf("%s holding itself: %v; want it refused as JSON cannot hold it", name, err)
		}
	}
}

// An enqueue given no transaction or database (nil, or a pool never
// opened) returns ErrNoTransaction rather than panicking; one on a
// database herald's tables are not in returns ErrNotMigrated, with the
// database's own error still there. Nothing is written either way.
func TestAnEnqueueWithoutItsDatabaseSaysWhy(t *testing.T) {
	t.Parallel()
	client, err := herald.NewClient(herald.Options{KindsFile: clinicKindsFile})
	if err != nil {
		t.Fatal(err)
	}
	in := herald.Intent{Tenant: "clinic-7", Recipient: "patient-1", EventID: "b1", Kind: "booking.confirmed", DedupKey: "b1:confirmed",
		Params: map[string]any{"at": "Jan 2 10:30"}}
	ctx := context.Background()
	for name, enqueue := range map[string]func() error{
		"Enqueue(nil)":         func() error { _, err := client.Enqueue(ctx, nil, in); return err },
		"Enqueue(nil pool)":    func() error { _, err := client.Enqueue(ctx, (*pgxpool.Pool)(nil), in); return err },
		"Enqueue(nil conn)":    func() error { _, err := client.Enqueue(ctx, (*pgx.Conn)(nil), in); return err },
		"EnqueueTx(nil)":       func() error { _, err := client.EnqueueTx(ctx, nil, in); return err },
		"EnqueueSQLTx(nil)":    func() error { _, err := client.EnqueueSQLTx(ctx, nil, in); return err },
		"EnqueueSQLiteTx(nil)": func() error { _, err := client.EnqueueSQLiteTx(ctx, nil, in); return err },
	} {
		if err := enqueue(); !errors.Is(err, herald.ErrNoTransaction) {
			t.Errorf("%s = %v; want ErrNoTransaction", name, err)
		}
	}

	// An SQLite file herald never migrated.
	db, err := sql.Open("sqlite", sqlite.DSN(filepath.Join(t.TempDir(), "not-herald.db")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := client.EnqueueSQLiteTx(ctx, tx, in); !errors.Is(err, herald.ErrNotMigrated) || !strings.Contains(err.Error(), "no such table") {
		t.Fatalf("an enqueue into an SQLite file herald never migrated = %v; want ErrNotMigrated with SQLite's words", err)
	}

	url := testpg.Schema(t) // not migrated
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	_, err = client.Enqueue(ctx, pool, in)
	var pg *pgconn.PgError
	if !errors.Is(err, herald.ErrNotMigrated) || !errors.As(err, &pg) || pg.Code != "42P01" {
		t.Fatalf("an enqueue before herald migrate = %v; want ErrNotMigrated with the database's 42P01", err)
	}
	if errors.Is(err, herald.ErrUnavailable) {
		t.Fatalf("a statement refused on a live connection is ErrUnavailable: %v", err)
	}
	if _, err := client.Get(ctx, pool, "clinic-7", "ntf_x"); !errors.Is(err, herald.ErrNotMigrated) {
		t.Fatalf("a Get before herald migrate = %v; want ErrNotMigrated", err)
	}
	if _, err := client.Get(ctx, nil, "clinic-7", "ntf_x"); !errors.Is(err, herald.ErrNoTransaction) {
		t.Fatalf("a Get with no database = %v; want ErrNoTransaction", err)
	}
	// An application's own table of one of herald's names, first on the
	// search_path: not herald's tables, so ErrNotMigrated (with the
	// database's 42703), not a write into the application's table.
	if _, err := pool.Exec(ctx, `CREATE TABLE notifications (id text PRIMARY KEY, customer text, body text)`); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Enqueue(ctx, pool, in); !errors.Is(err, herald.ErrNotMigrated) || !errors.As(err, &pg) || pg.Code != "42703" {
		t.Fatalf("an enqueue beside the application's own notifications table = %v; want ErrNotMigrated with the database's 42703", err)
	}
	// A nil Client, or one not made by NewClient: an error, not a panic.
	for name, c := range map[string]*herald.Client{"nil": nil, "zero": {}} {
		if _, err := c.Enqueue(ctx, pool, in); !errors.Is(err, herald.ErrNoClient) {
			t.Errorf("Enqueue on a %s Client = %v; want ErrNoClient", name, err)
		}
		if _, err := c.Get(ctx, pool, "clinic-7", "ntf_x"); !errors.Is(err, herald.ErrNoClient) {
			t.Errorf("Get on a %s Client = %v; want ErrNoClient", name, err)
		}
	}

	// A server nobody answers at: ErrUnavailable, the driver's error
	// beside it; a context of the caller's that ended is that, not this.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	down, err := pgxpool.New(ctx, "postgres://postgres@"+addr+"/x?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(down.Close)
	_, err = client.Enqueue(ctx, down, in)
	var connect *pgconn.ConnectError
	if !errors.Is(err, herald.ErrUnavailable) || !errors.As(err, &connect) {
		t.Fatalf("an enqueue to a server that is down = %v; want ErrUnavailable with the driver's ConnectError", err)
	}
	if _, err := client.Get(ctx, down, "clinic-7", "ntf_x"); !errors.Is(err, herald.ErrUnavailable) {
		t.Fatalf("a Get from a server that is down = %v; want ErrUnavailable", err)
	}
	// A server that takes the connection and never answers: pgx's own
	// connect timeout, a deadline of its own context, is the outage.
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mute.Close() })
	go func() {
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	silent, err := pgxpool.New(ctx, "postgres://postgres@"+mute.Addr().String()+"/x?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(silent.Close)
	if _, err := client.Enqueue(ctx, silent, in); !errors.Is(err, herald.ErrUnavailable) {
		t.Fatalf("an enqueue to a server that never answers = %v; want ErrUnavailable", err)
	}
	// A connection still busy with the caller's unread rows is the
	// caller's to fix, not an outage to retry.
	tx2, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx2.Rollback(ctx)
	rows, err := tx2.Query(ctx, "SELECT generate_series(1, 3)")
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.EnqueueTx(ctx, tx2, in)
	rows.Close()
	if err == nil || errors.Is(err, herald.ErrUnavailable) {
		t.Fatalf("an enqueue on a connection busy with unread rows = %v; want an error that is not ErrUnavailable", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := client.Enqueue(cancelled, pool, in); !errors.Is(err, context.Canceled) || errors.Is(err, herald.ErrUnavailable) {
		t.Fatalf("an enqueue with a cancelled context = %v; want context.Canceled, not ErrUnavailable", err)
	}
}

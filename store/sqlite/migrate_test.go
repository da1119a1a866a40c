package sqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/sqlite"
	"github.com/heraldhq/herald/store/storetest"
)

// TestMigrateAtOnceOnANewFile: two processes that migrate one new file at
// once both succeed (each sql.DB is its own SQLite client, as a process is).
// Without setWAL one round in about twenty failed with SQLITE_BUSY (the two
// switched the new file to WAL at once, a deadlock the busy handler is not
// called for); 150 rounds miss that with a chance below 1 in 1,000.
func TestMigrateAtOnceOnANewFile(t *testing.T) {
	t.Parallel()
	if testenv.WithoutRace(t) {
		return
	}
	latest := latestVersion(t)
	const rounds, n = 150, 2
	for round := range rounds {
		path := filepath.Join(t.TempDir(), "herald.db")
		versions, errs := make([]int, n), make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				versions[i], errs[i] = sqlite.Migrate(context.Background(), path)
			})
		}
		close(start)
		wg.Wait()
		for i := range n {
			if errs[i] != nil || versions[i] != latest {
				t.Fatalf("round %d, Migrate %d of %d at once: version %d, %v; want %d", round+1, i+1, n, versions[i], errs[i], latest)
			}
		}
	}
}

// TestOpenMustExist: with MustExist, Open neither creates a file nor
// migrates one; it opens a file at this build's version.
func TestOpenMustExist(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	open := func(path string) error {
		s, err := sqlite.Open(ctx, path, sqlite.Options{MustExist: true})
		if err == nil {
			err = errors.Join(s.Ping(ctx), s.Close())
		}
		return err
	}
	t.Run("MissingFileIsNotCreated", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "herald.db")
		if err := open(path); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Open(MustExist) of a missing file: %v, want fs.ErrNotExist", err)
		}
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Open(MustExist) created %s (stat: %v)", path, err)
		}
	})
	t.Run("EmptyFileIsNotMigrated", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "herald.db")
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := open(path); !errors.Is(err, sqlite.ErrNotMigrated) {
			t.Fatalf("Open(MustExist) of an empty file: %v, want ErrNotMigrated", err)
		}
		if n := queryInt(t, path, `SELECT count(*) FROM sqlite_master`); n != 0 {
			t.Fatalf("Open(MustExist) created %d objects in the empty file", n)
		}
	})
	t.Run("OlderSchemaIsNotMigrated", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "herald.db")
		if _, err := sqlite.Migrate(ctx, path); err != nil {
			t.Fatal(err)
		}
		exec(t, path, `DELETE FROM schema_migrations WHERE version = (SELECT max(version) FROM schema_migrations)`)
		const version = `SELECT coalesce(max(version), 0) FROM schema_migrations`
		behind := queryInt(t, path, version)
		if err := open(path); !errors.Is(err, sqlite.ErrNotMigrated) {
			t.Fatalf("Open(MustExist) of a file one version behind: %v, want ErrNotMigrated", err)
		}
		if v := queryInt(t, path, version); v != behind {
			t.Fatalf("Open(MustExist) moved the file to version %d, want it left at %d", v, behind)
		}
	})
	t.Run("MigratedFileOpens", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "herald.db")
		if _, err := sqlite.Migrate(ctx, path); err != nil {
			t.Fatal(err)
		}
		if err := open(path); err != nil {
			t.Fatalf("Open(MustExist) of a migrated file: %v", err)
		}
	})
}

// latestVersion is the highest version among the migration files.
func latestVersion(t *testing.T) int {
	t.Helper()
	names, err := filepath.Glob(filepath.Join("migrations", "*.sql"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no migrations found (%v)", err)
	}
	var v int
	if _, err := fmt.Sscanf(filepath.Base(names[len(names)-1]), "%d_", &v); err != nil {
		t.Fatalf("migration %s: %v", names[len(names)-1], err)
	}
	return v
}

func exec(t *testing.T, path, query string) {
	t.Helper()
	db, err := sql.Open("sqlite", sqlite.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// queryInt reads one integer from the file at path, opened read-only.
func queryInt(t *testing.T, path, query string) int {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// TestMigration27StartsTheCampaignCountsFromTheSends: a file from before
// migration 27, whose campaign counts were counted from the sends when
// read, starts the kept counts from what its sends' rows give, and keeps
// them from there.
func TestMigration27StartsTheCampaignCountsFromTheSends(t *testing.T) {
	t.Parallel()
	if testenv.WithoutRace(t) {
		return
	}
	ctx := context.Background()
	var c storetest.CampaignCountsBeforeMigration
	path := fileBeforeMigration(t, func(s *sqlite.Store) { c = storetest.MakeCampaignCounts(t, s, time.Now()) }, `DROP TABLE campaign_counts;
DROP TRIGGER campaign_count_delivery_insert;
DROP TRIGGER campaign_count_delivery_update;
DROP TRIGGER campaign_count_outbox_update;
DROP TRIGGER campaign_count_outbox_insert;
DROP TABLE campaign_count_pause;
DELETE FROM schema_migrations WHERE version IN (27, 32);`)
	if _, err := sqlite.Migrate(ctx, path); err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.CheckCampaignCountsMigrated(t, s, c, time.Now())
}

// TestMigration28GivesDraftsMadeBeforeItAWeek: a draft made before drafts
// expired was promised no deadline; migration 28 gives it a full default
// TTL from the migration, and leaves campaigns past DRAFT without one.
func TestMigration28GivesDraftsMadeBeforeItAWeek(t *testing.T) {
	t.Parallel()
	if testenv.WithoutRace(t) {
		return
	}
	ctx := context.Background()
	path := fileBeforeMigration(t, func(s *sqlite.Store) {
		for _, id := range []string{"cmp_draft", "cmp_started"} {
			if _, err := s.CampaignCreate(ctx, store.CampaignCreateParams{ID: id, Tenant: "t1", IdempotencyKey: id, RequestHash: "h", Kind: "k",
				Lane: heraldtype.LaneMarketing, Channels: []heraldtype.Channel{heraldtype.ChannelWebhook}}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.CampaignStart(ctx, "t1", "cmp_started"); err != nil {
			t.Fatal(err)
		}
	}, `DROP INDEX campaigns_draft;
DROP TRIGGER campaigns_draft_deadline;
ALTER TABLE campaigns DROP COLUMN draft_expires_at;
ALTER TABLE campaigns DROP COLUMN ended_reason;
DELETE FROM schema_migrations WHERE version = 28;`)
	before := time.Now()
	if _, err := sqlite.Migrate(ctx, path); err != nil {
		t.Fatal(err)
	}
	week := (7 * 24 * time.Hour).Milliseconds()
	if n := queryInt(t, path, fmt.Sprintf(`SELECT count(*) FROM campaigns WHERE id = 'cmp_draft' AND draft_expires_at BETWEEN %d AND %d`,
		before.UnixMilli()+week, time.Now().UnixMilli()+week)); n != 1 {
		t.Fatal("the draft made before migration 28 has no deadline a week from the migration")
	}
	if n := queryInt(t, path, `SELECT count(*) FROM campaigns WHERE id = 'cmp_started' AND draft_expires_at IS NULL`); n != 1 {
		t.Fatal("a started campaign got a draft's deadline from migration 28")
	}
	// A draft an older herald creates beside the migrated file (it does not
	// write the deadline) gets the default TTL from its creation.
	exec(t, path, `INSERT INTO campaigns (id, tenant, kind, lane, channels, params, state, idempotency_key, request_hash, created_at)
VALUES ('cmp_old_build', 't1', 'k', 'marketing', '[]', '{}', 'DRAFT', 'cmp_old_build', 'h', 1000)`)
	if n := queryInt(t, path, fmt.Sprintf(`SELECT count(*) FROM campaigns WHERE id = 'cmp_old_build' AND draft_expires_at = %d`, 1000+week)); n != 1 {
		t.Fatal("a draft written without its deadline did not get the default TTL from its creation")
	}
}

// fileBeforeMigration makes a migrated file, writes what fill writes
// through a store on it, and takes it back with undo to the schema before
// a migration, its rows kept; it returns the file's path.
func fileBeforeMigration(t *testing.T, fill func(s *sqlite.Store), undo string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "herald.db")
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fill(s)
	s.Close()
	exec(t, path, undo)
	return path
}

// TestMigration29ScopesWhatWasThereNone: a file from before scopes, with
// PENDING rows in it, migrates to rows of no scope, claimed as before, on
// outbox_fair rebuilt with the scope; a row an older herald writes (it
// names no scope) gets none.
func TestMigration29ScopesWhatWasThereNone(t *testing.T) {
	t.Parallel()
	if testenv.WithoutRace(t) {
		return
	}
	ctx := context.Background()
	oldRow := func(id string) string {
		return `INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at)
VALUES ('` + id + `', 't1', 'r', 'e', 'k', 'transactional', '{}', 1000);
INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, created_at, updated_at)
VALUES ('` + id + `', '` + id + `.webhook', 't1', 'transactional', 'webhook', 'PENDING', 1000, 1000, 1000);`
	}
	path := fileBeforeMigration(t, func(*sqlite.Store) {}, undo30+`DROP INDEX outbox_fair;
CREATE INDEX outbox_fair ON outbox (lane, tenant, available_at, id) WHERE state = 'PENDING';
ALTER TABLE notifications DROP COLUMN scope;
ALTER TABLE outbox DROP COLUMN scope;
ALTER TABLE campaigns DROP COLUMN scope;
DELETE FROM schema_migrations WHERE version = 29;
`+oldRow("n1"))
	if _, err := sqlite.Migrate(ctx, path); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, path, `SELECT count(*) FROM sqlite_master WHERE name = 'outbox_fair' AND sql LIKE '%(lane, tenant, scope, available_at, id)%'`); n != 1 {
		t.Fatal("outbox_fair is not (lane, tenant, scope, available_at, id) after migration 29")
	}
	exec(t, path, oldRow("n2"))
	if n := queryInt(t, path, `SELECT count(*) FROM notifications n JOIN outbox o ON o.notification_id = n.id WHERE n.scope = '' AND o.scope = ''`); n != 2 {
		t.Fatalf("%d of 2 rows have no scope after migration 29", n)
	}
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rows, err := s.OutboxClaim(ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w", Limit: 10, Lease: time.Minute})
	if err != nil || len(rows) != 2 {
		t.Fatalf("claim after migration 29: %d rows, %v; want both", len(rows), err)
	}
}

// undo30 takes a file back to the schema before migration 30, its rows
// kept.
const undo30 = `DROP INDEX outbox_deferred;
DROP INDEX outbox_fair;
CREATE INDEX outbox_fair ON outbox (lane, tenant, scope, available_at, id) WHERE state = 'PENDING';
ALTER TABLE outbox DROP COLUMN deferred;
DELETE FROM schema_migrations WHERE version = 30;
`

// TestMigration30LeavesTheRowsThereInTheClaimsIndex: a file from before
// deferred rows, with PENDING rows in it (due now and due tomorrow),
// migrates to rows not deferred, in outbox_fair rebuilt without the
// deferred ones, beside outbox_deferred; the due rows are claimed as
// before, and a row an older herald writes is not deferred.
func TestMigration30LeavesTheRowsThereInTheClaimsIndex(t *testing.T) {
	t.Parallel()
	if testenv.WithoutRace(t) {
		return
	}
	ctx := context.Background()
	now := time.Now()
	oldRow := func(id string, at time.Time) string {
		return fmt.Sprintf(`INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at, scope)
VALUES ('%[1]s', 't1', 'r', 'e', 'k', 'transactional', '{}', 1000, 's1');
INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, created_at, updated_at, scope)
VALUES ('%[1]s', '%[1]s.webhook', 't1', 'transactional', 'webhook', 'PENDING', %[2]d, 1000, 1000, 's1');
`, id, at.UnixMilli())
	}
	tomorrow := now.Add(24 * time.Hour)
	path := fileBeforeMigration(t, func(*sqlite.Store) {}, undo30+oldRow("n1", now.Add(-time.Minute))+oldRow("n2", tomorrow))
	if _, err := sqlite.Migrate(ctx, path); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, path, `SELECT count(*) FROM sqlite_master WHERE name = 'outbox_fair'
AND sql LIKE '%(lane, tenant, scope, available_at, id) WHERE state = ''PENDING'' AND deferred = 0'`); n != 1 {
		t.Fatal("outbox_fair does not leave the deferred rows out after migration 30")
	}
	if n := queryInt(t, path, `SELECT count(*) FROM sqlite_master WHERE name = 'outbox_deferred'
AND sql LIKE '%(lane, available_at) WHERE state = ''PENDING'' AND deferred = 1'`); n != 1 {
		t.Fatal("no outbox_deferred (lane, available_at) of the deferred rows after migration 30")
	}
	exec(t, path, oldRow("n3", tomorrow))
	if n := queryInt(t, path, `SELECT count(*) FROM outbox WHERE deferred = 0`); n != 3 {
		t.Fatalf("%d of 3 rows are not deferred after migration 30", n)
	}
	clk := clock.NewFake(now)
	s, err := sqlite.Open(ctx, path, sqlite.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	claim := func(want ...string) {
		t.Helper()
		rows, err := s.OutboxClaim(ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w", Limit: 10, Lease: time.Minute})
		var got []string
		for _, r := range rows {
			got = append(got, r.MessageID)
		}
		slices.Sort(got)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("claim after migration 30 at %s: %v, %v; want %v", clk.Now(), got, err, want)
		}
	}
	claim("n1.webhook")
	clk.Advance(24*time.Hour + time.Minute)
	claim("n2.webhook", "n3.webhook")
}

// TestMigration32KeepsTheCampaignCountsAndPausesThemForACancel: a file from
// before migration 32, with a campaign's sends counted, keeps its counts
// and goes on counting; after it, a decision inserted alone is counted by
// the trigger, a parked send the cancel ends by the update trigger, and
// the cancel's inserted decisions once by the cancel.
func TestMigration32KeepsTheCampaignCountsAndPausesThemForACancel(t *testing.T) {
	t.Parallel()
	if testenv.WithoutRace(t) {
		return
	}
	ctx := context.Background()
	before, err := os.ReadFile("migrations/0027_campaign_counts.sql")
	if err != nil {
		t.Fatal(err)
	}
	// Migration 27's insert trigger, as a file before 32 has it.
	trigger := string(before)
	trigger = trigger[strings.Index(trigger, "CREATE TRIGGER campaign_count_delivery_insert"):]
	trigger = trigger[:strings.Index(trigger, "END;")+len("END;")]
	var c storetest.CampaignCountsBeforeMigration
	path := fileBeforeMigration(t, func(s *sqlite.Store) { c = storetest.MakeCampaignCounts(t, s, time.Now()) },
		"DROP TRIGGER campaign_count_delivery_insert;\n"+trigger+"\nDROP TABLE campaign_count_pause;\nDELETE FROM schema_migrations WHERE version = 32;")
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.CheckCampaignCountsMigrated(t, s, c, time.Now())

	const id = "cmp_after32"
	var rs []store.CampaignRecipient
	for i := range 4 {
		rs = append(rs, store.CampaignRecipient{Recipient: fmt.Sprint("r", i), NotificationID: fmt.Sprint("ntf_after32_", i)})
	}
	if _, err := s.CampaignCreate(ctx, store.CampaignCreateParams{ID: id, Tenant: "t1", IdempotencyKey: "k32", RequestHash: "h", Kind: "k",
		Lane: heraldtype.LaneMarketing, Channels: []heraldtype.Channel{heraldtype.ChannelWebhook}, Recipients: rs}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CampaignStart(ctx, "t1", id); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CampaignFanOut(ctx, store.CampaignFanOutParams{Tenant: "t1", ID: id, Limit: 10}); err != nil {
		t.Fatal(err)
	}
	// The first send suppressed alone (counted by the trigger), the second
	// parked; the cancel turns the parked one SUPPRESSED (counted by the
	// update trigger) and inserts decisions for the last two (counted by
	// the cancel).
	for i, state := range []heraldtype.DeliveryState{heraldtype.DeliverySuppressed, heraldtype.DeliveryParked} {
		if _, err := s.DeliveryDecide(ctx, store.DeliveryDecideParams{MessageID: store.MessageID(rs[i].NotificationID, heraldtype.ChannelWebhook),
			NotificationID: rs[i].NotificationID, Tenant: "t1", Channel: heraldtype.ChannelWebhook, State: state,
			Reason: heraldtype.ReasonConsentDenied}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.CampaignCancel(ctx, "t1", id)
	if err != nil || res.Cancelled != 3 {
		t.Fatalf("CampaignCancel = %+v, %v; want 3 cancelled", res, err)
	}
	got, err := s.CampaignGet(ctx, "t1", id)
	if err != nil || got.Counts != (store.CampaignCounts{Suppressed: 4}) {
		t.Fatalf("counts after a decision, a parked send and a cancel = %+v, %v; want 4 suppressed", got.Counts, err)
	}
	db, err := sql.Open("sqlite", sqlite.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var paused int
	if err := db.QueryRowContext(ctx, `SELECT paused FROM campaign_count_pause`).Scan(&paused); err != nil || paused != 0 {
		t.Fatalf("the count is left paused: %d, %v", paused, err)
	}
}

// A file a newer herald migrated (its schema past this build's last
// migration: a rollback) is opened, migrating or not, with a warning that
// names both versions; a file at this build's version opens without one.
func TestANewerSchemaIsWarnedOf(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "herald.db")
	open := func(mustExist bool) string {
		t.Helper()
		var logs bytes.Buffer
		s, err := sqlite.Open(ctx, path, sqlite.Options{MustExist: mustExist, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		return logs.String()
	}
	if logs := open(false); strings.Contains(logs, "newer") {
		t.Fatalf("a file at this build's version warned: %s", logs)
	}
	latest := queryInt(t, path, `SELECT max(version) FROM schema_migrations`)
	exec(t, path, fmt.Sprintf(`INSERT INTO schema_migrations (version, applied_at) VALUES (%d, 0)`, latest+1))
	for _, mustExist := range []bool{false, true} {
		want := fmt.Sprintf("schema is newer than this herald's: a newer herald migrated it; run that version\" schema_version=%d herald_schema_version=%d", latest+1, latest)
		if logs := open(mustExist); !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, want) {
			t.Fatalf("opening (MustExist %v) a file at version %d: %q; want a warning with %q", mustExist, latest+1, logs, want)
		}
	}
}

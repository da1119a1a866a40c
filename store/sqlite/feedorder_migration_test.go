package sqlite_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/sqlite"
)

// TestMigration26NumbersTheItemsInTheFeedsOrder: a file from before
// migration 26, whose items are rows of inbox_items numbered 1, 2, 3… per
// recipient under the key (tenant, recipient, seq), keeps every item, now
// on its notification's row, with its words and its read and archive
// marks; the new seqs, above every old one, follow each recipient's
// notifications in (created_at, id), even where the old numbers did not
// (r1's items 2 and 3 were committed out of that order); each counter's
// seq is its newest item's, or, for an inbox whose items were all purged,
// the file's newest; a new item takes a seq after every one of them; and
// the old numbers apps still hold (cursors, stream event ids) name the
// same items.
func TestMigration26NumbersTheItemsInTheFeedsOrder(t *testing.T) {
	t.Parallel()
	if testenv.WithoutRace(t) {
		return
	}
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "herald.db")
	if _, err := sqlite.Migrate(ctx, path); err != nil {
		t.Fatal(err)
	}
	// Back to the schema before migration 26, with its rows.
	exec(t, path, `DROP VIEW inbox_items;
DROP TABLE inbox_legacy;
DROP TABLE inbox_sequence;
DROP TRIGGER notifications_inbox_count;
DROP INDEX notifications_inbox_seq;
DROP INDEX notifications_inbox_created;
DROP TABLE inbox_legacy_items;
ALTER TABLE notifications DROP COLUMN inbox_seq;
ALTER TABLE notifications DROP COLUMN inbox_title;
ALTER TABLE notifications DROP COLUMN inbox_body;
ALTER TABLE notifications DROP COLUMN inbox_locale;
ALTER TABLE notifications DROP COLUMN inbox_read_at;
ALTER TABLE notifications DROP COLUMN inbox_archived_at;
CREATE TABLE inbox_items (
    tenant          TEXT NOT NULL,
    recipient       TEXT NOT NULL,
    seq             INTEGER NOT NULL,
    message_id      TEXT NOT NULL UNIQUE,
    notification_id TEXT NOT NULL,
    kind            TEXT NOT NULL,
    title           TEXT NOT NULL,
    body            TEXT NOT NULL,
    locale          TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    read_at         INTEGER,
    archived_at     INTEGER,
    PRIMARY KEY (tenant, recipient, seq)
) WITHOUT ROWID;
CREATE INDEX inbox_items_tenant_created ON inbox_items (tenant, created_at);
DELETE FROM schema_migrations WHERE version = 26;
INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at, inbox_at) VALUES
    ('ntf_a', 't1', 'r1', 'e', 'k', 'transactional', '{}', 1000, 1),
    ('ntf_c', 't1', 'r1', 'e', 'k', 'transactional', '{}', 2000, 1),
    ('ntf_b', 't1', 'r1', 'e', 'k', 'transactional', '{}', 2000, 1),
    ('ntf_d', 't1', 'r2', 'e', 'k', 'transactional', '{}', 1500, 1),
    ('ntf_e', 't2', 'r1', 'e', 'k', 'transactional', '{}', 500, 1),
    ('ntf_f', 't1', 'r3', 'e', 'k', 'transactional', '{}', 100, 1);
INSERT INTO inbox_items (tenant, recipient, seq, message_id, notification_id, kind, title, body, locale, created_at, read_at, archived_at) VALUES
    ('t1', 'r1', 1, 'ntf_a.inbox', 'ntf_a', 'k', 'a', 'A', '', 1000, 1100, NULL),
    ('t1', 'r1', 2, 'ntf_c.inbox', 'ntf_c', 'k', 'c', 'C', '', 2000, NULL, NULL),
    ('t1', 'r1', 3, 'ntf_b.inbox', 'ntf_b', 'k', 'b', 'B', '', 2000, NULL, 2100),
    ('t1', 'r2', 1, 'ntf_d.inbox', 'ntf_d', 'k', 'd', 'D', '', 1500, NULL, NULL),
    ('t2', 'r1', 1, 'ntf_e.inbox', 'ntf_e', 'k', 'e', 'E', 'ko', 500, NULL, NULL);
INSERT INTO inbox_counters (tenant, recipient, seq, unread) VALUES
    ('t1', 'r1', 3, 1), ('t1', 'r2', 1, 1), ('t2', 'r1', 1, 1), ('t1', 'r3', 20, 0);`)
	if v, err := sqlite.Migrate(ctx, path); err != nil || v < 26 {
		t.Fatalf("migrate: version %d, %v", v, err)
	}
	s, err := sqlite.Open(ctx, path, sqlite.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	// Numbered above the old numbers (at most 20: r3's counter had handed
	// out 20 before its items were purged), in the order of
	// (created_at, id) over the file: e, a, d, b, c.
	want := map[string]int64{"ntf_e": 21, "ntf_a": 22, "ntf_d": 23, "ntf_b": 24, "ntf_c": 25}
	r1, err := s.InboxItemsAfter(ctx, "t1", "r1", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, it := range r1 {
		got = append(got, it.NotificationID)
		if it.Seq != want[it.NotificationID] {
			t.Errorf("%s: seq %d, want %d", it.NotificationID, it.Seq, want[it.NotificationID])
		}
	}
	if !slices.Equal(got, []string{"ntf_a", "ntf_b", "ntf_c"}) || r1[0].ReadAt == nil || r1[1].ArchivedAt == nil || r1[2].ReadAt != nil {
		t.Fatalf("t1/r1: %+v, want a (read), b (archived), c", r1)
	}
	page, err := s.InboxFeed(ctx, store.InboxFeedParams{Tenant: "t1", Recipient: "r1", Limit: 10, Archived: true})
	if err != nil || len(page.Items) != 3 || page.Items[0].NotificationID != "ntf_c" || page.Badge != (store.InboxBadge{Unread: 1, Seq: 25}) {
		t.Fatalf("t1/r1's feed: %+v (%v)", page, err)
	}
	for _, c := range []struct {
		tenant, recipient string
		want              store.InboxBadge
	}{
		{"t1", "r2", store.InboxBadge{Unread: 1, Seq: 23}},
		{"t2", "r1", store.InboxBadge{Unread: 1, Seq: 21}},
		{"t1", "r3", store.InboxBadge{Unread: 0, Seq: 25}}, // every item purged: the file's newest
	} {
		if bd, err := s.InboxBadge(ctx, c.tenant, c.recipient); err != nil || bd != c.want {
			t.Errorf("%s/%s: badge %+v (%v), want %+v", c.tenant, c.recipient, bd, err, c.want)
		}
	}
	res, err := s.NotificationCreate(ctx, store.NotificationCreateParams{
		Tenant: "t1", ID: "ntf_g", Recipient: "r3", EventID: "e", Kind: "k", Lane: "transactional",
		Channels: []heraldtype.Channel{heraldtype.ChannelInbox}, Inbox: []store.InboxText{{Title: "g"}},
	})
	if err != nil || res.Outcome != store.Created {
		t.Fatalf("create after the migration: %+v (%v)", res, err)
	}
	if bd, err := s.InboxBadge(ctx, "t1", "r3"); err != nil || bd != (store.InboxBadge{Unread: 1, Seq: 26}) {
		t.Errorf("t1/r3 after a new item: %+v (%v), want 1 unread at seq 26", bd, err)
	}
	// A stream of r3's that had sent its item 20, purged since, gets g.
	if after, err := s.InboxItemsAfter(ctx, "t1", "r3", 20, 10); err != nil || len(after) != 1 || after[0].NotificationID != "ntf_g" {
		t.Errorf("t1/r3 after old seq 20: %+v (%v), want g", after, err)
	}

	// Old numbers: a stream that had sent r1's item 1 (a) replays b and c;
	// a page below r2's item 1 (d) is empty; a read cursor up to t2/r1's
	// item 1 (e) marks it; one up to r3's item 1, purged, marks nothing
	// (not the new item g, nor everything).
	if after, err := s.InboxItemsAfter(ctx, "t1", "r1", 1, 10); err != nil || len(after) != 2 || after[0].NotificationID != "ntf_b" || after[1].NotificationID != "ntf_c" {
		t.Errorf("t1/r1 after old seq 1: %+v (%v), want b and c", after, err)
	}
	if pg, err := s.InboxFeed(ctx, store.InboxFeedParams{Tenant: "t1", Recipient: "r2", Before: 1, Limit: 10}); err != nil || len(pg.Items) != 0 {
		t.Errorf("t1/r2 below old seq 1: %+v (%v), want nothing", pg.Items, err)
	}
	if pg, err := s.InboxFeed(ctx, store.InboxFeedParams{Tenant: "t1", Recipient: "r1", Before: 3, Limit: 10, Archived: true}); err != nil || len(pg.Items) != 1 || pg.Items[0].NotificationID != "ntf_a" {
		t.Errorf("t1/r1 below old seq 3 (b): %+v (%v), want a", pg.Items, err)
	}
	if bd, err := s.InboxMarkRead(ctx, store.InboxMarkReadParams{Tenant: "t2", Recipient: "r1", All: true, UpToSeq: 1}); err != nil || bd.Unread != 0 {
		t.Errorf("t2/r1 read up to old seq 1: %+v (%v), want none unread", bd, err)
	}
	if bd, err := s.InboxMarkRead(ctx, store.InboxMarkReadParams{Tenant: "t1", Recipient: "r3", All: true, UpToSeq: 1}); err != nil || bd.Unread != 1 {
		t.Errorf("t1/r3 read up to old seq 1, purged: %+v (%v), want g still unread", bd, err)
	}
	if rec, err := s.InboxRecount(ctx, store.InboxRecountParams{}); err != nil || rec.Repaired != 0 || rec.Checked != 4 {
		t.Errorf("recount after the migration: %+v (%v), want 4 checked, none drifted", rec, err)
	}
}

package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/heraldhq/herald/store/sqlite"
	"github.com/heraldhq/herald/store/storetest"
)

// TestMigration25TurnsTheInboxRowsIntoInboxAt: a file from before
// migration 25, whose inbox sends are outbox rows DONE(STORED) and STORED
// deliveries, keeps each send where the read API showed it (after the
// channels whose rows came first, a push's devices one channel), and no
// such row is left.
func TestMigration25TurnsTheInboxRowsIntoInboxAt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "herald.db")
	if _, err := sqlite.Migrate(ctx, path); err != nil {
		t.Fatal(err)
	}
	// Back to the schema before migration 25, with its rows.
	exec(t, path, `ALTER TABLE notifications DROP COLUMN inbox_at;
DELETE FROM schema_migrations WHERE version = 25;
`+storetest.RowsBeforeInboxAt("1"))
	if _, err := sqlite.Migrate(ctx, path); err != nil {
		t.Fatal(err)
	}
	for id, want := range storetest.InboxAtAfterMigration {
		if n := queryInt(t, path, `SELECT inbox_at FROM notifications WHERE id = '`+id+`'`); n != want {
			t.Errorf("%s: inbox_at %d, want %d", id, n, want)
		}
	}
	if n := queryInt(t, path, storetest.InboxRowsLeft); n != 0 {
		t.Errorf("%d inbox rows left, want none", n)
	}
	s, err := sqlite.Open(ctx, path, sqlite.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.CheckInboxAtMigrated(t, s)
}

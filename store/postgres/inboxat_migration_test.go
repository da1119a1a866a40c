package postgres

import (
	"context"
	"testing"

	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/store/storetest"
)

// TestMigration25TurnsTheInboxRowsIntoInboxAt: a schema from before
// migration 25, whose inbox sends are outbox rows DONE(STORED) and STORED
// deliveries, keeps each send where the read API showed it (after the
// channels whose rows came first, a push's devices one channel), and no
// such row is left.
func TestMigration25TurnsTheInboxRowsIntoInboxAt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testpg.Schema(t)
	if _, err := Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	// Back to the schema before migration 25, with its rows.
	testpg.Exec(t, url, `ALTER TABLE notifications DROP COLUMN inbox_at;
DELETE FROM schema_migrations WHERE version = 25;
`+storetest.RowsBeforeInboxAt("now()"))
	if _, err := Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	for id, want := range storetest.InboxAtAfterMigration {
		if n := queryInt(t, url, `SELECT inbox_at FROM notifications WHERE id = '`+id+`'`); n != want {
			t.Errorf("%s: inbox_at %d, want %d", id, n, want)
		}
	}
	if n := queryInt(t, url, storetest.InboxRowsLeft); n != 0 {
		t.Errorf("%d inbox rows left, want none", n)
	}
	storetest.CheckInboxAtMigrated(t, setup(t, url, Options{MustExist: true}))
}

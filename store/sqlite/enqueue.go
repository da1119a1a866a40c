package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/heraldhq/herald/store"
)

// DSN returns the data source name herald opens the SQLite file at path
// with (driver "sqlite", modernc.org/sqlite): WAL, synchronous=FULL, foreign
// keys, a 10 s busy timeout and BEGIN IMMEDIATE transactions. An application
// that writes its own rows and herald's in one transaction (CreateTx) opens
// the file with it, so it waits for herald's writer instead of failing.
func DSN(path string) string { return dsn(path, false) }

// CreateTx writes a notification and its PENDING outbox rows in the
// caller's transaction tx on herald's SQLite database (migrated by Migrate
// or by herald itself): they commit or roll back with the caller's work. It
// is the library twin of Store.NotificationCreate for requests without an
// idempotency key (p.IdempotencyKey must be empty); p.DedupKey makes the
// business event unique per tenant, so creating it again writes nothing and
// reports Deduplicated with the existing notification's id. now is the
// creation time (herald's SQLite store uses the system clock).
//
// SQLite has no cross-process wake-up: herald's claimers find the rows at
// their next poll (poll_interval).
func CreateTx(ctx context.Context, tx *sql.Tx, now time.Time, p store.NotificationCreateParams) (store.NotificationCreateResult, error) {
	if p.IdempotencyKey != "" {
		return store.NotificationCreateResult{}, errors.New("create notification: idempotency keys belong to intake; use a dedup key")
	}
	if len(p.Channels) == 0 {
		return store.NotificationCreateResult{}, errors.New("create notification: no channels")
	}
	at := now.UnixMilli()
	q, args, err := notificationInsert(callerTx{ctx: ctx, tx: tx}, p, at)
	if err != nil {
		return store.NotificationCreateResult{}, fmt.Errorf("create notification: %w", err)
	}
	r, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return store.NotificationCreateResult{}, fmt.Errorf("create notification: %w", err)
	}
	if n, err := r.RowsAffected(); err != nil {
		return store.NotificationCreateResult{}, fmt.Errorf("create notification: %w", err)
	} else if n == 0 {
		var id string
		if err := tx.QueryRowContext(ctx, qNotificationByDedup, p.Tenant, p.DedupKey).Scan(&id); err != nil {
			return store.NotificationCreateResult{}, fmt.Errorf("create notification: read deduplicated notification: %w", err)
		}
		return store.NotificationCreateResult{Outcome: store.Deduplicated, ID: id}, nil
	}
	available := at
	if p.SendAt != nil && p.SendAt.UnixMilli() > at {
		available = p.SendAt.UnixMilli()
	}
	if _, err := insertPlanned(callerTx{ctx: ctx, tx: tx}, p, available, at); err != nil {
		return store.NotificationCreateResult{}, fmt.Errorf("create notification: %w", err)
	}
	return store.NotificationCreateResult{Outcome: store.Created, ID: p.ID}, nil
}

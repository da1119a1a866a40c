package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Schema is the DDL Migrate runs, for applications that apply their own
// migrations. Every statement is idempotent.
const Schema = ddlConsumed + ";\n" + ddlConsumedAge + ";\n" + ddlQuarantined + ";\n"

// Tables and index.
const (
	// payload_hash is the hex SHA-256 of PayloadHash; processed_at is the
	// recording transaction's start (the database clock), which Prune reads.
	ddlConsumed = `CREATE TABLE IF NOT EXISTS herald_consumed_events (
	consumer     text        NOT NULL,
	event_id     text        NOT NULL,
	payload_hash text        NOT NULL,
	processed_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (consumer, event_id)
)`
	ddlConsumedAge = `CREATE INDEX IF NOT EXISTS herald_consumed_events_processed_at
	ON herald_consumed_events (processed_at)`
	// One row per (consumer, event, mismatching payload); a repeated
	// delivery of the same wrong payload counts up times_seen.
	ddlQuarantined = `CREATE TABLE IF NOT EXISTS herald_quarantined_events (
	consumer      text        NOT NULL,
	event_id      text        NOT NULL,
	payload_hash  text        NOT NULL,
	stored_hash   text        NOT NULL,
	payload       bytea       NOT NULL,
	first_seen_at timestamptz NOT NULL DEFAULT now(),
	last_seen_at  timestamptz NOT NULL DEFAULT now(),
	times_seen    bigint      NOT NULL DEFAULT 1,
	PRIMARY KEY (consumer, event_id, payload_hash)
)`
)

// Statements of the algorithm.
const (
	qSavepoint         = `SAVEPOINT herald_consumer`
	qSavepointRollback = `ROLLBACK TO SAVEPOINT herald_consumer`
	qSavepointRelease  = `RELEASE SAVEPOINT herald_consumer`

	// $1 consumer, $2 event id, $3 payload hash. One row affected: this
	// transaction owns the event.
	qRecord = `INSERT INTO herald_consumed_events (consumer, event_id, payload_hash)
VALUES ($1, $2, $3)
ON CONFLICT (consumer, event_id) DO NOTHING`

	qStoredHash = `SELECT payload_hash FROM herald_consumed_events
WHERE consumer = $1 AND event_id = $2`

	// $1 consumer, $2 event id, $3 new hash, $4 stored hash, $5 new payload.
	qQuarantine = `INSERT INTO herald_quarantined_events (consumer, event_id, payload_hash, stored_hash, payload)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (consumer, event_id, payload_hash) DO UPDATE
SET last_seen_at = now(), times_seen = herald_quarantined_events.times_seen + 1`
)

// Statements of Migrate and Prune.
const (
	// Serialises Migrate callers on one database and schema: concurrent
	// CREATE TABLE IF NOT EXISTS can otherwise fail on a catalog unique index.
	qMigrateLock = `SELECT pg_advisory_xact_lock(
	hashtextextended('herald_consumer_migrate:' || current_database() || '.' || current_schema(), 0))`

	// $1 age in microseconds.
	qPruneCutoff = `SELECT now() - $1::bigint * interval '1 microsecond'`

	// $1 cutoff, $2 batch size. Oldest first, a batch per transaction, so a
	// large backlog never holds many row locks at once.
	qPruneBatch = `DELETE FROM herald_consumed_events
WHERE (consumer, event_id) IN (
	SELECT consumer, event_id FROM herald_consumed_events
	WHERE processed_at < $1
	ORDER BY processed_at
	LIMIT $2
	FOR UPDATE SKIP LOCKED)`
)

// Migrate creates the tables this package uses, in the first schema of the
// connection's search_path, if they do not exist. It is safe to run at every
// start-up and from several processes at once.
func Migrate(ctx context.Context, db Beginner) error {
	if db == nil {
		return errNoDB
	}
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, qMigrateLock); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		for _, ddl := range []string{ddlConsumed, ddlConsumedAge, ddlQuarantined} {
			if _, err := tx.Exec(ctx, ddl); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("consumer: migrate: %w", err)
	}
	return nil
}

// pruneBatch is how many records one Prune transaction deletes.
const pruneBatch = 1000

// Prune deletes the records of events processed more than olderThan ago (by
// the database clock) and returns how many it deleted. An event delivered
// again after its record is gone is applied again, so olderThan must exceed
// the longest redelivery and replay window; see the package doc. Quarantine
// rows are kept.
func Prune(ctx context.Context, db Beginner, olderThan time.Duration) (int64, error) {
	if olderThan <= 0 {
		return 0, errors.New("consumer: prune: olderThan must be positive")
	}
	var cutoff time.Time
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, qPruneCutoff, olderThan.Microseconds()).Scan(&cutoff)
	})
	if err != nil {
		return 0, fmt.Errorf("consumer: prune: read the database clock: %w", err)
	}
	var total int64
	for {
		var n int64
		err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, qPruneBatch, cutoff, pruneBatch)
			n = tag.RowsAffected()
			return err
		})
		if err != nil {
			return total, fmt.Errorf("consumer: prune records before %s: %w", cutoff.Format(time.RFC3339), err)
		}
		total += n
		if n < pruneBatch {
			return total, nil
		}
	}
}

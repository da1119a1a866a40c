package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/internal/reconcilewalk"
)

// Reconciliation (store.Reconciler). A count reads one page of
// notifications at a time, by id, each page in a read transaction of the
// read pool (WAL gives it a snapshot); each page's statements walk the
// notifications' primary key and join each notification's outbox rows
// through outbox_notification and their deliveries through the
// deliveries' key.
const (
	// qReconcileBound: the last id of up to ?2 notifications after ?1.
	qReconcileBound = `SELECT coalesce(max(id), ''), count(*) FROM (SELECT id FROM notifications WHERE id > ?1 ORDER BY id LIMIT ?2)`
	// qReconcileGroups counts the page after ?2 up to ?3 by outbox and
	// delivery state ('' for none); ?1 is now, ?4 now minus the grace. An
	// inbox send counts as the DONE and STORED rows it once had
	// (store.InboxDelivery), and an inbox-only notification, which has no
	// outbox row, is not one without planned sends.
	qReconcileGroups = `SELECT coalesce(o.state, ''), coalesce(d.state, ''), count(*),
       count(*) FILTER (WHERE d.state IS NULL AND n.send_at > ?1),
       count(*) FILTER (WHERE d.state IS NULL AND o.state = 'DONE' AND o.updated_at < ?4),
       count(*) FILTER (WHERE d.state IS NULL AND o.state = 'PENDING' AND o.available_at < ?4)
FROM notifications n
LEFT JOIN outbox o ON o.notification_id = n.id
LEFT JOIN deliveries d ON d.message_id = o.message_id
WHERE n.id > ?2 AND n.id <= ?3 AND (o.id IS NOT NULL OR n.inbox_at = 0)
GROUP BY o.state, d.state
UNION ALL
SELECT 'DONE', 'STORED', count(*), 0, 0, 0 FROM notifications n WHERE n.id > ?2 AND n.id <= ?3 AND n.inbox_at > 0`
	// The findings of the page after ?1 up to ?2, at most ?3 (or ?4).
	qReconcileMissingOutbox = `SELECT n.id, '', '', n.tenant, n.kind FROM notifications n
WHERE n.id > ?1 AND n.id <= ?2 AND n.inbox_at = 0 AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.notification_id = n.id)
ORDER BY n.id LIMIT ?3`
	qReconcileNoDelivery = `SELECT n.id, o.message_id, o.channel, n.tenant, n.kind FROM notifications n JOIN outbox o ON o.notification_id = n.id
WHERE n.id > ?1 AND n.id <= ?2 AND o.state = 'DONE' AND o.updated_at < ?4
  AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.message_id = o.message_id)
ORDER BY n.id, o.message_id LIMIT ?3`
	// qReconcileUnknown: +d.state keeps the planner off deliveries_unknown
	// (the look-up rounds' index), which would scan every UNKNOWN delivery
	// instead of the page's notifications.
	qReconcileUnknown = `SELECT n.id, o.message_id, o.channel, n.tenant, n.kind FROM notifications n JOIN outbox o ON o.notification_id = n.id
JOIN deliveries d ON d.message_id = o.message_id
WHERE n.id > ?1 AND n.id <= ?2 AND +d.state = 'UNKNOWN'
ORDER BY n.id, o.message_id LIMIT ?3`

	// qReconcileNotification reads a notification that has no outbox row.
	qReconcileNotification = `SELECT n.tenant, n.lane, n.send_at, n.expires_at, n.scope FROM notifications n
WHERE n.id = ? AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.notification_id = n.id)`
	// qReconcileOutboxInsert writes one recreated planned send unless its
	// message has a delivery row: ?9 its fallback step (0 off a chain),
	// a later step WAITING as intake writes it; ?10 the scope; ?11
	// whether a PENDING row is deferred (deferredAt: the notification's
	// send_at may be ahead).
	qReconcileOutboxInsert = `INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, expires_at, created_at, updated_at,
                    fallback_step, scope, deferred)
SELECT ?1, ?2, ?3, ?4, ?5, CASE WHEN ?9 > 1 THEN 'WAITING' ELSE 'PENDING' END, ?6, ?7, ?8, ?8, nullif(?9, 0), ?10, CASE WHEN ?9 > 1 THEN 0 ELSE ?11 END
WHERE NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.message_id = ?2)`

	// qReconcileOutboxRedrive puts a DONE row whose message has no delivery
	// back to PENDING, due now (?1), with a fresh token, as the watchdog
	// re-drives; ?2 is the message id. A row ended while deferred (a
	// discard, a cancel) comes back into the claim's index (deferred = 0).
	qReconcileOutboxRedrive = `UPDATE outbox
SET state = 'PENDING', available_at = ?1, deferred = 0, last_reason = 'REDRIVEN', claimed_by = NULL, claimed_until = NULL,
    token = token + 1, updated_at = ?1
WHERE message_id = ?2 AND state = 'DONE' AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.message_id = ?2)
RETURNING lane`

	qReconcileRunInsert = `INSERT INTO reconcile_runs (started_at, finished_at, report) VALUES (?, ?, ?)`
	qReconcileRunPrune  = `DELETE FROM reconcile_runs WHERE id NOT IN (SELECT id FROM reconcile_runs ORDER BY id DESC LIMIT ?)`
	qReconcileRunLast   = `SELECT id, started_at, finished_at, report FROM reconcile_runs ORDER BY id DESC LIMIT 1`
)

// reconcileQueries are a count's statements.
var reconcileQueries = reconcilewalk.Queries{
	Bound: qReconcileBound, Groups: qReconcileGroups,
	MissingOutbox: qReconcileMissingOutbox, NoDelivery: qReconcileNoDelivery, Unknown: qReconcileUnknown,
}

// ReconcileCount counts every notification's planned sends, each page in
// a read transaction of its own (reconcilewalk says why).
func (s *Store) ReconcileCount(ctx context.Context, p store.ReconcileCountParams) (store.ReconcileCounts, error) {
	now := s.clock.Now()
	snapshot := func(ctx context.Context, read func(reconcilewalk.Pages) error) error {
		tx, err := s.rdb.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("reconcile: begin: %w", err)
		}
		defer tx.Rollback()
		query := func(ctx context.Context, q string, args ...any) (reconcilewalk.Rows, func(), error) {
			rows, err := tx.QueryContext(ctx, q, args...)
			if err != nil {
				return nil, nil, err
			}
			return rows, func() { rows.Close() }, nil
		}
		return read(reconcilewalk.NewPages(query, reconcileQueries, ms(now), ms(now.Add(-p.Grace))))
	}
	return reconcilewalk.Walk(ctx, p, now, snapshot)
}

// ReconcileOutboxRecreate writes the planned sends of a notification that
// has none, in one write transaction.
func (s *Store) ReconcileOutboxRecreate(ctx context.Context, p store.ReconcileOutboxRecreateParams) (int, error) {
	var wrote int
	var lane string
	err := s.w.do(ctx, func(tx wtx) error {
		wrote = 0
		var tenant, scope string
		var sendAt, expiresAt sql.NullInt64
		err := tx.QueryRow(qReconcileNotification, p.NotificationID).Scan(&tenant, &lane, &sendAt, &expiresAt, &scope)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read notification: %w", err)
		}
		now := s.now()
		available := max(now, sendAt.Int64)
		steps := store.FallbackSteps(p.Channels, p.Fallback)
		for i, ch := range p.Channels {
			r, err := tx.Exec(qReconcileOutboxInsert, p.NotificationID, store.MessageID(p.NotificationID, ch), tenant, lane,
				string(ch), available, expiresAt, now, steps[i], scope, deferredAt(available, now))
			if err != nil {
				return fmt.Errorf("insert outbox row: %w", err)
			}
			n, _ := r.RowsAffected()
			wrote += int(n)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("recreate planned sends of %s: %w", p.NotificationID, err)
	}
	if wrote > 0 {
		s.wakeups.Notify(heraldtype.Lane(lane))
	}
	return wrote, nil
}

// ReconcileOutboxRedrive puts DONE rows without a delivery back to PENDING,
// in one write transaction.
func (s *Store) ReconcileOutboxRedrive(ctx context.Context, rows []store.ReconcileFinding) ([]string, error) {
	var moved []string
	lanes := map[heraldtype.Lane]bool{}
	err := s.w.do(ctx, func(tx wtx) error {
		moved = moved[:0]
		clear(lanes)
		now := s.now()
		for _, f := range rows {
			var lane string
			err := tx.QueryRow(qReconcileOutboxRedrive, now, f.MessageID).Scan(&lane)
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return err
			}
			moved = append(moved, f.MessageID)
			lanes[heraldtype.Lane(lane)] = true
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("re-drive finished planned sends without a delivery: %w", err)
	}
	for l := range lanes {
		s.wakeups.Notify(l)
	}
	return moved, nil
}

// ReconcileRunSave keeps run and prunes all but the newest keep runs.
func (s *Store) ReconcileRunSave(ctx context.Context, run store.ReconcileRun, keep int) error {
	err := s.w.do(ctx, func(tx wtx) error {
		if _, err := tx.Exec(qReconcileRunInsert, ms(run.StartedAt), ms(run.FinishedAt), string(run.Report)); err != nil {
			return err
		}
		_, err := tx.Exec(qReconcileRunPrune, max(keep, 1))
		return err
	})
	if err != nil {
		return fmt.Errorf("save reconciliation run: %w", err)
	}
	return nil
}

// ReconcileRunLast reads the newest kept run.
func (s *Store) ReconcileRunLast(ctx context.Context) (store.ReconcileRun, error) {
	var run store.ReconcileRun
	var started, finished int64
	var report string
	err := s.queryRow(ctx, qReconcileRunLast).Scan(&run.ID, &started, &finished, &report)
	if errors.Is(err, sql.ErrNoRows) {
		return run, store.ErrNotFound
	}
	if err != nil {
		return run, fmt.Errorf("read last reconciliation run: %w", err)
	}
	run.StartedAt, run.FinishedAt, run.Report = fromMs(started), fromMs(finished), []byte(report)
	return run, nil
}

package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/internal/reconcilewalk"
)

// Reconciliation (store.Reconciler). Each page of a count is a REPEATABLE
// READ, READ ONLY transaction of its own (reconcilewalk says why not one
// for the whole count), a handful of statements over up to Page
// notifications: the page's range of the notifications' key merged with
// the same range of the outbox key (notification_id, channel), and each
// planned send's delivery found by one probe of deliveries_message_id
// (LATERAL … LIMIT 1). A page costs what its rows cost, whatever the
// tables' size and whatever the statistics say, because the page's
// transaction leaves the planner only that plan: no hash join (with fresh
// statistics it hashed the whole outbox for every page, pricing cached
// index reads as disk reads), no nested loop it may choose (for a page of
// rows inserted since the last ANALYZE, estimated at one row, it scanned
// the page's whole outbox range once per notification: a page of 10,000
// ran for minutes), no memoizing of probes whose keys never repeat; and no
// parallel workers or JIT: the count is background work of small
// statements and should take one backend, not several, from intake. The
// plans are held in reconcile_plan_test.go.
const (
	// qReconcileNow is the snapshot's now.
	qReconcileNow = `SELECT coalesce($1::timestamptz, now())`
	// qReconcilePlan leaves a page's statements the plan above, on one
	// backend, compiled by nothing.
	qReconcilePlan = `SET LOCAL enable_hashjoin = off; SET LOCAL enable_nestloop = off; SET LOCAL enable_memoize = off;
SET LOCAL max_parallel_workers_per_gather = 0; SET LOCAL jit = off`
	// qReconcileBound: the last id of up to $2 notifications after $1.
	qReconcileBound = `SELECT coalesce(max(id), ''), count(*) FROM (SELECT id FROM notifications WHERE id > $1::text ORDER BY id LIMIT $2::int) p`
	// qReconcileGroups counts the page after $2 up to $3 by outbox and
	// delivery state ('' for none); $1 is now, $4 now minus the grace. An
	// inbox send counts as the DONE and STORED rows it once had
	// (store.InboxDelivery), and an inbox-only notification, which has no
	// outbox row, is not one without planned sends.
	qReconcileGroups = `SELECT coalesce(o.state, ''), coalesce(d.state, ''), count(*),
       count(*) FILTER (WHERE d.state IS NULL AND n.send_at > $1::timestamptz),
       count(*) FILTER (WHERE d.state IS NULL AND o.state = 'DONE' AND o.updated_at < $4::timestamptz),
       count(*) FILTER (WHERE d.state IS NULL AND o.state = 'PENDING' AND o.available_at < $4::timestamptz)
FROM notifications n
LEFT JOIN outbox o ON o.notification_id = n.id AND o.notification_id > $2::text AND o.notification_id <= $3::text
LEFT JOIN LATERAL (SELECT d.state FROM deliveries d WHERE d.message_id = o.message_id LIMIT 1) d ON true
WHERE n.id > $2::text AND n.id <= $3::text AND (o.notification_id IS NOT NULL OR n.inbox_at = 0)
GROUP BY 1, 2
UNION ALL
SELECT 'DONE', 'STORED', count(*), 0, 0, 0 FROM notifications n WHERE n.id > $2::text AND n.id <= $3::text AND n.inbox_at > 0`
	// The findings of the page after $1 up to $2, at most $3 ($4 as above).
	qReconcileMissingOutbox = `SELECT n.id, '', '', n.tenant, n.kind FROM notifications n
WHERE n.id > $1::text AND n.id <= $2::text AND n.inbox_at = 0
  AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.notification_id = n.id AND o.notification_id > $1::text AND o.notification_id <= $2::text)
ORDER BY n.id LIMIT $3::int`
	qReconcileNoDelivery = `SELECT n.id, o.message_id, o.channel, n.tenant, n.kind
FROM notifications n
JOIN outbox o ON o.notification_id = n.id AND o.notification_id > $1::text AND o.notification_id <= $2::text
LEFT JOIN LATERAL (SELECT true AS found FROM deliveries d WHERE d.message_id = o.message_id LIMIT 1) d ON true
WHERE n.id > $1::text AND n.id <= $2::text AND o.state = 'DONE' AND o.updated_at < $4::timestamptz AND d.found IS NULL
ORDER BY n.id, o.message_id LIMIT $3::int`
	qReconcileUnknown = `SELECT n.id, o.message_id, o.channel, n.tenant, n.kind
FROM notifications n
JOIN outbox o ON o.notification_id = n.id AND o.notification_id > $1::text AND o.notification_id <= $2::text
JOIN LATERAL (SELECT d.state FROM deliveries d WHERE d.message_id = o.message_id LIMIT 1) d ON true
WHERE n.id > $1::text AND n.id <= $2::text AND d.state = 'UNKNOWN'
ORDER BY n.id, o.message_id LIMIT $3::int`

	// qReconcileOutboxRecreate writes the planned sends $3 (message ids
	// $4, fallback steps $5: 0 off a chain, a later step WAITING as intake
	// writes it) of notification $2 if it has no outbox row, each unless
	// its message has a delivery row; $1 is now. It returns the lane and
	// how many rows it wrote. A concurrent recreate conflicts on the outbox
	// key and writes nothing.
	qReconcileOutboxRecreate = `WITH n AS (
    SELECT id, tenant, scope, lane, send_at, expires_at FROM notifications
    WHERE id = $2::text AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.notification_id = $2::text)
),
ins AS (
    INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, expires_at, created_at, updated_at,
                        fallback_step, scope, deferred)
    SELECT n.id, c.message_id, n.tenant, n.lane, c.channel, CASE WHEN c.step > 1 THEN 'WAITING' ELSE 'PENDING' END,
           greatest(coalesce($1::timestamptz, now()), n.send_at), n.expires_at, coalesce($1::timestamptz, now()), coalesce($1::timestamptz, now()),
           nullif(c.step, 0), n.scope, coalesce(c.step <= 1 AND n.send_at > coalesce($1::timestamptz, now()) + ` + qDeferHorizon + `, false)
    FROM n, unnest($3::text[], $4::text[], $5::integer[]) AS c (channel, message_id, step)
    WHERE NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.message_id = c.message_id)
    ON CONFLICT DO NOTHING
    RETURNING lane
)
SELECT coalesce(min(lane), ''), count(*) FROM ins`

	// qReconcileOutboxRedrive puts each DONE row of the planned sends
	// ($2 notification ids, $3 channels) whose message has no delivery back
	// to PENDING, due now ($1), with a fresh token, as the watchdog
	// re-drives, and returns the message ids and lanes it moved.
	qReconcileOutboxRedrive = `UPDATE outbox o
SET state = 'PENDING', available_at = coalesce($1::timestamptz, now()), last_reason = 'REDRIVEN', claimed_by = NULL,
    claimed_until = NULL, token = o.token + 1, updated_at = coalesce($1::timestamptz, now()), deferred = false
FROM unnest($2::text[], $3::text[]) AS f (notification_id, channel)
WHERE o.notification_id = f.notification_id AND o.channel = f.channel AND o.state = 'DONE'
  AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.message_id = o.message_id)
RETURNING o.message_id, o.lane`

	qReconcileRunInsert = `INSERT INTO reconcile_runs (started_at, finished_at, report) VALUES ($1::timestamptz, $2::timestamptz, $3::json)`
	qReconcileRunPrune  = `DELETE FROM reconcile_runs WHERE id < (SELECT min(id) FROM (SELECT id FROM reconcile_runs ORDER BY id DESC LIMIT $1::int) k)`
	qReconcileRunLast   = `SELECT id, started_at, finished_at, report::text FROM reconcile_runs ORDER BY id DESC LIMIT 1`
)

// reconcileQueries are a count's statements.
var reconcileQueries = reconcilewalk.Queries{
	Bound: qReconcileBound, Groups: qReconcileGroups,
	MissingOutbox: qReconcileMissingOutbox, NoDelivery: qReconcileNoDelivery, Unknown: qReconcileUnknown,
}

// ReconcileCount counts every notification's planned sends, each page in
// a read-only transaction of its own (reconcilewalk says why).
func (s *Store) ReconcileCount(ctx context.Context, p store.ReconcileCountParams) (store.ReconcileCounts, error) {
	var now time.Time
	if err := s.pool.QueryRow(ctx, qReconcileNow, s.now()).Scan(&now); err != nil {
		return store.ReconcileCounts{}, s.fail("reconcile: read now", err)
	}
	now = now.UTC()
	snapshot := func(ctx context.Context, read func(reconcilewalk.Pages) error) error {
		return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, qReconcilePlan); err != nil {
				return err
			}
			query := func(ctx context.Context, q string, args ...any) (reconcilewalk.Rows, func(), error) {
				rows, err := tx.Query(ctx, q, args...)
				if err != nil {
					return nil, nil, err
				}
				return rows, rows.Close, nil
			}
			return read(reconcilewalk.NewPages(query, reconcileQueries, now, now.Add(-p.Grace)))
		})
	}
	c, err := reconcilewalk.Walk(ctx, p, now, snapshot)
	if err != nil {
		return store.ReconcileCounts{}, s.fail("reconcile", err)
	}
	return c, nil
}

// ReconcileOutboxRecreate writes the planned sends of a notification that
// has none, in one statement.
func (s *Store) ReconcileOutboxRecreate(ctx context.Context, p store.ReconcileOutboxRecreateParams) (int, error) {
	chs, msgs, steps := make([]string, len(p.Channels)), make([]string, len(p.Channels)), make([]int32, len(p.Channels))
	for i, n := range store.FallbackSteps(p.Channels, p.Fallback) {
		ch := p.Channels[i]
		chs[i], msgs[i], steps[i] = string(ch), store.MessageID(p.NotificationID, ch), int32(n)
	}
	var lane string
	var n int
	if err := s.pool.QueryRow(ctx, qReconcileOutboxRecreate, s.now(), p.NotificationID, chs, msgs, steps).Scan(&lane, &n); err != nil {
		return 0, s.fail("recreate planned sends of "+p.NotificationID, err)
	}
	if n > 0 {
		s.wakeups.Notify(heraldtype.Lane(lane))
	}
	return n, nil
}

// ReconcileOutboxRedrive puts DONE rows without a delivery back to PENDING
// in one statement.
func (s *Store) ReconcileOutboxRedrive(ctx context.Context, rows []store.ReconcileFinding) ([]string, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	nids, chs := make([]string, len(rows)), make([]string, len(rows))
	for i, f := range rows {
		nids[i], chs[i] = f.NotificationID, string(f.Channel)
	}
	res, err := s.pool.Query(ctx, qReconcileOutboxRedrive, s.now(), nids, chs)
	if err != nil {
		return nil, s.fail("re-drive finished planned sends without a delivery", err)
	}
	defer res.Close()
	var moved []string
	lanes := map[heraldtype.Lane]bool{}
	for res.Next() {
		var msg, lane string
		if err := res.Scan(&msg, &lane); err != nil {
			return nil, s.fail("re-drive finished planned sends without a delivery", err)
		}
		moved = append(moved, msg)
		lanes[heraldtype.Lane(lane)] = true
	}
	if err := res.Err(); err != nil {
		return nil, s.fail("re-drive finished planned sends without a delivery", err)
	}
	for l := range lanes {
		s.wakeups.Notify(l)
	}
	return moved, nil
}

// ReconcileRunSave keeps run and prunes all but the newest keep runs, in
// one transaction.
func (s *Store) ReconcileRunSave(ctx context.Context, run store.ReconcileRun, keep int) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, qReconcileRunInsert, utc(run.StartedAt), utc(run.FinishedAt), string(run.Report)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, qReconcileRunPrune, max(keep, 1))
		return err
	})
	if err != nil {
		return s.fail("save reconciliation run", err)
	}
	return nil
}

// ReconcileRunLast reads the newest kept run.
func (s *Store) ReconcileRunLast(ctx context.Context) (store.ReconcileRun, error) {
	var run store.ReconcileRun
	var report string
	err := s.pool.QueryRow(ctx, qReconcileRunLast).Scan(&run.ID, &run.StartedAt, &run.FinishedAt, &report)
	if errors.Is(err, pgx.ErrNoRows) {
		return run, store.ErrNotFound
	}
	if err != nil {
		return run, s.fail("read last reconciliation run", err)
	}
	run.StartedAt, run.FinishedAt, run.Report = run.StartedAt.UTC(), run.FinishedAt.UTC(), []byte(report)
	return run, nil
}

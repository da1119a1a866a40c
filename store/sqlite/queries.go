package sqlite

// SQL run by the SQLite driver, grouped by table. Parameters are positional;
// times are Unix milliseconds from the store's clock.

// Notifications and idempotency keys.
const (
	qIdemInsert = `INSERT INTO idempotency_keys (tenant, key, request_hash, notification_id, response, created_at, expires_at)
VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, key) DO NOTHING`
	qIdemGet     = `SELECT request_hash, response, expires_at FROM idempotency_keys WHERE tenant = ? AND key = ?`
	qIdemReplace = `UPDATE idempotency_keys SET request_hash = ?, notification_id = ?, response = ?, created_at = ?, expires_at = ?
WHERE tenant = ? AND key = ?`
	qIdemSweep = `DELETE FROM idempotency_keys WHERE expires_at <= ?`

	// qNotificationInsert's twelfth value is the inbox's place (store,
	// inboxsend.go), its last the scope.
	qNotificationInsert = `INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, dedup_key, send_at, expires_at, created_at, inbox_at,
                           scope)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING`
	qNotificationByDedup = `SELECT id FROM notifications WHERE tenant = ? AND dedup_key = ?`
	// qOutboxInsert's last value is whether the row is deferred
	// (deferredAt).
	qOutboxInsert = `INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, expires_at, created_at, updated_at,
                    scope, deferred)
VALUES (?, ?, ?, ?, ?, 'PENDING', ?, ?, ?, ?, ?, ?)`

	// qOutboxInsertClaimed is qOutboxInsert for a row handed over at
	// intake (insertHanded): due now and claimed by ?9 until ?10 in state
	// ?11 (CLAIMED, or PUBLISHING for a relay), its claim's token 1.
	qOutboxInsertClaimed = `INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, expires_at, created_at, updated_at,
                    scope, claimed_by, claimed_until, token)
VALUES (?1, ?2, ?3, ?4, ?5, ?11, ?6, ?7, ?6, ?6, ?8, ?9, ?10, 1) RETURNING id, token`

	// qNotificationCancelMark marks a notification cancelled
	// (store.Cancels), keeping the first cancel's time. ?1 now, ?2 id,
	// ?3 tenant.
	qNotificationCancelMark = `UPDATE notifications SET cancelled_at = coalesce(cancelled_at, ?1) WHERE id = ?2 AND tenant = ?3`
	qNotificationGet        = `SELECT id, tenant, recipient, event_id, kind, lane, send_at, expires_at, created_at, inbox_at, scope
FROM notifications WHERE id = ? AND tenant = ?`
	qNotificationSends = `SELECT o.message_id, o.channel, o.state, o.last_reason, o.available_at, o.updated_at,
       d.notification_id, d.tenant, d.provider, d.state, d.reason, d.attempts, d.claimed_at, d.next_attempt_at, d.created_at, d.updated_at,
       o.fallback_step, o.fallback_after, o.fallback_plan
FROM outbox o LEFT JOIN deliveries d ON d.message_id = o.message_id
WHERE o.notification_id = ? ORDER BY o.id`
)

// Outbox: claims and fenced writes.
const (
	// One statement flips the due rows to CLAIMED with a fresh token and
	// returns them; SQLite's single writer makes it atomic. The rows are
	// shared fairly between the lane's tenants and, inside a tenant,
	// between its scopes, as PostgreSQL's qOutboxClaim says: each (tenant,
	// scope)'s due rows oldest first (outbox_fair, bounded by now),
	// numbered from its rows in flight (sturn); each tenant's rows then
	// numbered from the tenant's rows in flight, its scopes' rows taking
	// turns by sturn, equal ones going round the scopes from the first
	// after the tenant's entry in ?11; and the lowest turns win, equal
	// turns going round the tenants from the first after ?10.
	//
	// ?1 state, ?2 owner, ?3 claimed_until, ?4 now, ?5 lane, ?6 and ?7 now,
	// ?8 limit, ?9 a tenant to skip (OutboxClaimParams.Skip; NULL none),
	// ?10 the tenant after which ties start (OutboxClaimParams.After; ''
	// none), ?11 a JSON object of each tenant's scope after which its ties
	// start (OutboxClaimParams.Scopes), ?12 the only scope of ?9 to skip
	// (SkipScope; NULL all), ?13 how many of ?9's other rows it may take
	// (SkipCap; NULL no cap). The loose scan over the (tenant,
	// scope)s probes as qOutboxLaneTenants says.
	//
	// caps, capped and reads bound each (tenant, scope)'s walk as
	// PostgreSQL's claim does (its caps step): with at least ?8 groups of
	// a tenant due, a group need read only smax - sn rows. SQLite takes no
	// LIMIT that names an outer column, so the groups whose cap is one
	// read one row, those above it ?8 and those below none, and cand drops
	// the rows past the cap: 100 idle clinics with 200 due rows each made a claim of 32 read
	// 3,200 rows (25 ms), now 100 (11 ms).
	//
	// The loose scan probes every (tenant, scope) with rows in outbox_fair,
	// due or not, so the rows due beyond store.DeferHorizon are kept out of
	// it (deferred = 1, in outbox_deferred; store/promote.go) until
	// qOutboxPromote moves them back. Every read of outbox_fair here says
	// deferred = 0: SQLite plans on a partial index only for a WHERE that
	// contains the index's own terms, and without it the claim would read
	// the table.
	//
	// qOutboxLaneTenants is the lane's first (tenant, scope) with rows in
	// outbox_fair and whether another has some (two probes of it); no
	// row when none has. With one, OutboxClaim runs qOutboxClaimOneTenant,
	// the fair claim's answer without its work (on the single writer, the
	// fair claim doubled a claim's cost for the common case).
	//
	// The next (tenant, scope) is looked for in two probes, a later scope
	// of the tenant and a later tenant: SQLite bounds an index range by a
	// row value's first column only, and a probe for (tenant, scope) >
	// (t, s) walked every row of (t, s) to find none.
	qOutboxLaneTenants = `SELECT t.tenant, t.scope,
       EXISTS (SELECT 1 FROM outbox o WHERE o.lane = ?1 AND o.state = 'PENDING' AND o.deferred = 0 AND o.tenant = t.tenant AND o.scope > t.scope)
       OR EXISTS (SELECT 1 FROM outbox o WHERE o.lane = ?1 AND o.state = 'PENDING' AND o.deferred = 0 AND o.tenant > t.tenant)
FROM (SELECT tenant, scope FROM outbox WHERE lane = ?1 AND state = 'PENDING' AND deferred = 0 ORDER BY lane, tenant, scope LIMIT 1) t`
	// qOutboxClaimOneTenant is qOutboxClaim for a lane with one tenant
	// and scope waiting (?9, ?10): its due rows oldest first, on outbox_fair.
	qOutboxClaimOneTenant = `UPDATE outbox
SET state = ?1, claimed_by = ?2, claimed_until = ?3, token = token + 1, updated_at = ?4
WHERE id IN (
    SELECT id FROM outbox
    WHERE lane = ?5 AND tenant = ?9 AND scope = ?10 AND state = 'PENDING' AND deferred = 0 AND available_at <= ?6
      AND (expires_at IS NULL OR expires_at > ?7)
    ORDER BY available_at, id LIMIT ?8)
RETURNING id, token, notification_id, message_id, channel, attempts, fallback_step IS NULL, fallback_plan IS NOT NULL, scope`
	qOutboxClaim = `UPDATE outbox
SET state = ?1, claimed_by = ?2, claimed_until = ?3, token = token + 1, updated_at = ?4
WHERE id IN (
    WITH RECURSIVE groups (tenant, scope, first, first_expires) AS (
        SELECT tenant, scope, available_at, expires_at FROM (
            SELECT tenant, scope, available_at, expires_at FROM outbox WHERE lane = ?5 AND state = 'PENDING' AND deferred = 0
            ORDER BY lane, tenant, scope, available_at LIMIT 1)
      UNION ALL
        SELECT o.tenant, o.scope, o.available_at, o.expires_at FROM groups g JOIN outbox o ON o.id = coalesce(
            (SELECT y.id FROM outbox y WHERE y.lane = ?5 AND y.state = 'PENDING' AND y.deferred = 0 AND y.tenant = g.tenant AND y.scope > g.scope
             ORDER BY y.lane, y.tenant, y.scope, y.available_at LIMIT 1),
            (SELECT y.id FROM outbox y WHERE y.lane = ?5 AND y.state = 'PENDING' AND y.deferred = 0 AND y.tenant > g.tenant
             ORDER BY y.lane, y.tenant, y.scope, y.available_at LIMIT 1))
    ),
    busy AS (
        SELECT tenant, scope, count(*) AS n FROM outbox WHERE state IN ('CLAIMED', 'PUBLISHING') AND lane = ?5
          AND (SELECT count(*) FROM groups) > 1
        GROUP BY tenant, scope
    ),
    memory AS MATERIALIZED (SELECT key, value FROM json_each(?11)),
    shares AS (
        SELECT g.tenant, g.scope, coalesce(b.n, 0) AS sn, coalesce(tb.n, 0) AS tn, m.value AS last,
               g.first <= ?6 AND (g.first_expires IS NULL OR g.first_expires > ?7) AS due
        FROM groups g
        LEFT JOIN busy b ON b.tenant = g.tenant AND b.scope = g.scope
        LEFT JOIN (SELECT tenant, sum(n) AS n FROM busy GROUP BY tenant) tb ON tb.tenant = g.tenant
        LEFT JOIN memory m ON m.key = g.tenant
        WHERE NOT coalesce(g.tenant = ?9 AND (?12 IS NULL OR g.scope = ?12), 0)
    ),
    caps AS (
        SELECT tenant, sn + 1 AS smax
        FROM (SELECT tenant, sn, row_number() OVER (PARTITION BY tenant ORDER BY sn) AS rn FROM shares
              WHERE due AND (SELECT count(*) FROM groups) >= ?8)
        WHERE rn = ?8
    ),
    capped AS (SELECT s.*, coalesce(k.smax - s.sn, ?8) AS cap FROM shares s LEFT JOIN caps k ON k.tenant = s.tenant),
    reads AS (
        SELECT x.id, c.tenant, c.scope, c.sn, c.tn, c.last, c.cap, x.available_at
        FROM capped c JOIN outbox x ON x.id IN (
            SELECT y.id FROM outbox y
            WHERE y.lane = ?5 AND y.tenant = c.tenant AND y.scope = c.scope AND y.state = 'PENDING' AND y.deferred = 0 AND y.available_at <= ?6
              AND (y.expires_at IS NULL OR y.expires_at > ?7)
            ORDER BY y.available_at, y.id LIMIT 1)
        WHERE c.cap = 1
      UNION ALL
        SELECT x.id, c.tenant, c.scope, c.sn, c.tn, c.last, c.cap, x.available_at
        FROM capped c JOIN outbox x ON x.id IN (
            SELECT y.id FROM outbox y
            WHERE y.lane = ?5 AND y.tenant = c.tenant AND y.scope = c.scope AND y.state = 'PENDING' AND y.deferred = 0 AND y.available_at <= ?6
              AND (y.expires_at IS NULL OR y.expires_at > ?7)
            ORDER BY y.available_at, y.id LIMIT ?8)
        WHERE c.cap > 1
    ),
    cand AS (
        SELECT id, tenant, scope, tn, last, available_at, sturn
        FROM (SELECT r.*, r.sn + row_number() OVER (PARTITION BY r.tenant, r.scope ORDER BY r.available_at, r.id) AS sturn FROM reads r)
        WHERE sturn - sn <= cap
    ),
    turns AS (
        SELECT id, tenant, available_at, tn,
               tn + row_number() OVER (PARTITION BY tenant
                   ORDER BY sturn, scope <= coalesce(last, ''), scope, available_at, id) AS turn
        FROM cand
    )
    SELECT id FROM turns WHERE ?13 IS NULL OR tenant IS NOT ?9 OR turn - tn <= ?13
    ORDER BY turn, tenant <= ?10, tenant, available_at, id LIMIT ?8)
RETURNING id, token, notification_id, message_id, channel, attempts, fallback_step IS NULL, fallback_plan IS NOT NULL, scope`
	// qOutboxJobs reads the claimed rows' notifications, each with its
	// recipient's profile and its cancel mark; qOutboxDelivered which of
	// the claimed messages already have a delivery row. Both feed
	// heraldtype.Known, which spares the sender two reads per job and its
	// rules on a cancelled one.
	qOutboxJobs = `SELECT n.id, n.tenant, n.recipient, n.event_id, n.kind, n.params, n.expires_at, p.data, p.updated_at, n.cancelled_at IS NOT NULL
FROM notifications n LEFT JOIN profiles p ON p.tenant = n.tenant AND p.recipient = n.recipient
WHERE n.id IN (SELECT value FROM json_each(?))`
	qOutboxDelivered = `SELECT message_id FROM deliveries WHERE message_id IN (SELECT value FROM json_each(?))`

	// A fenced write names the token and requires the lease to be live.
	qOutboxComplete = `UPDATE outbox
SET state = ?, last_reason = ?, claimed_by = NULL, claimed_until = NULL, updated_at = ?
WHERE id = ? AND token = ? AND state IN ('CLAIMED', 'PUBLISHING') AND claimed_until >= ?`
	// qOutboxCompleteLazy is qOutboxComplete for a send whose claim read
	// Fence.LazyChain, ending so that its chain does not move on: it takes
	// only while the chain's later steps still have no rows (fallback.go).
	qOutboxCompleteLazy = qOutboxComplete + ` AND fallback_plan IS NOT NULL`

	// qOutboxRetry's second value is whether the row is deferred: a
	// retry or deferral due beyond store.DeferHorizon (deferredAt).
	qOutboxRetry = `UPDATE outbox
SET state = 'PENDING', available_at = ?, deferred = ?, last_reason = ?, attempts = attempts + ?, claimed_by = NULL, claimed_until = NULL, updated_at = ?
WHERE id = ? AND token = ? AND state IN ('CLAIMED', 'PUBLISHING') AND claimed_until >= ?`
	qOutboxPublished = `UPDATE outbox
SET state = 'PUBLISHED', last_reason = '', claimed_by = NULL, claimed_until = NULL, updated_at = ?
WHERE id = ? AND token = ? AND state = 'PUBLISHING' AND claimed_until >= ?`
	// qOutboxExtend moves a held lease to now + lease (never earlier).
	qOutboxExtend = `UPDATE outbox SET claimed_until = max(claimed_until, ?)
WHERE id = ? AND token = ? AND state IN ('CLAIMED', 'PUBLISHING') AND claimed_until >= ?`
	qOutboxReclaim = `UPDATE outbox
SET state = 'PENDING', last_reason = 'CLAIM_EXPIRED', claimed_by = NULL, claimed_until = NULL, updated_at = ?
WHERE state IN ('CLAIMED', 'PUBLISHING') AND claimed_until < ?`
	// qOutboxExpire marks PENDING rows past expires_at EXPIRED; in the same
	// transaction qOutboxExpireDeliveries ends the expired messages'
	// deliveries that wait in RETRY_WAIT (nothing would claim them again),
	// conditional on that state like every delivery write, and returns them.
	// It takes at most the limit's rows, the earliest due-by first
	// (outbox_expiring).
	qOutboxExpire = `UPDATE outbox SET state = 'EXPIRED', last_reason = 'EXPIRED', updated_at = ?
WHERE rowid IN (
    SELECT rowid FROM outbox
    WHERE state = 'PENDING' AND expires_at IS NOT NULL AND expires_at <= ?
    ORDER BY expires_at LIMIT ?)
RETURNING id, message_id, tenant, lane, channel`
	qOutboxExpireDeliveries = `UPDATE deliveries
SET state = 'SUPPRESSED', reason = 'EXPIRED', next_attempt_at = NULL, claimed_by = NULL, updated_at = ?
WHERE state = 'RETRY_WAIT' AND message_id IN (SELECT value FROM json_each(?))
RETURNING message_id`
	// qOutboxBacklog counts the due PENDING rows per lane (?1 now): those
	// in the claim's index (outbox_fair, read whole as before) and the
	// deferred ones a promotion has not reached yet, one search of
	// outbox_deferred up to now per lane that has deferred rows, the lanes
	// found by a loose scan of it. One count over both would read the
	// table, and one over outbox_deferred grouped by lane would read every
	// deferred row, tomorrow's too.
	qOutboxBacklog = `WITH RECURSIVE lanes (lane) AS (
    SELECT min(lane) FROM outbox WHERE state = 'PENDING' AND deferred = 1
  UNION ALL
    SELECT (SELECT min(o.lane) FROM outbox o WHERE o.state = 'PENDING' AND o.deferred = 1 AND o.lane > l.lane) FROM lanes l WHERE l.lane IS NOT NULL
)
SELECT lane, sum(n) FROM (
    SELECT lane, count(*) AS n FROM outbox WHERE state = 'PENDING' AND deferred = 0 AND available_at <= ?1 GROUP BY lane
  UNION ALL
    SELECT l.lane, (SELECT count(*) FROM outbox o WHERE o.lane = l.lane AND o.state = 'PENDING' AND o.deferred = 1 AND o.available_at <= ?1)
    FROM lanes l WHERE l.lane IS NOT NULL
)
GROUP BY lane HAVING sum(n) > 0`
	// qOutboxPromote moves the deferred PENDING rows of lane ?1 that fall
	// due by ?2 (now plus store.DeferHorizon) into the claim's index, at
	// most ?3 of them, the earliest first (outbox_deferred). OutboxClaim
	// runs it before it claims, throttled per lane (store.Promotions).
	qOutboxPromote = `UPDATE outbox SET deferred = 0
WHERE id IN (SELECT id FROM outbox WHERE lane = ?1 AND state = 'PENDING' AND deferred = 1 AND available_at <= ?2 ORDER BY available_at LIMIT ?3)`
)

// Deliveries: the claim, the conditional result write, decisions, the stale sweep.
const (
	qDeliveryGet = `SELECT message_id, notification_id, tenant, channel, provider, state, reason, attempts, claimed_at, next_attempt_at, created_at, updated_at
FROM deliveries WHERE message_id = ?`
	// qInboxSendGet reads the notification whose inbox send is STORED
	// (store.InboxDelivery).
	qInboxSendGet = `SELECT tenant, created_at FROM notifications WHERE id = ? AND inbox_at > 0`
	// qNotificationCancelled reads a notification's cancel mark
	// (store.Cancels), for a claim under an event key: a cancelled
	// notification's send takes no key. It and qDeliveryClaimInsert read
	// the mark from the index of the marked notifications (migration 33).
	qNotificationCancelled = `SELECT EXISTS (SELECT 1 FROM notifications INDEXED BY notifications_cancelled WHERE id = ? AND cancelled_at IS NOT NULL)`
	// qDeliveryClaimInsert inserts nothing for a send whose notification
	// was cancelled (store.Cancels): the claim then finds no row and ends
	// the send SUPPRESSED(CANCELLED) instead.
	qDeliveryClaimInsert = `INSERT INTO deliveries (message_id, notification_id, tenant, channel, provider, state, attempts, claimed_by, claimed_at, created_at, updated_at)
SELECT ?1, ?2, ?3, ?4, ?5, 'SENDING', 1, ?6, ?7, ?8, ?9
WHERE NOT EXISTS (SELECT 1 FROM notifications n INDEXED BY notifications_cancelled WHERE n.id = ?2 AND n.cancelled_at IS NOT NULL)
ON CONFLICT (message_id) DO NOTHING`
	// qDeliveryRetryCancelled ends SUPPRESSED(CANCELLED) a send waiting to
	// be tried again whose notification or campaign was cancelled: it was
	// in flight at the cancel, which leaves SENDING alone, and its call
	// then failed for now (or it was PARKED and then requeued). The claim
	// runs it before qDeliveryClaimRetry, so the retry is never made.
	// ?1 now, ?2 message id.
	qDeliveryRetryCancelled = `UPDATE deliveries
SET state = 'SUPPRESSED', reason = 'CANCELLED', next_attempt_at = NULL, claimed_by = NULL, updated_at = ?1
WHERE message_id = ?2 AND state = 'RETRY_WAIT'
  AND EXISTS (SELECT 1 FROM notifications n LEFT JOIN campaigns c ON c.id = n.campaign_id
              WHERE n.id = deliveries.notification_id AND (n.cancelled_at IS NOT NULL OR c.state = 'CANCELLED'))`
	qDeliveryClaimRetry = `UPDATE deliveries
SET state = 'SENDING', attempts = attempts + 1, provider = ?, claimed_by = ?, claimed_at = ?, next_attempt_at = NULL, reason = '', updated_at = ?
WHERE message_id = ? AND state = 'RETRY_WAIT' AND next_attempt_at <= ?
RETURNING attempts`
	qDeliveryRecord = `UPDATE deliveries
SET state = ?, reason = ?, next_attempt_at = ?, claimed_by = NULL, updated_at = ?, provider_ref = nullif(?, '')
WHERE message_id = ? AND state = 'SENDING' AND attempts = ?`
	// qAttemptInsert logs the call once: a result written again after a
	// lost answer finds its attempt logged and adds nothing.
	qAttemptInsert = `INSERT INTO delivery_attempts (message_id, attempt, owner, started_at, finished_at, class, reason, duration_ms)
VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (message_id, attempt) DO NOTHING`
	// qDeliveryDecide: no row yet, or a waiting one (RETRY_WAIT; PARKED
	// only when the decision is SUPPRESSED, never PARKED over PARKED).
	qDeliveryDecide = `INSERT INTO deliveries (message_id, notification_id, tenant, channel, state, reason, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (message_id) DO UPDATE SET state = excluded.state, reason = excluded.reason, next_attempt_at = NULL, updated_at = excluded.updated_at
WHERE deliveries.state = 'RETRY_WAIT' OR (deliveries.state = 'PARKED' AND excluded.state <> 'PARKED')`
	// qDeliverySweepStale returns each claim it turned with its channel
	// and its notification's lane (the labels the sweep counts it under),
	// its attempt and when it was claimed (the attempt the sweep logs,
	// store.StaleSweepOwner).
	qDeliverySweepStale = `UPDATE deliveries SET state = 'UNKNOWN', reason = 'STALE_CLAIM', claimed_by = NULL, updated_at = ?
WHERE state = 'SENDING' AND claimed_at < ?
RETURNING message_id, tenant, coalesce((SELECT n.lane FROM notifications n WHERE n.id = deliveries.notification_id), ''), channel,
          attempts, claimed_at`
)

// Profiles.
const (
	qProfileGet = `SELECT data, updated_at FROM profiles WHERE tenant = ? AND recipient = ?`
	qProfilePut = `INSERT INTO profiles (tenant, recipient, data, updated_at) VALUES (?, ?, ?, ?)
ON CONFLICT (tenant, recipient) DO UPDATE SET data = excluded.data, updated_at = excluded.updated_at`
)

// Readiness.
const (
	// qPing moves the probe row on (Store.Ping): a page to write.
	qPing = `UPDATE store_probe SET checks = checks + 1 WHERE id = 1`
)

// writeQueries are prepared on the writer's connection after their first
// run (stmts).
var writeQueries = append([]string{
	qPing,
	qIdemInsert, qIdemGet, qIdemReplace, qIdemSweep,
	qNotificationInsert, qNotificationByDedup, qOutboxInsert,
	qOutboxPromote, qOutboxLaneTenants, qOutboxClaim, qOutboxClaimOneTenant, qOutboxJobs, qOutboxDelivered, qOutboxComplete, qOutboxCompleteLazy, qOutboxRetry, qOutboxPublished, qOutboxExtend, qOutboxReclaim, qOutboxExpire, qOutboxExpireDeliveries,
	qDeliveryGet, qNotificationCancelled, qDeliveryClaimInsert, qDeliveryClaimRetry, qDeliveryRecord, qAttemptInsert,
	qDeliveryDecide, qDeliverySweepStale, qProfilePut, qOutboxInsertClaimed, qProfileGet,
}, append(append(inboxQueries, deviceQueries...), fallbackQueries...)...)

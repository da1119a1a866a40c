package postgres

import "github.com/heraldhq/herald/store"

// SQL run by the PostgreSQL driver, grouped by table. Every statement that
// needs "now" reads it as coalesce($1::timestamptz, now()): $1 is NULL in
// production, so the database server's clock decides, and the fake clock's
// time in tests. Every parameter carries an explicit cast so its type never
// depends on inference.
//
// Statements that decide ownership by time (the outbox claim, every fenced
// write, OutboxExtend, the reclaim and expiry sweeps, the delivery claim,
// the result write and the stale sweep) read clock_timestamp() instead of
// now(): the statement's own time. now() is its transaction's start, and
// the pipeline runs a whole batch in one implicit transaction, so a
// statement queued behind another's lock wait would read a time long past,
// and a fenced write could pass a lease that had already run out. Inline,
// clock_timestamp() is read for each row it decides, after any wait for
// that row's lock. Where the time bounds an index scan it is read once, as
// (SELECT coalesce($1::timestamptz, clock_timestamp())): an init plan, whose
// value the scan can use as a key, where a volatile call would only filter.
//
// Most methods are one statement, autocommitted: data-modifying CTEs make a
// multi-table write atomic without BEGIN/COMMIT round trips.

// Notifications and idempotency keys.
const (
	// qNotificationCreate is the whole intake write in one statement:
	//
	//   g  checks that the recipient's profile language is still $23, the
	//      one the inbox text was chosen for (NULL: no text depends on it);
	//      if it changed, nothing is written and the caller chooses again.
	//   k  takes the idempotency key: inserts it, or replaces it if it has
	//      expired (ON CONFLICT … DO UPDATE … WHERE expired). A live key makes
	//      k return nothing, and then nothing else is written. A key another
	//      transaction is inserting makes k wait for it to commit or roll back.
	//   n  inserts the notification if the key was taken (or there is none);
	//      a dedup_key that exists makes it return nothing.
	//   ic bumps the recipient's inbox counter (seq + 1, unread + 1) if the
	//      notification was written and $19 carries an inbox text; the row's
	//      lock, held to commit, orders the recipient's items.
	//   ii inserts the inbox item with that seq; the notification's
	//      inbox_at records its send, STORED (store, inboxsend.go).
	//   o  inserts one outbox row per channel, in channel order (the inbox
	//      is not in $16): PENDING, a later fallback step's WAITING. Push
	//      has one per active device of the recipient (channel and message
	//      id suffixed .<device id>, heraldtype.DeviceSend), or the one
	//      when there is none: the LEFT JOIN on devices, by the key's
	//      (tenant, recipient) prefix, for the push channel's row only.
	//   w  NOTIFYs the lane's channel if a row is due now and $18 names one
	//      (see notifier); PostgreSQL delivers it when the statement's
	//      transaction commits.
	//
	// The final SELECT reports what happened. When nothing was written, the
	// caller reads the key or the dedup row that blocked it with a new
	// statement, which also sees a row committed by a transaction this one
	// waited for; the common case, a new request, pays for no such look-up.
	//
	// $1 now, $2 tenant, $3 idempotency key ('' for none), $4 request hash,
	// $5 key TTL, $6 response, $7 id, $8 recipient, $9 event id, $10 kind,
	// $11 lane, $12 params, $13 dedup key, $14 send_at, $15 expires_at,
	// $16 channels, $17 message ids (parallel to $16), $18 wake-up channel ('' for none),
	// $19 inbox title (NULL: no inbox item), $20 inbox body, $21 the text's locale,
	// $22 the inbox item's message id, $23 the profile language the text was
	// chosen for (NULL: none), $24 each channel's fallback step (parallel
	// to $16; 0 off a chain: chainArgs, fallback.go), the first step's
	// rows PENDING and a later step's WAITING, $25 a lazy chain's later
	// channels, comma-joined ('' for none), written on the first step's
	// rows as their fallback_plan (the later steps are then not in $16),
	// $26 the inbox's place among the kind's channels (0: none; the
	// notification's inbox_at, store.InboxAt), $27 the scope ('' none),
	// written on the notification and its outbox rows, $28 the owner its
	// one row is written CLAIMED by (store.NotificationCreateParams.Claim:
	// only a Handable request's, off a chain, to no device, with no
	// send_at; NULL: none) for $29, its lease, in state $30 (CLAIMED, or
	// PUBLISHING for a relay: store.CreateClaim.State). The row handed over comes
	// back with its id, its token (1) and the recipient's profile, as a
	// claim returns them.
	qNotificationCreate = `WITH g AS (
    SELECT $23::text IS NULL
           OR coalesce((SELECT data->>'language' FROM profiles WHERE tenant = $2::text AND recipient = $8::text), '') = $23::text AS ok
),
k AS (
    INSERT INTO idempotency_keys AS ik (tenant, key, request_hash, notification_id, response, created_at, expires_at)
    SELECT $2::text, $3::text, $4::text, $7::text, $6::bytea, coalesce($1::timestamptz, now()), coalesce($1::timestamptz, now()) + $5::interval
    WHERE $3::text <> '' AND (SELECT ok FROM g)
    ON CONFLICT (tenant, key) DO UPDATE
        SET request_hash = excluded.request_hash, notification_id = excluded.notification_id, response = excluded.response,
            created_at = excluded.created_at, expires_at = excluded.expires_at
        WHERE ik.expires_at <= excluded.created_at
    RETURNING 1
),
n AS (
    INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, dedup_key, send_at, expires_at, created_at, inbox_at, scope)
    SELECT $7::text, $2::text, $8::text, $9::text, $10::text, $11::text, $12::json, $13::text, $14::timestamptz, $15::timestamptz,
           coalesce($1::timestamptz, now()), $26::smallint, $27::text
    WHERE ($3::text = '' OR EXISTS (SELECT 1 FROM k)) AND (SELECT ok FROM g)
    ON CONFLICT (tenant, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
    RETURNING id, created_at
),
ic AS (
    INSERT INTO inbox_counters AS ic (tenant, recipient, seq, unread)
    SELECT $2::text, $8::text, 1, 1 FROM n WHERE $19::text IS NOT NULL
    ON CONFLICT (tenant, recipient) DO UPDATE SET seq = ic.seq + 1, unread = ic.unread + 1
    RETURNING seq
),
ii AS (
    INSERT INTO inbox_items (tenant, recipient, seq, message_id, notification_id, kind, title, body, locale, created_at)
    SELECT $2::text, $8::text, ic.seq, $22::text, n.id, $10::text, $19::text, $20::text, $21::text, n.created_at
    FROM n, ic
),
o AS (
    INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, last_reason, available_at, expires_at, created_at, updated_at,
                        fallback_step, fallback_plan, scope, deferred, claimed_by, claimed_until, token)
    SELECT n.id, c.message_id || coalesce('.' || dv.device_id, ''), $2::text, $11::text, c.channel || coalesce('.' || dv.device_id, ''),
           CASE WHEN h.hand THEN $30::text WHEN c.step > 1 THEN 'WAITING' ELSE 'PENDING' END, '',
           greatest(n.created_at, $14::timestamptz), $15::timestamptz, n.created_at, n.created_at, nullif(c.step, 0),
           CASE WHEN c.step = 1 THEN string_to_array(nullif($25::text, ''), ',') END, $27::text,
           coalesce(c.step <= 1 AND $14::timestamptz > n.created_at + ` + qDeferHorizon + `, false),
           CASE WHEN h.hand THEN $28::text END, CASE WHEN h.hand THEN n.created_at + $29::interval END, CASE WHEN h.hand THEN 1 ELSE 0 END
    FROM n, unnest($16::text[], $17::text[], $24::integer[]) WITH ORDINALITY AS c (channel, message_id, step, ord)
        LEFT JOIN devices dv ON c.channel = 'push' AND dv.tenant = $2::text AND dv.recipient = $8::text AND dv.active
        CROSS JOIN LATERAL (SELECT $28::text IS NOT NULL AND c.step = 0 AND dv.device_id IS NULL AND $14::timestamptz IS NULL AS hand) h
    ORDER BY c.ord, dv.device_id
    RETURNING state = 'PENDING' AND available_at <= created_at AS due, CASE WHEN claimed_by IS NOT NULL THEN id END AS hid, token
),
w AS (SELECT pg_notify($18::text, '') FROM o WHERE o.due AND $18::text <> '' LIMIT 1),
h AS (SELECT o.hid, o.token FROM o WHERE o.hid IS NOT NULL LIMIT 1)
SELECT EXISTS (SELECT 1 FROM k), (SELECT id FROM n), coalesce((SELECT bool_or(due) FROM o), false), (SELECT count(*) FROM w), (SELECT ok FROM g),
       h.hid, h.token, p.data, p.updated_at
FROM (SELECT 1) one LEFT JOIN h ON true
LEFT JOIN LATERAL (SELECT p.data, p.updated_at FROM profiles p WHERE h.hid IS NOT NULL AND p.tenant = $2::text AND p.recipient = $8::text LIMIT 1) p ON true`

	// qNotificationCreateMany is qNotificationCreate for several requests at
	// once (see createMerge): the pipeline runs the creates waiting in one
	// batch as this one statement, which PostgreSQL plans and starts once.
	// Each request is a row of r, its channels rows of c. It writes what the
	// single statements would, in order, in one transaction: keys first, in
	// key order (two statements taking the same keys take them in the same
	// order, so they wait rather than deadlock), then the notifications of
	// the requests whose key was taken (or that have none), in dedup-key
	// order, then their outbox rows, then one NOTIFY per lane that has a row
	// due now and was asked to wake. It returns one row per request, in r's
	// order, with the columns of qNotificationCreate after the request's id.
	//
	// A request with both an idempotency key and a dedup key never comes
	// here: it needs its own transaction (createInTx). Two requests that
	// would both take one key (a new key, or an expired one) fail the
	// statement (ON CONFLICT DO UPDATE cannot touch one row twice); the
	// pipeline then runs each request alone. Replays of a live key share a
	// statement like any other requests.
	//
	// $1 now; per request: $2 tenant, $3 idempotency key, $4 request hash,
	// $5 key TTL, $6 response, $7 id, $8 recipient, $9 event id, $10 kind,
	// $11 lane, $12 params, $13 dedup key, $14 send_at, $15 expires_at,
	// $16 wake-up channel, $20 inbox title (NULL: none), $21 inbox body,
	// $22 its locale, $23 the inbox item's message id, $24 the profile
	// language the text was chosen for (NULL: none; g checks it as in
	// qNotificationCreate); per channel: $17 request's position (1-based),
	// $18 channel, $19 message id, $25 fallback step (0 off a chain), $26
	// its request's lazy plan (qNotificationCreate's $25); per request
	// again: $27 the inbox's place (qNotificationCreate's $26), $28 the
	// scope, $29, $30 and $31 the claim's owner, lease and state
	// (qNotificationCreate's $28, $29 and $30). g reads a request's profile
	// only when its inbox text needs the language or its row is handed
	// over, which gets the profile back.
	//
	// g reads each request's profile by its key (LATERAL … LIMIT 1): as a
	// plain join, a generic plan made while profiles was small scanned it
	// for every batch of creates (growth_plan_test.go).
	//
	// The inbox items of one recipient's requests take consecutive seqs in
	// r's order from one bump of its counter row; the counter rows are
	// locked in (tenant, recipient) order, so two statements wait rather
	// than deadlock there too.
	qNotificationCreateMany = `WITH r AS MATERIALIZED (
    SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $5::interval[], $6::bytea[], $7::text[], $8::text[], $9::text[],
                         $10::text[], $11::text[], $12::text[], $13::text[], $14::timestamptz[], $15::timestamptz[], $16::text[],
                         $20::text[], $21::text[], $22::text[], $23::text[], $24::text[], $27::smallint[], $28::text[],
                         $29::text[], $30::interval[], $31::text[])
        WITH ORDINALITY AS r (tenant, key, hash, ttl, response, id, recipient, event_id, kind, lane, params, dedup, send_at, expires_at, wake,
                              ititle, ibody, ilocale, imessage, lang, iat, scope, owner, lease, hstate, ord)
),
g AS MATERIALIZED (
    SELECT r.ord, r.lang IS NULL OR coalesce(p.data->>'language', '') = r.lang AS ok, p.data, p.updated_at
    FROM r LEFT JOIN LATERAL (SELECT p.data, p.updated_at FROM profiles p
                              WHERE (r.lang IS NOT NULL OR r.owner IS NOT NULL) AND p.tenant = r.tenant AND p.recipient = r.recipient LIMIT 1) p ON true
),
k AS (
    INSERT INTO idempotency_keys AS ik (tenant, key, request_hash, notification_id, response, created_at, expires_at)
    SELECT r.tenant, r.key, r.hash, r.id, r.response, coalesce($1::timestamptz, now()), coalesce($1::timestamptz, now()) + r.ttl
    FROM r JOIN g ON g.ord = r.ord WHERE r.key <> '' AND g.ok
    ORDER BY r.tenant, r.key
    ON CONFLICT (tenant, key) DO UPDATE
        SET request_hash = excluded.request_hash, notification_id = excluded.notification_id, response = excluded.response,
            created_at = excluded.created_at, expires_at = excluded.expires_at
        WHERE ik.expires_at <= excluded.created_at
    RETURNING ik.notification_id AS id
),
n AS (
    INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, dedup_key, send_at, expires_at, created_at, inbox_at, scope)
    SELECT r.id, r.tenant, r.recipient, r.event_id, r.kind, r.lane, r.params::json, r.dedup, r.send_at, r.expires_at,
           coalesce($1::timestamptz, now()), r.iat, r.scope
    FROM r JOIN g ON g.ord = r.ord WHERE (r.key = '' OR r.id IN (SELECT id FROM k)) AND g.ok
    ORDER BY r.tenant, r.dedup, r.ord
    ON CONFLICT (tenant, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
    RETURNING id, created_at
),
ir AS MATERIALIZED (
    SELECT r.tenant, r.recipient, r.id, r.kind, r.ititle, r.ibody, r.ilocale, r.imessage, n.created_at,
           row_number() OVER (PARTITION BY r.tenant, r.recipient ORDER BY r.ord) AS rn,
           count(*) OVER (PARTITION BY r.tenant, r.recipient) AS cnt
    FROM r JOIN n ON n.id = r.id
    WHERE r.ititle IS NOT NULL
),
ic AS (
    INSERT INTO inbox_counters AS ic (tenant, recipient, seq, unread)
    SELECT tenant, recipient, count(*), count(*) FROM ir GROUP BY tenant, recipient
    ORDER BY tenant, recipient
    ON CONFLICT (tenant, recipient) DO UPDATE SET seq = ic.seq + excluded.seq, unread = ic.unread + excluded.unread
    RETURNING tenant, recipient, seq
),
ii AS (
    INSERT INTO inbox_items (tenant, recipient, seq, message_id, notification_id, kind, title, body, locale, created_at)
    SELECT ir.tenant, ir.recipient, ic.seq - ir.cnt + ir.rn, ir.imessage, ir.id, ir.kind, ir.ititle, ir.ibody, ir.ilocale, ir.created_at
    FROM ir JOIN ic ON ic.tenant = ir.tenant AND ic.recipient = ir.recipient
),
o AS (
    INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, last_reason, available_at, expires_at, created_at, updated_at,
                        fallback_step, fallback_plan, scope, deferred, claimed_by, claimed_until, token)
    SELECT n.id, c.message_id || coalesce('.' || dv.device_id, ''), r.tenant, r.lane, c.channel || coalesce('.' || dv.device_id, ''),
           CASE WHEN h.hand THEN r.hstate WHEN c.step > 1 THEN 'WAITING' ELSE 'PENDING' END, '',
           greatest(n.created_at, r.send_at), r.expires_at, n.created_at, n.created_at, nullif(c.step, 0),
           CASE WHEN c.step = 1 THEN string_to_array(nullif(c.plan, ''), ',') END, r.scope,
           coalesce(c.step <= 1 AND r.send_at > n.created_at + ` + qDeferHorizon + `, false),
           CASE WHEN h.hand THEN r.owner END, CASE WHEN h.hand THEN n.created_at + r.lease END, CASE WHEN h.hand THEN 1 ELSE 0 END
    FROM unnest($17::integer[], $18::text[], $19::text[], $25::integer[], $26::text[]) WITH ORDINALITY AS c (req, channel, message_id, step, plan, ord)
    JOIN r ON r.ord = c.req JOIN n ON n.id = r.id
    LEFT JOIN devices dv ON c.channel = 'push' AND dv.tenant = r.tenant AND dv.recipient = r.recipient AND dv.active
    CROSS JOIN LATERAL (SELECT r.owner IS NOT NULL AND c.step = 0 AND dv.device_id IS NULL AND r.send_at IS NULL AS hand) h
    ORDER BY c.ord, dv.device_id
    RETURNING notification_id, state = 'PENDING' AND available_at <= created_at AS due, CASE WHEN claimed_by IS NOT NULL THEN id END AS hid, token
),
w AS (
    SELECT pg_notify(x.wake, '') FROM (SELECT DISTINCT r.wake FROM r JOIN o ON o.notification_id = r.id WHERE o.due AND r.wake <> '') x
),
d AS (SELECT notification_id, bool_or(due) AS due, max(hid) AS hid, max(token) FILTER (WHERE hid IS NOT NULL) AS token
      FROM o GROUP BY notification_id)
SELECT r.id, r.key <> '' AND r.id IN (SELECT id FROM k), n.id, coalesce(d.due, false),
       CASE WHEN r.wake <> '' AND coalesce(d.due, false) THEN (SELECT count(*) FROM w) ELSE 0 END, g.ok,
       d.hid, d.token, CASE WHEN d.hid IS NOT NULL THEN g.data END, CASE WHEN d.hid IS NOT NULL THEN g.updated_at END
FROM r JOIN g ON g.ord = r.ord LEFT JOIN n ON n.id = r.id LEFT JOIN d ON d.notification_id = r.id
ORDER BY r.ord`

	// qIdemGet reads a key in a new statement (so a new snapshot, under READ
	// COMMITTED): it sees a key a concurrent transaction committed while
	// qNotificationCreate waited for it.
	qIdemGet = `SELECT request_hash, response, expires_at > coalesce($3::timestamptz, now())
FROM idempotency_keys WHERE tenant = $1::text AND key = $2::text`
	qIdemSweep = `DELETE FROM idempotency_keys WHERE expires_at <= coalesce($1::timestamptz, now())`

	qNotificationByDedup = `SELECT id FROM notifications WHERE tenant = $1::text AND dedup_key = $2::text`

	// qNotificationCancelMark marks a notification cancelled
	// (store.Cancels), once: a row marked already is not written again. It
	// returns whether the notification exists, as the statement's snapshot
	// shows it, marked or not (u runs whether or not it is read).
	// $1 id, $2 tenant, $3 now.
	qNotificationCancelMark = `WITH u AS (
    UPDATE notifications SET cancelled_at = coalesce($3::timestamptz, now())
    WHERE id = $1::text AND tenant = $2::text AND cancelled_at IS NULL
)
SELECT EXISTS (SELECT 1 FROM notifications WHERE id = $1::text AND tenant = $2::text)`

	// qNotificationGet reads the notification, its planned sends and their
	// deliveries from one snapshot, with the time it read them.
	qNotificationGet = `SELECT n.id, n.tenant, n.recipient, n.event_id, n.kind, n.lane, n.send_at, n.expires_at, n.created_at,
       coalesce($3::timestamptz, now()), n.inbox_at,
       o.message_id, o.channel, o.state, o.last_reason, o.available_at, o.updated_at,
       d.notification_id, d.tenant, d.provider, d.state, d.reason, d.attempts, d.claimed_at, d.next_attempt_at, d.created_at, d.updated_at,
       o.fallback_step, o.fallback_after, o.fallback_plan, n.scope
FROM notifications n
LEFT JOIN outbox o ON o.notification_id = n.id
LEFT JOIN deliveries d ON d.message_id = o.message_id
WHERE n.id = $1::text AND n.tenant = $2::text
ORDER BY o.id`
)

// Outbox: the claim and the fenced writes.
const (
	// qOutboxClaim leases due rows in one autocommitted statement, shared
	// fairly between the lane's tenants and, inside a tenant, between its
	// scopes: a tenant's backlog does not hold up another tenant's rows
	// behind it (issue 12: oldest-first across tenants made a small tenant
	// wait a minute behind a big one's 20,000), nor a scope's another
	// scope's of its tenant, and a tenant gains no share of the lane by
	// spreading its rows over scopes.
	//
	//	groups   the lane's (tenant, scope) pairs with PENDING rows not
	//	         deferred (rows due beyond the horizon are not in
	//	         outbox_fair until promoted: store/promote.go), one
	//	         index probe each (a loose scan of outbox_fair, stepping on
	//	         the row value (tenant, scope), which bounds the index scan
	//	         by both columns), due or not. A plain index scan, not
	//	         index-only (notification_id is not in the index): a
	//	         claimed row leaves a dead entry in the partial index until
	//	         vacuum, at the front of its group's range, and only a plain
	//	         scan marks the dead entries it steps over so the next claim
	//	         skips them; index-only, every claim fetched each one's heap
	//	         page again, and a backlog's drain fell to 40%. Marked
	//	         entries are still read, on the index's pages: a drain's
	//	         claims grow dearer with the rows claimed since the last
	//	         vacuum (54 pages a probe at a drain's start, 765 after
	//	         100,000 rows; docs/postgresql.md, "Drains and vacuum");
	//	busy     each group's rows in flight in the lane (CLAIMED or
	//	         PUBLISHING: at most every claimer's concurrency, read
	//	         through outbox_leased with a plain index scan, which the
	//	         claim pool's settings make sure of, for the same reason:
	//	         claimPoolConfig), counted only when two groups or
	//	         more have rows waiting (a one-time filter): with one, there
	//	         is nothing to share, and the count was a fifth of a claim;
	//	shares   per group not skipped ($7, $11): its rows in flight, its
	//	         tenant's (all of them, in every scope: a drained or skipped
	//	         scope's sends count for its tenant), and the scope the
	//	         caller served last in its tenant ($9/$10,
	//	         OutboxClaimParams.Scopes), all worked out per group, not per
	//	         row (as joins of the candidates, with a sort each, they made
	//	         the claim 0.5 ms dearer);
	//	caps     per tenant with at least LIMIT groups whose first row is
	//	         due and unexpired (the loose scan read it: a candidate of
	//	         cand's walk in the same snapshot),
	//	         the LIMIT-th smallest of their sn + 1 (smax): a row whose
	//	         sturn is past it has at least LIMIT rows of its tenant
	//	         before it, and no tenant gives a claim more than LIMIT, so
	//	         a group need read only smax - sn rows. 100 idle clinics
	//	         with 200 due rows each made a claim of 32 read 3,200 rows
	//	         (28.6 ms) where one of each (100 rows, 3.5 ms) gives the
	//	         same claim; skipped while there are fewer groups than
	//	         LIMIT (a one-time filter). The same rows are claimed as
	//	         when every group read LIMIT rows;
	//	cand     up to LIMIT due rows per group (its cap, if any), oldest first, walked on
	//	         outbox_fair (its ORDER BY is the index's, so no plan prefers
	//	         another index and filters a big group's rows out of a small
	//	         one's walk) from the group's oldest row to the first not yet
	//	         due (now is written out, so it bounds the index scan: a
	//	         group's rows not yet due are never read), each numbered by
	//	         its group's rows in flight plus its place (sturn). The walk
	//	         starts at the row the group's probe found ((available_at,
	//	         id) >= its first, an index condition; the same snapshot and
	//	         the probe's own conditions, so the same rows): the dead
	//	         entries a drain's claimed rows
	//	         leave at the front of the group's range until vacuum are
	//	         stepped over once a claim, by the probe, not twice;
	//	turns    each tenant's candidates numbered in turn by sturn, equal
	//	         ones going round the tenant's scopes from the first after
	//	         the one served last, plus the tenant's rows in flight: a
	//	         tenant with nothing in flight takes the first turns, and its
	//	         turns go round its scopes;
	//	due      the LIMIT rows with the lowest turns (at most $12 of $7's
	//	         rows when it skips one of its scopes: SkipCap), equal turns
	//	         going round the tenants from the first after $8 (the tenant the
	//	         caller served last, OutboxClaimParams.After; by age, a big
	//	         tenant's older rows won every tie of a one-row claim), each
	//	         locked FOR UPDATE SKIP LOCKED by its key and re-checked
	//	         PENDING (on the version locked); MATERIALIZED, so it runs
	//	         exactly once. A row another claimer holds is skipped:
	//	         that claim takes fewer rows, and its claimer claims again
	//	         when a send ends (one that took none waits for a wake-up
	//	         or its poll: dispatch, "Rows handed over at intake") or a
	//	         wake-up comes.
	//	claimed  the UPDATE of exactly the locked row versions, by ctid (a
	//	         TID scan on the claim's connections, where sequential scans
	//	         are priced out: claimPoolConfig).
	//
	// Each step is shaped so that no plan can walk the lane, whatever the
	// statistics say: a prepared claim's plan made while the outbox was
	// nearly empty (a new database, the minute before autoanalyze) took
	// "key IN (chosen)" as a scan of the lane or the table, 100,000 rows a
	// claim. The lock is a LATERAL lookup per chosen row by the primary key
	// alone, its LIMIT keeping the state check out of it (with "state =
	// 'PENDING'" inside it, the partial index outbox_fair qualified and a
	// plan walked it per row). OutboxClaim runs it prepared, its generic
	// plan made once per connection of the claim pool (claimPoolConfig).
	//
	// The UPDATE bumps the fencing token; the outer SELECT joins the jobs
	// and returns them oldest first, each with whether a delivery row exists,
	// the recipient's profile and the notification's cancel mark
	// (heraldtype.Known), which spares the sender two reads per job and its
	// rules on a cancelled one, whether the row is on no fallback chain
	// (Fence.OffChain), and whether it is the only send of a lazy chain's
	// unwritten first step (Fence.LazyChain, fallback.go: a probe of the
	// notification's rows, for a row with a plan only). Its joins
	// are LATERAL lookups with LIMIT 1, one
	// index probe per claimed row: a prepared claim's generic plan,
	// estimating the claimed rows from LIMIT $3, otherwise hashed the whole
	// notifications table on every claim.
	//
	// $1 now, $2 lane, $3 limit, $4 owner, $5 lease, $6 state (CLAIMED or
	// PUBLISHING), $7 a tenant whose rows it leaves (OutboxClaimParams.Skip;
	// NULL none), $8 the tenant after which ties start (After; '' none),
	// $9 and $10 tenants and, parallel, the scope after which each
	// tenant's ties start (Scopes), $11 the only scope of $7 it leaves
	// (SkipScope; NULL all), $12 how many of $7's other rows it may take
	// (SkipCap; NULL no cap).
	qOutboxClaim = qOutboxClaimLease + `SELECT c.id, c.token, c.notification_id, c.message_id, c.channel, c.attempts,
       n.tenant, n.recipient, n.event_id, n.kind, n.params, n.expires_at, c.scope,
       EXISTS (SELECT 1 FROM deliveries d WHERE d.message_id = c.message_id), p.data, p.updated_at, c.off_chain,
       CASE WHEN c.planned THEN NOT EXISTS (SELECT 1 FROM outbox s WHERE s.notification_id = c.notification_id AND s.fallback_step = 1
                                                                     AND s.channel <> c.channel) ELSE false END,
       n.cancelled_at IS NOT NULL
FROM claimed c
CROSS JOIN LATERAL (SELECT * FROM notifications n WHERE n.id = c.notification_id LIMIT 1) n
LEFT JOIN LATERAL (SELECT p.data, p.updated_at FROM profiles p WHERE p.tenant = n.tenant AND p.recipient = n.recipient LIMIT 1) p ON true
ORDER BY c.available_at, c.id`
	// qOutboxClaimPublishing is the relay's claim: the relay publishes the
	// job and reads nothing for a sender but whether the row is on no
	// fallback chain (heraldtype.Job.OffChain, which the message carries).
	qOutboxClaimPublishing = qOutboxClaimLease + `SELECT c.id, c.token, c.notification_id, c.message_id, c.channel, c.attempts,
       n.tenant, n.recipient, n.event_id, n.kind, n.params, n.expires_at, c.scope, c.off_chain
FROM claimed c
CROSS JOIN LATERAL (SELECT * FROM notifications n WHERE n.id = c.notification_id LIMIT 1) n
ORDER BY c.available_at, c.id`
	// qOutboxClaimPublishingProfiles is the relay's claim with each job's
	// recipient profile, for the relay's gate (OutboxClaimParams.Profiles).
	qOutboxClaimPublishingProfiles = qOutboxClaimLease + `SELECT c.id, c.token, c.notification_id, c.message_id, c.channel, c.attempts,
       n.tenant, n.recipient, n.event_id, n.kind, n.params, n.expires_at, c.scope, c.off_chain, p.data, p.updated_at
FROM claimed c
CROSS JOIN LATERAL (SELECT * FROM notifications n WHERE n.id = c.notification_id LIMIT 1) n
LEFT JOIN LATERAL (SELECT p.data, p.updated_at FROM profiles p WHERE p.tenant = n.tenant AND p.recipient = n.recipient LIMIT 1) p ON true
ORDER BY c.available_at, c.id`
	qOutboxClaimLease = `WITH RECURSIVE groups (tenant, scope, first, first_id, first_expires) AS (
    (SELECT tenant, scope, available_at, id, expires_at FROM outbox WHERE lane = $2::text AND state = 'PENDING' AND NOT deferred AND notification_id <> ''
     ORDER BY lane, tenant, scope, available_at, id LIMIT 1)
  UNION ALL
    SELECT s.tenant, s.scope, s.available_at, s.id, s.expires_at FROM groups g CROSS JOIN LATERAL (
        SELECT o.tenant, o.scope, o.available_at, o.id, o.expires_at FROM outbox o
        WHERE o.lane = $2::text AND o.state = 'PENDING' AND NOT o.deferred AND (o.tenant, o.scope) > (g.tenant, g.scope) AND o.notification_id <> ''
        ORDER BY o.lane, o.tenant, o.scope, o.available_at, o.id LIMIT 1
    ) s
),
busy AS (
    SELECT tenant, scope, count(*) AS n FROM outbox WHERE state IN ('CLAIMED', 'PUBLISHING') AND lane = $2::text
      AND (SELECT count(*) FROM groups) > 1
    GROUP BY tenant, scope
),
shares AS (
    SELECT g.tenant, g.scope, g.first, g.first_id, coalesce(b.n, 0) AS sn, coalesce(tb.n, 0) AS tn, m.scope AS last,
           g.first <= (SELECT coalesce($1::timestamptz, clock_timestamp()))
             AND (g.first_expires IS NULL OR g.first_expires > (SELECT coalesce($1::timestamptz, clock_timestamp()))) AS due
    FROM groups g
    LEFT JOIN busy b ON b.tenant = g.tenant AND b.scope = g.scope
    LEFT JOIN (SELECT tenant, sum(n) AS n FROM busy GROUP BY tenant) tb ON tb.tenant = g.tenant
    LEFT JOIN unnest($9::text[], $10::text[]) AS m (tenant, scope) ON m.tenant = g.tenant
    WHERE NOT coalesce(g.tenant = $7::text AND ($11::text IS NULL OR g.scope = $11::text), false)
),
caps AS (
    SELECT tenant, sn + 1 AS smax
    FROM (SELECT tenant, sn, row_number() OVER (PARTITION BY tenant ORDER BY sn) AS rn FROM shares
          WHERE due AND (SELECT count(*) FROM groups) >= $3::integer) d
    WHERE rn = $3::integer
),
cand AS (
    SELECT g.tenant, g.scope, g.tn, g.last, c.notification_id, c.channel, c.available_at, c.id,
           g.sn + row_number() OVER (PARTITION BY g.tenant, g.scope ORDER BY c.available_at, c.id) AS sturn
    FROM shares g
    LEFT JOIN caps k ON k.tenant = g.tenant
    CROSS JOIN LATERAL (
        SELECT o.notification_id, o.channel, o.available_at, o.id FROM outbox o
        WHERE o.lane = $2::text AND o.tenant = g.tenant AND o.scope = g.scope AND o.state = 'PENDING' AND NOT o.deferred
          AND (o.available_at, o.id) >= (g.first, g.first_id) AND o.notification_id <> ''
          AND o.available_at <= (SELECT coalesce($1::timestamptz, clock_timestamp()))
          AND (o.expires_at IS NULL OR o.expires_at > (SELECT coalesce($1::timestamptz, clock_timestamp())))
        ORDER BY o.lane, o.tenant, o.scope, o.available_at, o.id
        LIMIT greatest(0, least($3::integer, coalesce(k.smax - g.sn, $3::integer)))
    ) c
),
turns AS (
    SELECT tenant, notification_id, channel, available_at, id, tn,
           tn + row_number() OVER (PARTITION BY tenant
               ORDER BY sturn, scope <= coalesce(last, ''), scope, available_at, id) AS turn
    FROM cand
),
due AS MATERIALIZED (
    SELECT o.tid
    FROM (SELECT notification_id, channel FROM turns
          WHERE $12::integer IS NULL OR tenant IS DISTINCT FROM $7::text OR turn - tn <= $12::integer
          ORDER BY turn, tenant <= $8::text, tenant, available_at, id LIMIT $3::integer) pick
    CROSS JOIN LATERAL (
        SELECT x.ctid AS tid, x.state, x.deferred FROM outbox x
        WHERE x.notification_id = pick.notification_id AND x.channel = pick.channel
        LIMIT 1
        FOR UPDATE SKIP LOCKED
    ) o
    WHERE o.state = 'PENDING' AND NOT o.deferred
),
claimed AS (
    UPDATE outbox o
    SET state = $6::text, claimed_by = $4::text, claimed_until = coalesce($1::timestamptz, clock_timestamp()) + $5::interval,
        token = o.token + 1, updated_at = coalesce($1::timestamptz, clock_timestamp())
    WHERE o.ctid = ANY (ARRAY(SELECT tid FROM due))
    RETURNING o.id, o.token, o.notification_id, o.message_id, o.channel, o.attempts, o.available_at, o.fallback_plan IS NOT NULL AS planned,
        o.fallback_step IS NULL AS off_chain, o.scope
)
`

	// A fenced write names the token and requires the lease to be live by
	// the database's clock at the statement's own time: a claimer that
	// returns after its lease ran out writes nothing, even if nobody has
	// taken the row since.
	//
	// The state and lease conditions are written as expressions (state || '',
	// claimed_until + interval '0 s') so that no index can serve them: only
	// the primary key, (notification_id, channel), drives these statements. Otherwise the planner, whose
	// statistics for a queue table are usually stale, may believe the
	// partial index outbox_leased holds one row and walk every live lease to
	// find one row — with a relay holding 20,000 leases, a 500-row mark took
	// 1.6 s instead of 8 ms. qDeliveryRecord guards deliveries_sending alike.

	// $1 now, $2 state, $3 reason, $4 notification id, $5 channel, $6 token.
	qOutboxComplete = `UPDATE outbox
SET state = $2::text, last_reason = $3::text, claimed_by = NULL, claimed_until = NULL, updated_at = coalesce($1::timestamptz, clock_timestamp())
WHERE notification_id = $4::text AND channel = $5::text AND token = $6::bigint
  AND state || '' IN ('CLAIMED', 'PUBLISHING') AND claimed_until + interval '0 s' >= coalesce($1::timestamptz, clock_timestamp())`
	// qOutboxFail is qOutboxComplete to FAILED ($2 unused) that moves the
	// row's fallback chain on when its message has no delivery row (no
	// send was made: a definite failure, released in this statement as a
	// send's definite failure is); a row with a delivery moves nothing
	// here (u's state SENDING: its delivery's own end moves the chain).
	qOutboxFail = `WITH u AS (
    UPDATE outbox o
    SET state = 'FAILED', last_reason = $3::text, claimed_by = NULL, claimed_until = NULL, updated_at = coalesce($1::timestamptz, clock_timestamp())
    WHERE o.notification_id = $4::text AND o.channel = $5::text AND o.token = $6::bigint
      AND o.state || '' IN ('CLAIMED', 'PUBLISHING') AND o.claimed_until + interval '0 s' >= coalesce($1::timestamptz, clock_timestamp())
      AND $2::text = 'FAILED'
    RETURNING o.notification_id, o.channel,
        CASE WHEN o.fallback_step IS NOT NULL AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.message_id = o.message_id)
             THEN 'FAILED' ELSE 'SENDING' END AS state, ''::text AS reason
)` + qFallbackMove + `SELECT (SELECT count(*) FROM u), ` + qFallbackReleased
	// qOutboxPublished marks relay-claimed rows PUBLISHED, each fenced by
	// its own token. Each row is found by its key (a LATERAL look-up,
	// locked FOR UPDATE, so the version found is the one updated) and
	// updated by its ctid, a join every plan makes a TID look-up: as a
	// plain join of the outbox to the unnest'ed keys, a generic plan made
	// while the outbox was small (a new database, its first minute before
	// autoanalyze) scanned the outbox for every batch as it grew, 3.5 ms
	// at 20,000 rows and 600 ms at 100,000 (growth_plan_test.go).
	//
	// $1 now, $2 notification ids, $3 channels, $4 tokens (parallel arrays).
	qOutboxPublished = `UPDATE outbox o
SET state = 'PUBLISHED', last_reason = '', claimed_by = NULL, claimed_until = NULL, updated_at = coalesce($1::timestamptz, clock_timestamp())
` + qHeldRowsFrom + `$2::text[], $3::text[], $4::bigint[]` + qHeldRowsKeys + `
          AND x.state || '' = 'PUBLISHING'` + qHeldRowsLock + `FOR UPDATE` + qHeldRowsJoin
	// qOutboxExtend moves each held lease to now + lease (never earlier);
	// it changes neither the state nor updated_at.
	//
	// It never waits for a row lock: each held row is locked FOR UPDATE
	// SKIP LOCKED by its key, and only the row versions locked are updated,
	// by ctid, joined as qOutboxPublished joins them (written as "ctid = ANY
	// (ARRAY(…))", a generic plan made on a small outbox scanned the
	// outbox filtered by ctid, cheaper there than ten TID look-ups, and
	// every beat then read the whole table). A row another transaction holds is
	// being settled (its holder's fenced write, queued in a pipeline batch
	// with other rows' writes) or reclaimed, and needs no longer lease; the
	// next beat extends it if that transaction rolled back. Waiting for it
	// deadlocked: the heartbeat held the leases of rows a pipeline batch
	// was about to settle and waited for one that batch had settled
	// already, so each waited for the other until PostgreSQL's deadlock
	// check (deadlock_timeout, 1 s by default) aborted the batch, and every
	// send of the lane stalled for that second (issue 12's fairness run:
	// tenant B's p99 1,018 ms).
	//
	// $1 now, $2 lease, $3 notification ids, $4 channels, $5 tokens (parallel arrays).
	qOutboxExtend = `UPDATE outbox o
SET claimed_until = greatest(o.claimed_until, coalesce($1::timestamptz, clock_timestamp()) + $2::interval)
` + qHeldRowsFrom + `$3::text[], $4::text[], $5::bigint[]` + qHeldRowsKeys + `
          AND x.state || '' IN ('CLAIMED', 'PUBLISHING')` + qHeldRowsLock + `FOR UPDATE SKIP LOCKED` + qHeldRowsJoin
	// The parts of a set-based fenced write's FROM and WHERE, around its
	// arrays (notification ids, channels, tokens), the states it takes and
	// its lock: each row whose fence and lease still hold, looked up by its
	// key and locked, then joined by ctid (qOutboxPublished says why).
	qHeldRowsFrom = `FROM (
    SELECT h.tid
    FROM unnest(`
	qHeldRowsKeys = `) AS f(notification_id, channel, token)
    CROSS JOIN LATERAL (
        SELECT x.ctid AS tid FROM outbox x
        WHERE x.notification_id = f.notification_id AND x.channel = f.channel AND x.token = f.token`
	qHeldRowsLock = ` AND x.claimed_until + interval '0 s' >= coalesce($1::timestamptz, clock_timestamp())
        LIMIT 1
        `
	qHeldRowsJoin = `
    ) h
) k
WHERE o.ctid = k.tid`
	// $1 now, $2 delay, $3 reason, $4 failed (0 or 1), $5 notification id, $6 channel, $7 token.
	qOutboxRetry = `UPDATE outbox
SET state = 'PENDING', available_at = coalesce($1::timestamptz, clock_timestamp()) + $2::interval, last_reason = $3::text,
    attempts = attempts + $4::integer, claimed_by = NULL, claimed_until = NULL, updated_at = coalesce($1::timestamptz, clock_timestamp()),
    deferred = $2::interval > ` + qDeferHorizon + `
WHERE notification_id = $5::text AND channel = $6::text AND token = $7::bigint
  AND state || '' IN ('CLAIMED', 'PUBLISHING') AND claimed_until + interval '0 s' >= coalesce($1::timestamptz, clock_timestamp())
RETURNING lane`
	// $1 now.
	qOutboxReclaim = `WITH r AS (
    UPDATE outbox
    SET state = 'PENDING', last_reason = 'CLAIM_EXPIRED', claimed_by = NULL, claimed_until = NULL, updated_at = coalesce($1::timestamptz, clock_timestamp())
    WHERE state IN ('CLAIMED', 'PUBLISHING') AND claimed_until < (SELECT coalesce($1::timestamptz, clock_timestamp()))
    RETURNING lane
)
SELECT lane, count(*) FROM r GROUP BY lane`
	// qOutboxExpire marks PENDING rows past expires_at EXPIRED and, in the
	// same statement, ends each one's delivery that waits in RETRY_WAIT
	// (SUPPRESSED, reason EXPIRED): nothing would claim it again. The
	// delivery write is conditional on RETRY_WAIT like every delivery
	// write, so a claim, a result or a person's PARKED is left as it is
	// (state || '' keeps any partial index of waiting rows out of it). The
	// expired ids reach it as one array, so it finds each delivery by
	// deliveries_message_id whatever the planner guesses of e's size, never
	// by a scan of the table. It returns each expired row with whether its
	// delivery ended here. It takes at most $2 rows, the earliest due-by
	// first (outbox_expiring), skipping rows another transaction holds, and
	// updates exactly the row versions it locked, by ctid (a TID scan), as
	// the claim does: the outbox has no index on message_id, and matched by
	// it the UPDATE read every PENDING row through outbox_fair on every
	// sweep, expiring or not (1.1-1.5 s every 5 s beside issue 12's
	// million-recipient campaign, growing with the backlog).
	//
	// $1 now, $2 the limit.
	qOutboxExpire = `WITH e AS (
    UPDATE outbox SET state = 'EXPIRED', last_reason = 'EXPIRED', updated_at = coalesce($1::timestamptz, clock_timestamp())
    WHERE ctid = ANY (ARRAY(
        SELECT ctid FROM outbox
        WHERE state = 'PENDING' AND expires_at IS NOT NULL AND expires_at <= (SELECT coalesce($1::timestamptz, clock_timestamp()))
        ORDER BY expires_at LIMIT $2
        FOR UPDATE SKIP LOCKED))
      AND state || '' = 'PENDING'
    RETURNING id, message_id, tenant, lane, channel, notification_id
),
fx AS (
    -- A fallback chain's later steps expire with it (fallback.go).
    UPDATE outbox w SET state = 'SKIPPED', last_reason = 'FALLBACK_NOT_NEEDED', fallback_after = 'EXPIRED',
        updated_at = coalesce($1::timestamptz, clock_timestamp())
    WHERE w.notification_id = ANY (ARRAY(SELECT notification_id FROM e)) AND w.state || '' = 'WAITING'
),
d AS (
    UPDATE deliveries d
    SET state = 'SUPPRESSED', reason = 'EXPIRED', next_attempt_at = NULL, claimed_by = NULL, updated_at = coalesce($1::timestamptz, clock_timestamp())
    WHERE d.message_id = ANY (ARRAY(SELECT message_id FROM e)) AND d.state || '' = 'RETRY_WAIT'
    RETURNING d.message_id
)
SELECT e.id, e.message_id, e.tenant, e.lane, e.channel, d.message_id IS NOT NULL
FROM e LEFT JOIN d ON d.message_id = e.message_id`
	// qOutboxBacklog counts the due PENDING rows per lane: those in the
	// claim's index and the deferred ones a promotion has not reached yet
	// (each part on its own partial index; one count over both would read
	// the table). The deferred part is counted lane by lane ($2, every
	// lane), each a range of outbox_deferred up to now: grouped over the
	// index, it read every deferred row, tomorrow's too.
	//
	// $1 now, $2 the lanes.
	qOutboxBacklog = `SELECT lane, sum(n)::bigint FROM (
    SELECT lane, count(*) AS n FROM outbox
    WHERE state = 'PENDING' AND NOT deferred AND available_at <= coalesce($1::timestamptz, now()) GROUP BY lane
  UNION ALL
    SELECT l.lane, d.n FROM unnest($2::text[]) AS l (lane), LATERAL (
        SELECT count(*) AS n FROM outbox
        WHERE lane = l.lane AND state = 'PENDING' AND deferred AND available_at <= coalesce($1::timestamptz, now())) d
) b
GROUP BY lane
HAVING sum(n) > 0`

	// qOutboxPromote moves the deferred PENDING rows of lane $1 that fall
	// due by $2 (now) plus the horizon into the claim's index, at most $3
	// of them, the earliest first (outbox_deferred), skipping rows another
	// promotion holds, by ctid as the claim updates (store/promote.go).
	// The re-check is written as expressions so that no partial index
	// drives the UPDATE itself.
	qOutboxPromote = `UPDATE outbox SET deferred = false
WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM outbox
    WHERE lane = $1::text AND state = 'PENDING' AND deferred
      AND available_at <= coalesce($2::timestamptz, clock_timestamp()) + ` + qDeferHorizon + `
    ORDER BY available_at LIMIT $3
    FOR UPDATE SKIP LOCKED))
  AND state || '' = 'PENDING' AND deferred IS TRUE`

	// qDeferHorizon is store.DeferHorizon as SQL: a row written PENDING
	// due later than this after its write is written deferred, out of the
	// claim's index (store/promote.go; TestDeferHorizonIsTheStores).
	qDeferHorizon = `interval '300 seconds'`
)

// Deliveries: the claim, the conditional result write, decisions, the stale sweep.
const (
	// qNotificationCancelled reads a notification's cancel mark
	// (store.Cancels).
	qNotificationCancelled = `SELECT cancelled_at IS NOT NULL FROM notifications WHERE id = $1::text`
	qDeliveryGet           = `SELECT message_id, notification_id, tenant, channel, provider, state, reason, attempts,
       claimed_at, next_attempt_at, created_at, updated_at
FROM deliveries WHERE message_id = $1::text`
	// qInboxSendGet reads the notification whose inbox send is STORED
	// (store.InboxDelivery).
	qInboxSendGet = `SELECT tenant, created_at FROM notifications WHERE id = $1::text AND inbox_at > 0`

	// The sender's claim is one autocommitted statement in the common case:
	//
	//   qDeliveryClaim inserts a SENDING row; the partial unique index on
	//   message_id lets exactly one concurrent inserter win (the others wait
	//   for it, then do nothing).
	//   qDeliveryClaimRetry runs only if the insert returned nothing: it turns
	//   a due RETRY_WAIT row into SENDING, a conditional UPDATE (of two copies
	//   racing for the same retry, the second re-checks the row under its
	//   lock, sees SENDING and updates nothing), and returns the attempt
	//   number if it won, and the row as its snapshot saw it (the blocking
	//   row, when it did not), or as it wrote it when it ended a cancelled
	//   retry (below).
	//
	// The insert reads the notification's row by its key, for the
	// delivery's campaign (claimmerge.go says why) and its cancel mark
	// (store.Cancels): a cancelled notification's send inserts nothing,
	// and deliveryClaimExisting, finding no row, ends it
	// SUPPRESSED(CANCELLED) instead (deliveryClaimCancelled). The LIMIT
	// keeps the lateral read a probe by the primary key, never joined
	// into a scan, whatever plan empty tables gave.
	//
	// $1 now, $2 message id, $3 notification id, $4 tenant, $5 channel,
	// $6 provider, $7 owner.
	qDeliveryClaim = `INSERT INTO deliveries (message_id, notification_id, tenant, channel, provider, state, attempts, claimed_by, claimed_at, created_at, updated_at,
                        campaign_id)
SELECT $2::text, $3::text, $4::text, $5::text, $6::text, 'SENDING', 1, $7::text, t.now, t.now, t.now, n.campaign_id
FROM (SELECT coalesce($1::timestamptz, clock_timestamp()) AS now) t
    LEFT JOIN LATERAL (SELECT cn.campaign_id, cn.cancelled_at FROM notifications cn WHERE cn.id = $3::text LIMIT 1) n ON true
WHERE n.cancelled_at IS NULL
ON CONFLICT (message_id) WHERE message_id IS NOT NULL DO NOTHING
RETURNING attempts`
	// qDeliveryClaimTake is qEventKeyTake and qDeliveryClaim in one
	// statement, for a send under an event key (DeliveryClaim): the upsert
	// takes a new key or extends the owner's own, and only then is the
	// delivery claimed. On another notification's key it writes nothing and
	// returns NULLs; a claim that finds the row already there returns a
	// NULL attempt and leaves the key taken, as the two statements did.
	// A cancelled notification's send (qDeliveryClaim) takes no key and
	// claims nothing: t is then empty, and the fourth column says so.
	//
	// $1 now, $2..$6 the key (tenant, recipient, event_id, kind, channel),
	// $7 the key's owner (the notification), $8 the lease, $9 message id,
	// $10 notification id, $11 tenant, $12 channel, $13 provider, $14 the
	// claim's owner.
	qDeliveryClaimTake = `WITH n AS (SELECT cn.campaign_id, cn.cancelled_at FROM notifications cn WHERE cn.id = $10::text LIMIT 1),
t AS (SELECT coalesce($1::timestamptz, clock_timestamp()) AS now WHERE NOT EXISTS (SELECT 1 FROM n WHERE n.cancelled_at IS NOT NULL)),
k AS (
` + qEventKeyUpsert + `
),
c AS (
    INSERT INTO deliveries (message_id, notification_id, tenant, channel, provider, state, attempts, claimed_by, claimed_at, created_at, updated_at,
                            campaign_id)
    SELECT $9::text, $10::text, $11::text, $12::text, $13::text, 'SENDING', 1, $14::text, t.now, t.now, t.now, (SELECT n.campaign_id FROM n)
    FROM t WHERE EXISTS (SELECT 1 FROM k)
    ON CONFLICT (message_id) WHERE message_id IS NOT NULL DO NOTHING
    RETURNING attempts
)
SELECT (SELECT taken FROM k), (SELECT lease_until FROM k), (SELECT attempts FROM c), NOT EXISTS (SELECT 1 FROM t)`
	//
	// A RETRY_WAIT row whose notification or campaign was cancelled is not
	// retried: it was in flight at the cancel, which leaves SENDING alone,
	// and its call then failed for now (or it was PARKED and then
	// requeued). u ends it SUPPRESSED(CANCELLED) instead, which moves its
	// fallback chain on as any end does (qFallbackMove: the steps after it
	// are skipped; it releases none, a cancel not being a definite
	// failure), and the row returned is the one it wrote, the third column
	// saying so (for the caller to count that end). (retry and u exclude
	// each other on qDeliveryCancelled, so no row is written twice.)
	//
	// $1 now, $2 message id, $3 provider, $4 owner.
	qDeliveryClaimRetry = `WITH t AS (SELECT coalesce($1::timestamptz, clock_timestamp()) AS now),
retry AS (
    UPDATE deliveries d
    SET state = 'SENDING', attempts = d.attempts + 1, provider = $3::text, claimed_by = $4::text, claimed_at = t.now,
        next_attempt_at = NULL, reason = '', updated_at = t.now
    FROM t
    WHERE d.message_id = $2::text AND d.state = 'RETRY_WAIT' AND d.next_attempt_at <= t.now
      AND NOT ` + qDeliveryCancelled + `
    RETURNING d.attempts
),
u AS (
    UPDATE deliveries d
    SET state = 'SUPPRESSED', reason = 'CANCELLED', next_attempt_at = NULL, claimed_by = NULL, updated_at = t.now
    FROM t
    WHERE d.message_id = $2::text AND d.state = 'RETRY_WAIT'
      AND ` + qDeliveryCancelled + `
    RETURNING ` + qDeliveryRetryRow + `
)` + qFallbackMove + `,
cur AS (
    SELECT true AS ended, ` + qDeliveryRetryRow + ` FROM u
    UNION ALL
    SELECT false, ` + qDeliveryRetryRow + ` FROM deliveries d WHERE d.message_id = $2::text AND NOT EXISTS (SELECT 1 FROM u)
)
SELECT (SELECT attempts FROM retry),
       NOT cur.ended AND cur.state = 'RETRY_WAIT' AND cur.next_attempt_at <= t.now, coalesce(cur.ended, false),
       cur.message_id, cur.notification_id, cur.tenant, cur.channel, cur.provider, cur.state, cur.reason, cur.attempts,
       cur.claimed_at, cur.next_attempt_at, cur.created_at, cur.updated_at
FROM t LEFT JOIN cur ON true`

	// qDeliveryRetryRow is the columns of a delivery qDeliveryClaimRetry
	// returns (the ones qFallbackMove reads of u among them).
	qDeliveryRetryRow = `message_id, notification_id, tenant, channel, provider, state, reason, attempts,
           claimed_at, next_attempt_at, created_at, updated_at`

	// qDeliveryCancelled says whether the delivery d's notification or
	// campaign was cancelled (store.Cancels, CampaignCancel). Each is read
	// by its key, a subquery, which a plan made on empty tables still
	// probes by the primary key where a join would scan the table.
	qDeliveryCancelled = `(coalesce((SELECT c.state FROM campaigns c WHERE c.id = d.campaign_id LIMIT 1), '') = 'CANCELLED'
           OR (SELECT n.cancelled_at FROM notifications n WHERE n.id = d.notification_id LIMIT 1) IS NOT NULL)`

	// qDeliveryRecord writes the attempt's result, conditional on the row
	// still being SENDING at that attempt, and its attempt log row, in one
	// statement (so one transaction). The log row is written either way (a
	// call whose result came after the stale sweep is still a call), once
	// per attempt: a result written again after a lost answer adds none.
	// qDeliveryRecordSettle also settles the job's claimed outbox row, fenced
	// like qOutboxComplete and qOutboxRetry, and only if the result was
	// recorded: PENDING again after the retry delay for RETRY_WAIT, DONE
	// otherwise. The db transport's claimer then has nothing left to write.
	//
	// $1 now, $2 state, $3 reason, $4 retry delay (NULL unless RETRY_WAIT),
	// $5 message id, $6 attempt, $7 owner, $8 started, $9 finished,
	// $10 class, $11 duration in ms, $12 the provider's reference ('' for
	// none); qDeliveryRecordSettle: $13 notification id, $14 channel,
	// $15 token. Both move the send's fallback chain on (qFallbackMove) and
	// return the lane of a step they released.
	qDeliveryRecord       = qDeliveryRecordWrite + `SELECT (SELECT count(*) FROM u), 0, ` + qFallbackReleased
	qDeliveryRecordSettle = qDeliveryRecordWrite + qDeliveryRecordSettleRow + `
    RETURNING 1
)
SELECT (SELECT count(*) FROM u), (SELECT count(*) FROM o), ` + qFallbackReleased
	// qDeliveryRecordSettleRow is the settle's CTE o, but for its
	// RETURNING, which each statement writes after any condition it adds.
	qDeliveryRecordSettleRow = `,
o AS (
    UPDATE outbox
    SET state = CASE WHEN $2::text = 'RETRY_WAIT' THEN 'PENDING' ELSE 'DONE' END,
        available_at = CASE WHEN $2::text = 'RETRY_WAIT' THEN coalesce($1::timestamptz, clock_timestamp()) + $4::interval ELSE available_at END,
        deferred = coalesce($2::text = 'RETRY_WAIT' AND $4::interval > ` + qDeferHorizon + `, false),
        last_reason = $3::text, claimed_by = NULL, claimed_until = NULL, updated_at = coalesce($1::timestamptz, clock_timestamp())
    WHERE notification_id = $13::text AND channel = $14::text AND token = $15::bigint
      AND state || '' = 'CLAIMED' AND claimed_until + interval '0 s' >= coalesce($1::timestamptz, clock_timestamp())
      AND EXISTS (SELECT 1 FROM u)`
	// qDeliveryRecordOffChain is qDeliveryRecordSettle for a send whose
	// claim read that it is on no chain (Fence.OffChain): no chain CTE,
	// whose planning and start every off-chain end would otherwise pay.
	qDeliveryRecordOffChain = qDeliveryRecordResult + qDeliveryRecordSettleRow + `
    RETURNING 1
)
SELECT (SELECT count(*) FROM u), (SELECT count(*) FROM o), NULL::text`
	// qDeliveryRecordNoChain is qDeliveryRecord for a job that came as a
	// message whose row is on no chain (DeliveryRecordParams.OffChain): no
	// chain CTE.
	qDeliveryRecordNoChain = qDeliveryRecordResult + `
SELECT (SELECT count(*) FROM u), 0, NULL::text`
	// qDeliveryRecordLazy is qDeliveryRecordSettle for a send whose claim
	// read Fence.LazyChain, ending so that its chain does not move on (not
	// a definite failure, not RETRY_WAIT): no chain CTE, and the settle
	// takes only while the row still carries its plan (fallback.go). When
	// it does not, DeliveryRecord moves the chain with qFallbackEnd.
	qDeliveryRecordLazy = qDeliveryRecordResult + qDeliveryRecordSettleRow + ` AND fallback_plan IS NOT NULL
    RETURNING 1
)
SELECT (SELECT count(*) FROM u), (SELECT count(*) FROM o), NULL::text`
	// qFallbackEnd is the rest of a lazy record whose settle did not take
	// (qDeliveryRecordLazy): the chain of the send $2, as its delivery is
	// now, moved on (qFallbackMove), and the row settled as
	// qDeliveryRecordSettle settles it, in one statement. $1 now, $2
	// message id, $3 reason, $4 notification id, $5 channel, $6 token.
	qFallbackEnd = `WITH u AS (
    SELECT notification_id, channel, state, reason FROM deliveries WHERE message_id = $2::text
)` + qFallbackMove + `,
o AS (
    UPDATE outbox
    SET state = 'DONE', last_reason = $3::text, claimed_by = NULL, claimed_until = NULL, updated_at = coalesce($1::timestamptz, clock_timestamp())
    WHERE notification_id = $4::text AND channel = $5::text AND token = $6::bigint
      AND state || '' = 'CLAIMED' AND claimed_until + interval '0 s' >= coalesce($1::timestamptz, clock_timestamp())
    RETURNING 1
)
SELECT (SELECT count(*) FROM o), ` + qFallbackReleased
	qDeliveryRecordWrite  = qDeliveryRecordResult + qFallbackMove
	qDeliveryRecordResult = `WITH u AS (
    UPDATE deliveries d
    SET state = $2::text, reason = $3::text, next_attempt_at = coalesce($1::timestamptz, clock_timestamp()) + $4::interval, claimed_by = NULL,
        updated_at = coalesce($1::timestamptz, clock_timestamp()), provider_ref = nullif($12::text, '')
    WHERE d.message_id = $5::text AND d.state || '' = 'SENDING' AND d.attempts = $6::integer
    RETURNING d.notification_id, d.channel, d.state, d.reason
),
a AS (
    INSERT INTO delivery_attempts (message_id, attempt, owner, started_at, finished_at, class, reason, duration_ms)
    VALUES ($5::text, $6::integer, $7::text, $8::timestamptz, $9::timestamptz, $10::text, $3::text, $11::bigint)
    ON CONFLICT (message_id, attempt) DO NOTHING
)`

	// qDeliveryDecide records SUPPRESSED or PARKED for a message with no row
	// yet, or one that is waiting: RETRY_WAIT, or PARKED when the decision
	// is SUPPRESSED. Never over a claim or a result, and never PARKED over
	// PARKED: a second copy that parks the message again writes nothing, so
	// it raises no second alert and counts no second entry.
	//
	// A decision that was written moves the send's fallback chain on
	// (qFallbackMove); the statement returns whether it was written and the
	// lane of a step it released.
	//
	// A decision on a later step of a lazy chain that has no row yet (a
	// cancel of a step the read API shows WAITING) writes nothing: lz says
	// so, and DeliveryDecide writes the chain's later steps first
	// (materializeStep, fallback.go) and decides again. Two probes of the
	// primary key's notification_id prefix.
	//
	// $1 now, $2 message id, $3 notification id, $4 tenant, $5 channel,
	// $6 state, $7 reason.
	qDeliveryDecide = `WITH lz AS MATERIALIZED (
    SELECT EXISTS (SELECT 1 FROM outbox f WHERE f.notification_id = $3::text AND f.fallback_step = 1 AND $5::text = ANY (f.fallback_plan))
           AND NOT EXISTS (SELECT 1 FROM outbox l WHERE l.notification_id = $3::text AND l.channel = $5::text) AS unwritten
),
u AS (
    INSERT INTO deliveries AS d (message_id, notification_id, tenant, channel, state, reason, created_at, updated_at)
    SELECT $2::text, $3::text, $4::text, $5::text, $6::text, $7::text, coalesce($1::timestamptz, now()), coalesce($1::timestamptz, now())
    WHERE NOT (SELECT unwritten FROM lz)
    ON CONFLICT (message_id) WHERE message_id IS NOT NULL DO UPDATE
    SET state = excluded.state, reason = excluded.reason, next_attempt_at = NULL, updated_at = excluded.updated_at
    WHERE d.state = 'RETRY_WAIT' OR (d.state = 'PARKED' AND excluded.state <> 'PARKED')
    RETURNING d.notification_id, d.channel, d.state, d.reason
)` + qFallbackMove + `SELECT (SELECT count(*) FROM u), ` + qFallbackReleased + `, (SELECT unwritten FROM lz)`

	// qDeliverySweepStale returns each claim it turned with its channel
	// and its notification's lane (the labels the sweep counts it under),
	// and logs the claim's attempt as store.StaleSweepOwner's.
	// An UNKNOWN ends a fallback chain: qFallbackMove skips its rest.
	//
	// $1 now, $2 age.
	qDeliverySweepStale = `WITH u AS (
    UPDATE deliveries d SET state = 'UNKNOWN', reason = 'STALE_CLAIM', claimed_by = NULL, updated_at = coalesce($1::timestamptz, clock_timestamp())
    WHERE d.state = 'SENDING' AND d.claimed_at < (SELECT coalesce($1::timestamptz, clock_timestamp())) - $2::interval
    RETURNING d.message_id, d.tenant, d.notification_id, d.channel, d.state, d.reason, d.attempts, d.claimed_at, d.updated_at
),
sa AS (
    INSERT INTO delivery_attempts (message_id, attempt, owner, started_at, finished_at, class, reason, duration_ms)
    SELECT u.message_id, u.attempts, '` + store.StaleSweepOwner + `', u.claimed_at, u.updated_at, 'unknown', 'STALE_CLAIM',
           floor(extract(epoch FROM u.updated_at - u.claimed_at) * 1000)::bigint
    FROM u
    ON CONFLICT (message_id, attempt) DO NOTHING
)` + qFallbackMove + `SELECT u.message_id, u.tenant, coalesce((SELECT n.lane FROM notifications n WHERE n.id = u.notification_id), ''), u.channel FROM u`
)

// Profiles.
const (
	qProfileGet = `SELECT data, updated_at FROM profiles WHERE tenant = $1::text AND recipient = $2::text`
	// $1 now, $2 tenant, $3 recipient, $4 data.
	qProfilePut = `INSERT INTO profiles (tenant, recipient, data, updated_at)
VALUES ($2::text, $3::text, $4::jsonb, coalesce($1::timestamptz, now()))
ON CONFLICT (tenant, recipient) DO UPDATE SET data = excluded.data, updated_at = excluded.updated_at`
)

// Housekeeping: where the store lives, migrations, the leader lock, Ping.
const (
	qWhere = `SELECT current_database(), current_schema()`

	// Migrations run one per transaction, each holding a transaction-level
	// advisory lock, so processes migrating at once apply each version once.
	qMigrateLock = `SELECT pg_advisory_xact_lock($1::bigint)`
	// qLockTimeout sets lock_timeout to $1 (in ms, or with a unit) for
	// the transaction only (SET LOCAL): a migration's (migrateLimits) and a
	// fan-out batch's (fanOutLockTimeout) lock waits.
	qLockTimeout     = `SELECT set_config('lock_timeout', $1::text, true)`
	qMigrationsTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`
	qMigrationApplied = `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1::integer)`
	qMigrationRecord  = `INSERT INTO schema_migrations (version, name) VALUES ($1::integer, $2::text)`
	qMigrationVersion = `SELECT coalesce(max(version), 0) FROM schema_migrations`

	// The leader lock is session-level: it lives as long as the leader's
	// dedicated connection, and PostgreSQL drops it when that session ends.
	qLeaderTry    = `SELECT pg_try_advisory_lock($1::bigint)`
	qLeaderUnlock = `SELECT pg_advisory_unlock($1::bigint)`
	// qLeaderIdleTimeout bounds how long the leader's session may wait for
	// its process (idle_session_timeout, PostgreSQL 14 and later; $1 in
	// milliseconds): a frozen process's session ends, and its lock with it.
	qLeaderIdleTimeout = `SELECT set_config('idle_session_timeout', $1::text, false)`

	// qNotify is the trailing wake-up after creates that sent none (notifier).
	qNotify = `SELECT pg_notify($1::text, '')`

	// Ping fails on a read-only server (a standby after failover).
	qPing = `SELECT current_setting('transaction_read_only') = 'off'`
)

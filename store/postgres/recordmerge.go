package postgres

import (
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// The sender's result writes of sends on no fallback chain
// (qDeliveryRecordOffChain with the db transport, qDeliveryRecordNoChain
// for a job that came as a message), the most common end of a send, are
// merged like intake's creates: the ones of a kind waiting in one pipeline
// batch run as one statement (qDeliveryRecordOffChainMany,
// qDeliveryRecordNoChainMany), which PostgreSQL plans, starts and runs once
// for all of them. Each result still writes what its own statement would:
// the delivery (fenced on SENDING at its attempt), the attempt log row,
// and, with the db transport, the claimed outbox row (fenced on its token
// and lease) only if the delivery was written.
//
// Equivalence with the single statements run in order: the results of one
// batch come from different senders, so no two hold the same claim; if two
// named one message all the same, only the first (by its place in the
// batch) is written, as the second's fence would refuse it after the first.
// Each row is found by its key (a LATERAL probe, locked FOR UPDATE so the
// version found is the one written) and written by its ctid, so a plan
// made on empty tables still looks rows up by key (growth_plan_test.go).
const (
	// qDeliveryRecordOffChainMany merges qDeliveryRecordOffChain: results
	// of the db transport, each settling its claimed outbox row.
	qDeliveryRecordOffChainMany = `WITH f AS (
    SELECT * FROM unnest(` + qRecordManyArrays + `, $13::text[], $14::text[], $15::bigint[])
        WITH ORDINALITY AS f(` + qRecordManyColumns + `, notification_id, channel, token, ord)
),` + qRecordManyWrite + `,
o AS (
    UPDATE outbox o
    SET state = CASE WHEN k.state = 'RETRY_WAIT' THEN 'PENDING' ELSE 'DONE' END,
        available_at = CASE WHEN k.state = 'RETRY_WAIT'
                            THEN coalesce($1::timestamptz, clock_timestamp()) + k.delay_us * interval '1 microsecond'
                            ELSE o.available_at END,
        deferred = coalesce(k.state = 'RETRY_WAIT' AND k.delay_us * interval '1 microsecond' > ` + qDeferHorizon + `, false),
        last_reason = k.reason, claimed_by = NULL, claimed_until = NULL, updated_at = coalesce($1::timestamptz, clock_timestamp())
    FROM (
        SELECT first.ord, first.state, first.reason, first.delay_us, h.tid
        FROM first
        CROSS JOIN LATERAL (
            SELECT x.ctid AS tid FROM outbox x
            WHERE x.notification_id = first.notification_id AND x.channel = first.channel AND x.token = first.token
              AND x.state || '' = 'CLAIMED' AND x.claimed_until + interval '0 s' >= coalesce($1::timestamptz, clock_timestamp())
            LIMIT 1
            FOR UPDATE
        ) h
        WHERE first.ord IN (SELECT ord FROM u)
    ) k
    WHERE o.ctid = k.tid
    RETURNING k.ord
)
SELECT f.message_id, (f.ord IN (SELECT ord FROM u))::int, (f.ord IN (SELECT ord FROM o))::int, NULL::text
FROM f ORDER BY f.ord`

	// qDeliveryRecordNoChainMany merges qDeliveryRecordNoChain: results of
	// jobs that came as messages (no outbox row to settle) whose rows are
	// on no chain (Job.OffChain).
	qDeliveryRecordNoChainMany = `WITH f AS (
    SELECT * FROM unnest(` + qRecordManyArrays + `)
        WITH ORDINALITY AS f(` + qRecordManyColumns + `, ord)
),` + qRecordManyWrite + `
SELECT f.message_id, (f.ord IN (SELECT ord FROM u))::int, 0, NULL::text
FROM f ORDER BY f.ord`

	// The parts both share: the results' arrays ($2..$12), and CTEs first
	// (each message's first result in the batch), u (the deliveries
	// written) and a (the attempt log).
	qRecordManyArrays = `$2::text[], $3::text[], $4::bigint[], $5::text[], $6::integer[], $7::text[], $8::timestamptz[],
        $9::timestamptz[], $10::text[], $11::bigint[], $12::text[]`
	qRecordManyColumns = `state, reason, delay_us, message_id, attempt, owner, started_at, finished_at, class, duration_ms,
            provider_ref`
	qRecordManyWrite = `
first AS (
    SELECT DISTINCT ON (message_id) * FROM f ORDER BY message_id, ord
),
u AS (
    UPDATE deliveries d
    SET state = k.state, reason = k.reason,
        next_attempt_at = coalesce($1::timestamptz, clock_timestamp()) + k.delay_us * interval '1 microsecond', claimed_by = NULL,
        updated_at = coalesce($1::timestamptz, clock_timestamp()), provider_ref = nullif(k.provider_ref, '')
    FROM (
        SELECT first.ord, first.state, first.reason, first.delay_us, first.provider_ref, h.tid
        FROM first
        CROSS JOIN LATERAL (
            SELECT x.ctid AS tid FROM deliveries x
            WHERE x.message_id = first.message_id AND x.state || '' = 'SENDING' AND x.attempts = first.attempt
            LIMIT 1
            FOR UPDATE
        ) h
    ) k
    WHERE d.ctid = k.tid
    RETURNING k.ord
),
a AS (
    INSERT INTO delivery_attempts (message_id, attempt, owner, started_at, finished_at, class, reason, duration_ms)
    SELECT message_id, attempt, owner, started_at, finished_at, class, reason, duration_ms FROM f ORDER BY ord
    ON CONFLICT (message_id, attempt) DO NOTHING
)`
)

// recordArgs is one off-chain result write, one row of
// qDeliveryRecordOffChainMany's (or qDeliveryRecordNoChainMany's) arrays.
type recordArgs = mergeArgs[store.DeliveryRecordParams]

// recordMerge runs the off-chain result writes waiting in one pipeline
// batch as one qDeliveryRecordOffChainMany; each op gets the row its
// qDeliveryRecordOffChain would have returned.
var recordMerge = &merge{
	sql:   qDeliveryRecordOffChainMany,
	args:  func(ops []*pipeOp) []any { return recordManyArgs(ops, true) },
	scan:  scanInOrder("record", func(op *pipeOp) string { return op.in.(*recordArgs).p.MessageID }),
	later: true,
}

// recordNoChainMerge runs the results of jobs that came as messages on no
// chain, waiting in one batch, as one qDeliveryRecordNoChainMany; each op
// gets the row its qDeliveryRecordNoChain would have returned.
//
// Not later: a job that came as a message holds its consumer's slot (its
// place in the broker's prefetch) until its result is written and the
// message acked, so its result write is on the slot's path as its delivery
// claim is. (Marked later, the RabbitMQ transport did 3,712
// notifications/s on the means of five pairs against 3,881 without, a
// difference inside that day's noise, but not the gain the db transport
// showed.)
var recordNoChainMerge = &merge{
	sql:  qDeliveryRecordNoChainMany,
	args: func(ops []*pipeOp) []any { return recordManyArgs(ops, false) },
	scan: scanInOrder("record", func(op *pipeOp) string { return op.in.(*recordArgs).p.MessageID }),
}

// recordManyArgs builds the merged result write's arrays from ops, with
// each result's outbox row ($13..$15) when settle.
func recordManyArgs(ops []*pipeOp, settle bool) []any {
	n := len(ops)
	text := textColumns(8, n) // state, reason, message id, owner, class, provider ref, notification id, channel
	delay := make([]*int64, n)
	attempt := make([]int32, n)
	started, finished := make([]time.Time, n), make([]time.Time, n)
	duration, token := make([]int64, n), make([]int64, n)
	for i, op := range ops {
		p := op.in.(*recordArgs).p
		setRow(text, i, string(p.State), p.Reason, p.MessageID, p.Owner, p.Class, p.ProviderRef)
		if settle {
			setRow(text[6:], i, p.Outbox.NotificationID, string(p.Outbox.Channel))
			token[i] = p.Outbox.Token
		}
		if p.State == heraldtype.DeliveryRetryWait {
			us := p.RetryDelay.Microseconds()
			delay[i] = &us
		}
		attempt[i] = int32(p.Attempt)
		started[i], finished[i], duration[i] = p.StartedAt, p.StartedAt.Add(p.Duration), p.Duration.Milliseconds()
	}
	args := []any{ops[0].in.(*recordArgs).now, text[0], text[1], delay, text[2], attempt, text[3], started, finished, text[4], duration, text[5]}
	if settle {
		args = append(args, text[6], text[7], token)
	}
	return args
}

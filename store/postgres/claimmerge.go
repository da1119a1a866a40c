package postgres

import (
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/store"
)

// The sender's delivery claims (qDeliveryClaim: the SENDING row of a
// message's first attempt) are merged as its result writes are
// (recordmerge.go): the ones waiting in one pipeline batch insert their
// rows with one qDeliveryClaimMany. A claim whose message already has a
// row gets no row back, as its own INSERT … ON CONFLICT DO NOTHING would
// have returned none, and goes on alone to deliveryClaimExisting. Two
// claims of one message in one batch: the first (by its place in the
// batch) inserts, the second finds its row, as the second of two
// statements in a row would.
// Every claim names the delivery's campaign (deliveries.campaign_id, NULL
// off one), looked up by the notification's key in its own statement:
// only then do the triggers that keep a campaign's counts run for it
// (migration 27), and a SENDING row inserted without it would never be
// counted. The same read finds the notification's cancel mark: a
// cancelled notification's claim inserts nothing and goes on alone, as
// qDeliveryClaim's does.
const qDeliveryClaimMany = `INSERT INTO deliveries (message_id, notification_id, tenant, channel, provider, state, attempts, claimed_by, claimed_at, created_at, updated_at,
                        campaign_id)
SELECT c.message_id, c.notification_id, c.tenant, c.channel, c.provider, 'SENDING', 1, c.owner, t.now, t.now, t.now, n.campaign_id
FROM (SELECT coalesce($1::timestamptz, clock_timestamp()) AS now) t,
    unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[])
        WITH ORDINALITY AS c (message_id, notification_id, tenant, channel, provider, owner, ord)
    LEFT JOIN LATERAL (SELECT cn.campaign_id, cn.cancelled_at FROM notifications cn WHERE cn.id = c.notification_id LIMIT 1) n ON true
WHERE n.cancelled_at IS NULL
ORDER BY c.ord
ON CONFLICT (message_id) WHERE message_id IS NOT NULL DO NOTHING
RETURNING message_id, attempts`

// claimArgs is one delivery claim, one row of qDeliveryClaimMany's (or
// qDeliveryClaimTakeMany's) arrays.
type claimArgs = mergeArgs[store.DeliveryClaimParams]

// claimMerge runs the delivery claims waiting in one pipeline batch as one
// qDeliveryClaimMany; each op gets the row its qDeliveryClaim would have
// returned, or pgx.ErrNoRows.
var claimMerge = &merge{
	sql: qDeliveryClaimMany,
	args: func(ops []*pipeOp) []any {
		cols := textColumns(6, len(ops))
		for i, op := range ops {
			p := op.in.(*claimArgs).p
			setRow(cols, i, p.MessageID, p.NotificationID, p.Tenant, string(p.Channel), p.Provider, p.Owner)
		}
		return []any{ops[0].in.(*claimArgs).now, cols[0], cols[1], cols[2], cols[3], cols[4], cols[5]}
	},
	scan: func(rows pgx.Rows, ops []*pipeOp) error {
		// RETURNING keeps no order: the rows are matched by message id, each
		// to the first claim of its message.
		waiting := make(map[string][]*pipeOp, len(ops))
		for _, op := range ops {
			mid := op.in.(*claimArgs).p.MessageID
			waiting[mid] = append(waiting[mid], op)
		}
		for rows.Next() {
			var mid string
			var attempt int
			if err := rows.Scan(&mid, &attempt); err != nil {
				return fmt.Errorf("merged delivery claim: %w", err)
			}
			w := waiting[mid]
			if len(w) == 0 {
				return fmt.Errorf("merged delivery claim: a row for %s, which no claim asked for", mid)
			}
			if err := scanInto(w[0].dest, attempt); err != nil {
				return fmt.Errorf("merged delivery claim: %w", err)
			}
			for _, op := range w[1:] { // they find the first's row
				op.err = pgx.ErrNoRows
			}
			delete(waiting, mid)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, w := range waiting {
			for _, op := range w {
				op.err = pgx.ErrNoRows
			}
		}
		return nil
	},
}

// scanInto sets the one destination of a claim's row.
func scanInto(dest []any, attempt int) error {
	if len(dest) != 1 {
		return fmt.Errorf("%d destinations for one column", len(dest))
	}
	p, ok := dest[0].(*int)
	if !ok {
		return fmt.Errorf("destination %T, want *int", dest[0])
	}
	*p = attempt
	return nil
}

// qDeliveryClaimTakeMany is qDeliveryClaimTake for the claims under an
// event key waiting in one batch (claimTakeMerge): the keys are upserted
// together, and each claim whose key was taken or is its owner's own
// inserts its row. claimTakeMerge accepts only batches whose claims name
// distinct keys and distinct messages, so no row is written twice and each
// claim's outcome is the one its own statement would have had. A claim
// whose notification was cancelled takes no key and inserts nothing, its
// last column saying so (qDeliveryClaimTake).
//
// $1 now, then parallel arrays: $2..$6 the keys (tenant, recipient,
// event_id, kind, channel), $7 the keys' owners, $8 the leases in
// microseconds, $9 message ids, $10 notification ids, $11 tenants, $12
// channels, $13 providers, $14 the claims' owners.
const qDeliveryClaimTakeMany = `WITH t AS (SELECT coalesce($1::timestamptz, clock_timestamp()) AS now),
i AS (
    SELECT u.*, n.campaign_id, n.cancelled_at IS NOT NULL AS cancelled
    FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bigint[],
        $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[])
        WITH ORDINALITY AS u(tenant, recipient, event_id, kind, channel, owner, lease_us,
            message_id, notification_id, claim_tenant, claim_channel, provider, claimed_by, ord)
        LEFT JOIN LATERAL (SELECT cn.campaign_id, cn.cancelled_at FROM notifications cn WHERE cn.id = u.notification_id LIMIT 1) n ON true
),
k AS (
    INSERT INTO event_keys AS k (tenant, recipient, event_id, kind, channel, owner, lease_until, taken_at)
    SELECT i.tenant, i.recipient, i.event_id, i.kind, i.channel, i.owner, t.now + i.lease_us * interval '1 microsecond', t.now
    FROM t, i WHERE NOT i.cancelled ORDER BY i.ord
    ON CONFLICT (tenant, recipient, event_id, kind, channel) DO UPDATE SET lease_until = greatest(k.lease_until, excluded.lease_until)
    WHERE k.owner = excluded.owner
    RETURNING k.tenant, k.recipient, k.event_id, k.kind, k.channel, k.xmax = 0 AS taken, k.lease_until
),
ki AS (
    SELECT i.*, k.taken, k.lease_until FROM i JOIN k
        ON k.tenant = i.tenant AND k.recipient = i.recipient AND k.event_id = i.event_id AND k.kind = i.kind AND k.channel = i.channel
),
c AS (
    INSERT INTO deliveries (message_id, notification_id, tenant, channel, provider, state, attempts, claimed_by, claimed_at, created_at, updated_at,
                            campaign_id)
    SELECT ki.message_id, ki.notification_id, ki.claim_tenant, ki.claim_channel, ki.provider, 'SENDING', 1, ki.claimed_by, t.now, t.now, t.now,
           ki.campaign_id
    FROM t, ki ORDER BY ki.ord
    ON CONFLICT (message_id) WHERE message_id IS NOT NULL DO NOTHING
    RETURNING message_id, attempts
)
SELECT i.message_id, ki.taken, ki.lease_until, c.attempts, i.cancelled
FROM i LEFT JOIN ki ON ki.ord = i.ord LEFT JOIN c ON c.message_id = i.message_id
ORDER BY i.ord`

// claimTakeMerge runs the claims under event keys waiting in one batch as
// one qDeliveryClaimTakeMany, when their keys and messages are distinct;
// each op gets the row its qDeliveryClaimTake would have returned.
var claimTakeMerge = &merge{
	sql: qDeliveryClaimTakeMany,
	accept: func(ops []*pipeOp) bool {
		keys := make(map[store.EventKey]bool, len(ops))
		messages := make(map[string]bool, len(ops))
		for _, op := range ops {
			p := op.in.(*claimArgs).p
			if keys[p.Event.Key] || messages[p.MessageID] {
				return false
			}
			keys[p.Event.Key], messages[p.MessageID] = true, true
		}
		return true
	},
	args: func(ops []*pipeOp) []any {
		cols, lease := textColumns(12, len(ops)), make([]int64, len(ops))
		for i, op := range ops {
			p := op.in.(*claimArgs).p
			k := p.Event.Key
			setRow(cols, i, k.Tenant, k.Recipient, k.EventID, k.Kind, string(k.Channel), p.Event.Owner,
				p.MessageID, p.NotificationID, p.Tenant, string(p.Channel), p.Provider, p.Owner)
			lease[i] = p.Event.Lease.Microseconds()
		}
		return []any{ops[0].in.(*claimArgs).now, cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], lease,
			cols[6], cols[7], cols[8], cols[9], cols[10], cols[11]}
	},
	scan: scanInOrder("delivery claim under an event key", func(op *pipeOp) string { return op.in.(*claimArgs).p.MessageID }),
}

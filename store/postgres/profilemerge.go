package postgres

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The sender's profile reads (qProfileGet) are merged as its claims and
// result writes are: with the rabbitmq transport a message carries no
// profile (it is read as the send starts, not when the row was
// published), so every send reads one, and the reads waiting in one
// pipeline batch are one qProfileGetMany. A read without a profile gets
// pgx.ErrNoRows, as its own statement would.
//
// $1 tenants, $2 recipients (parallel arrays); one row per read, in order,
// led by its place.
const qProfileGetMany = `SELECT f.ord, p.found, p.data, p.updated_at
FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS f (tenant, recipient, ord)
LEFT JOIN LATERAL (SELECT true AS found, data, updated_at FROM profiles p
                   WHERE p.tenant = f.tenant AND p.recipient = f.recipient LIMIT 1) p ON true
ORDER BY f.ord`

// profileKey is one profile read, one row of qProfileGetMany's arrays.
type profileKey struct{ tenant, recipient string }

// profileMerge runs the profile reads waiting in one pipeline batch as one
// qProfileGetMany.
var profileMerge = &merge{
	sql: qProfileGetMany,
	args: func(ops []*pipeOp) []any {
		cols := textColumns(2, len(ops))
		for i, op := range ops {
			k := op.in.(profileKey)
			setRow(cols, i, k.tenant, k.recipient)
		}
		return []any{cols[0], cols[1]}
	},
	scan: func(rows pgx.Rows, ops []*pipeOp) error {
		i := 0
		for rows.Next() {
			if i == len(ops) {
				return fmt.Errorf("merged profile read: more rows than reads")
			}
			var ord int64
			var found *bool
			var data []byte
			var updated *time.Time
			if err := rows.Scan(&ord, &found, &data, &updated); err != nil {
				return fmt.Errorf("merged profile read: %w", err)
			}
			if ord != int64(i+1) {
				return fmt.Errorf("merged profile read: row %d is read %d", i+1, ord)
			}
			op := ops[i]
			i++
			if found == nil || updated == nil {
				op.err = pgx.ErrNoRows
				continue
			}
			if len(op.dest) != 2 {
				return fmt.Errorf("merged profile read: %d destinations, want 2", len(op.dest))
			}
			d, okD := op.dest[0].(*[]byte)
			u, okU := op.dest[1].(*time.Time)
			if !okD || !okU {
				return fmt.Errorf("merged profile read: destinations %T, %T", op.dest[0], op.dest[1])
			}
			*d, *u = data, *updated
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if i != len(ops) {
			return fmt.Errorf("merged profile read: %d rows for %d reads", i, len(ops))
		}
		return nil
	},
}

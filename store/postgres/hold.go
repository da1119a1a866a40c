package postgres

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// The relay's held claims (store.OutboxHolder). A relay claim written
// PUBLISHING and then, once the broker confirmed it, PUBLISHED wrote two
// row versions of each row, each with its index entries; the held claim
// writes one: it claims straight to PUBLISHED in a transaction that stays
// open while the relay publishes and waits for the confirms, and commits
// then. Until it commits, every other transaction sees the rows PENDING
// with their old token: a claim of another relay (or of this one's next
// batch) skips them (SKIP LOCKED), a fenced write naming the new token
// waits for the commit (a consumer putting its row back), a campaign
// copy's decision shares the row without waiting (its counts' lock,
// migration 41), and anything else reads them as not yet sent, which they
// are not known to be. A rollback, a lost connection or a dead process
// leaves them PENDING and due, for the next claim: no lease to wait out.
// A process that stops without dying (SIGSTOP, a paused container) holds
// them until idle_in_transaction_session_timeout (Options.HoldTimeout)
// ends its session.
//
// The relay keeps several batches in flight, so each claim would find the
// rows of the batches before it first in its tenant's scope, all locked:
// passing them one by one, each a heap look-up and a refused lock, cost
// what the second row version had cost (docs/benchmarks.md). So the claim
// starts each scope past the last row the relay holds in it (HeldPast);
// the relay claims without that at least once a second, for a row that
// fell due behind it (a lapsed lease's, one committed late).
//
// The held claim's statement is the relay's claim (qOutboxClaimPublishing,
// or qOutboxClaimPublishingProfiles for the relay's gate) with three
// changes, spliced in at init (holdSplice panics if the claim's text no
// longer has a place, which every test of the package would show):
// the rows go to PUBLISHED with no owner or lease (written as a CASE on
// the state, always PUBLISHED here, so that the statement still uses $4
// and $5, the owner and lease every claim binds: PostgreSQL refuses to
// prepare a statement with a parameter it cannot type); each scope's candidates
// start at the later of its first due row and the row after its HeldPast
// ($13..$16: tenants, scopes, due times, ids; "after" is the same due time
// and the next id, an index bound where "> HeldPast" would be a filter);
// and each row's due time is returned.
var (
	qOutboxClaimHold = holdSplice(qOutboxClaimPublishing, holdSplices,
		[2]string{"c.scope, c.off_chain\nFROM claimed c", "c.scope, c.off_chain, c.available_at\nFROM claimed c"})
	qOutboxClaimHoldProfiles = holdSplice(qOutboxClaimPublishingProfiles, holdSplices,
		[2]string{"c.scope, c.off_chain, p.data, p.updated_at\nFROM claimed c", "c.scope, c.off_chain, p.data, p.updated_at, c.available_at\nFROM claimed c"})
)

// holdSplices are the splices both held claims share.
var holdSplices = [][2]string{
	{
		`    SET state = $6::text, claimed_by = $4::text, claimed_until = coalesce($1::timestamptz, clock_timestamp()) + $5::interval,`,
		`    SET state = $6::text, last_reason = '',
        claimed_by = CASE WHEN $6::text = 'PUBLISHED' THEN NULL ELSE $4::text END,
        claimed_until = CASE WHEN $6::text = 'PUBLISHED' THEN NULL ELSE coalesce($1::timestamptz, clock_timestamp()) + $5::interval END,`,
	},
	{
		`    LEFT JOIN caps k ON k.tenant = g.tenant
`,
		`    LEFT JOIN caps k ON k.tenant = g.tenant
    LEFT JOIN unnest($13::text[], $14::text[], $15::timestamptz[], $16::bigint[]) AS fr (tenant, scope, at, id)
      ON fr.tenant = g.tenant AND fr.scope = g.scope
`,
	},
	{
		`AND (o.available_at, o.id) >= (g.first, g.first_id) AND`,
		`AND (o.available_at, o.id) >= (CASE WHEN (fr.at, fr.id + 1) > (g.first, g.first_id) THEN fr.at ELSE g.first END,
                                        CASE WHEN (fr.at, fr.id + 1) > (g.first, g.first_id) THEN fr.id + 1 ELSE g.first_id END) AND`,
	},
}

// holdSplice replaces each pair's first text, which must occur in q once,
// by its second: the shared splices, then last.
func holdSplice(q string, shared [][2]string, last [2]string) string {
	for _, p := range append(shared[:len(shared):len(shared)], last) {
		if n := strings.Count(q, p[0]); n != 1 {
			panic(fmt.Sprintf("postgres: the held claim's splice %q occurs %d times in the relay's claim", p[0], n))
		}
		q = strings.Replace(q, p[0], p[1], 1)
	}
	return q
}

// qOutboxHoldUnpublished leaves a held claim's rows that were not
// published PUBLISHING under the claim's owner and lease, in the claim's
// transaction, before it commits (store.Hold.Commit). $1 now, $2 owner,
// $3 lease, $4 ids, $5 tokens.
const qOutboxHoldUnpublished = `UPDATE outbox o
SET state = 'PUBLISHING', claimed_by = $2::text, claimed_until = coalesce($1::timestamptz, clock_timestamp()) + $3::interval
FROM unnest($4::bigint[], $5::bigint[]) AS f (id, token)
WHERE o.id = f.id AND o.token = f.token AND o.state || '' = 'PUBLISHED'`

// qOutboxHoldPutBack puts a held claim's rows that the relay's gate held
// back PENDING again, in the claim's transaction, as qOutboxRetry does
// (no failed attempt). $1 now, then parallel arrays: $2 ids, $3 tokens,
// $4 delays in microseconds, $5 reasons.
const qOutboxHoldPutBack = `UPDATE outbox o
SET state = 'PENDING', available_at = coalesce($1::timestamptz, clock_timestamp()) + f.delay_us * interval '1 microsecond',
    last_reason = f.reason, claimed_by = NULL, claimed_until = NULL, updated_at = coalesce($1::timestamptz, clock_timestamp()),
    deferred = f.delay_us * interval '1 microsecond' > ` + qDeferHorizon + `
FROM unnest($2::bigint[], $3::bigint[], $4::bigint[], $5::text[]) AS f (id, token, delay_us, reason)
WHERE o.id = f.id AND o.token = f.token AND o.state || '' = 'PUBLISHED'`

// defaultHoldConns is Options.HoldConns's default: a lane's relay's four
// batches awaiting confirms, the one being published and its next claim,
// for two lanes at full pace.
const defaultHoldConns = 12

// holds returns the held claims' pool, opened on first use with the claim
// pool's settings (claimSettings) and the hold's deadline.
func (s *Store) holds() (*pgxpool.Pool, error) {
	s.holdMu.Lock()
	defer s.holdMu.Unlock()
	if s.holdPool != nil {
		return s.holdPool, nil
	}
	c := s.claims.Config().Copy()
	c.MaxConns, c.MinConns = s.holdConns, 0
	c.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = fmt.Sprint(s.holdTimeout.Milliseconds())
	p, err := pgxpool.NewWithConfig(context.Background(), c)
	if err != nil {
		return nil, fmt.Errorf("open postgres pool for held claims: %w", err)
	}
	s.holdPool = p
	return p, nil
}

// OutboxClaimHold claims p's rows straight to PUBLISHED in a transaction
// left open (store.OutboxHolder).
func (s *Store) OutboxClaimHold(ctx context.Context, p store.OutboxClaimParams, past []store.HeldPast) ([]store.Claimed, store.Hold, error) {
	if p.Limit <= 0 {
		return nil, nil, nil
	}
	if err := s.promote(ctx, p.Lane); err != nil {
		return nil, nil, err
	}
	pool, err := s.holds()
	if err != nil {
		return nil, nil, err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, nil, s.fail("begin held claim", err)
	}
	h := &heldClaim{s: s, tx: tx, owner: p.Owner, lease: p.Lease}
	rows, err := s.claimHeld(ctx, tx, p, past)
	if err != nil || len(rows) == 0 {
		h.Rollback(ctx)
		return nil, nil, err
	}
	return rows, h, nil
}

func (s *Store) claimHeld(ctx context.Context, tx pgx.Tx, p store.OutboxClaimParams, past []store.HeldPast) ([]store.Claimed, error) {
	q := qOutboxClaimHold
	if p.Profiles {
		q = qOutboxClaimHoldProfiles
	}
	return s.runClaim(ctx, tx, q, p, heraldtype.OutboxPublished, true, past)
}

// heldPastArrays is past as the held claim's $13..$16.
func heldPastArrays(past []store.HeldPast) []any {
	tenants, scopes := make([]string, len(past)), make([]string, len(past))
	at, id := make([]time.Time, len(past)), make([]int64, len(past))
	for i, h := range past {
		tenants[i], scopes[i], at[i], id[i] = h.Tenant, h.Scope, h.AvailableAt, h.ID
	}
	return []any{tenants, scopes, at, id}
}

// heldClaim is an open held claim (store.Hold).
type heldClaim struct {
	s     *Store
	tx    pgx.Tx
	owner string
	lease time.Duration
	once  sync.Once
}

func (h *heldClaim) Commit(ctx context.Context, unpublished []store.Fence, putBack []store.OutboxRetryParams) error {
	err := store.ErrClosed
	h.once.Do(func() {
		// write runs one of the claim's own writes before its commit; a
		// failed one ends the claim with nothing written.
		write := func(what, q string, args ...any) bool {
			if _, err = h.tx.Exec(ctx, q, args...); err != nil {
				_ = h.tx.Rollback(context.WithoutCancel(ctx))
				err = h.s.fail(what, err)
				return false
			}
			return true
		}
		if len(unpublished) > 0 {
			ids, tokens := make([]int64, len(unpublished)), make([]int64, len(unpublished))
			for i, f := range unpublished {
				ids[i], tokens[i] = f.ID, f.Token
			}
			if !write("leave unpublished held rows PUBLISHING", qOutboxHoldUnpublished, h.s.now(), h.owner, h.lease, ids, tokens) {
				return
			}
		}
		if len(putBack) > 0 {
			n := len(putBack)
			ids, tokens, delays, reasons := make([]int64, n), make([]int64, n), make([]int64, n), make([]string, n)
			for i, p := range putBack {
				ids[i], tokens[i], delays[i], reasons[i] = p.Fence.ID, p.Fence.Token, p.Delay.Microseconds(), p.Reason
			}
			if !write("put held rows back", qOutboxHoldPutBack, h.s.now(), ids, tokens, delays, reasons) {
				return
			}
		}
		if err = h.tx.Commit(ctx); err != nil {
			err = h.s.fail("commit held claim", err)
		}
	})
	return err
}

func (h *heldClaim) Rollback(ctx context.Context) {
	h.once.Do(func() { _ = h.tx.Rollback(context.WithoutCancel(ctx)) })
}

var _ store.OutboxHolder = (*Store)(nil)

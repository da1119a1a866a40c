package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// OutboxClaim leases up to p.Limit due rows of p.Lane in one autocommitted
// statement (see qOutboxClaim) and returns them oldest first, after
// promoting the lane's deferred rows that fall due within the horizon
// when that is due (promote).
func (s *Store) OutboxClaim(ctx context.Context, p store.OutboxClaimParams) ([]store.Claimed, error) {
	if p.Limit <= 0 {
		return nil, nil
	}
	if err := s.promote(ctx, p.Lane); err != nil {
		return nil, err
	}
	q := qOutboxClaim
	switch {
	case p.Publishing && p.Profiles:
		q = qOutboxClaimPublishingProfiles
	case p.Publishing:
		q = qOutboxClaimPublishing
	}
	// On the claim's own connections, prepared and planned once each
	// (claimPoolConfig).
	return s.runClaim(ctx, s.claims, q, p, p.State(), false, nil)
}

// runClaim runs the claim statement q on db with p's arguments, and, for a
// held claim (hold.go), past's, and reads the claimed rows.
func (s *Store) runClaim(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, q string, p store.OutboxClaimParams, state heraldtype.OutboxState, held bool, past []store.HeldPast) ([]store.Claimed, error) {
	what := "claim outbox batch"
	if held {
		what = "held claim of outbox batch"
	}
	var skip *string
	if p.Skip != "" {
		skip = &p.Skip
	}
	memTenants, memScopes := make([]string, 0, len(p.Scopes)), make([]string, 0, len(p.Scopes))
	for t, sc := range p.Scopes {
		memTenants, memScopes = append(memTenants, t), append(memScopes, sc)
	}
	args := []any{s.now(), string(p.Lane), p.Limit, p.Owner, p.Lease, string(state), skip, p.After,
		memTenants, memScopes, p.SkipScope, nullInt(p.SkipCapped())}
	if held {
		args = append(args, heldPastArrays(past)...)
	}
	rows, err := db.Query(ctx, q, args...)
	if err != nil {
		return nil, s.fail(what, err)
	}
	defer rows.Close()
	var out []store.Claimed
	for rows.Next() {
		var c store.Claimed
		var ch, params string
		var expires, profileAt *time.Time
		dest := []any{&c.Fence.ID, &c.Fence.Token, &c.NotificationID, &c.MessageID, &ch, &c.Attempts,
			&c.Tenant, &c.Recipient, &c.EventID, &c.Kind, &params, &expires, &c.Scope}
		var known *heraldtype.Known
		switch {
		case !p.Publishing:
			known = &heraldtype.Known{ProfileRead: true}
			dest = append(dest, &known.Delivery, &known.Profile, &profileAt, &c.Fence.OffChain, &c.Fence.LazyChain, &known.Cancelled)
		case p.Profiles:
			// For the relay's gate: whether a delivery row exists is not read.
			known = &heraldtype.Known{ProfileRead: true, Delivery: true}
			dest = append(dest, &c.Fence.OffChain, &known.Profile, &profileAt)
		default:
			dest = append(dest, &c.Fence.OffChain)
		}
		if held {
			dest = append(dest, &c.AvailableAt)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, s.fail(what+": scan", err)
		}
		c.OutboxID, c.Lane, c.Channel = c.Fence.ID, p.Lane, heraldtype.Channel(ch)
		c.Fence.NotificationID, c.Fence.Channel = c.NotificationID, c.Channel
		c.Params, c.ExpiresAt = []byte(params), utcPtr(expires)
		if profileAt != nil {
			known.ProfileUpdatedAt = *profileAt
		}
		c.Known = known
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		// The statement may have committed before the connection failed;
		// those rows come back when their lease runs out (a held claim's
		// are PENDING again if it did not).
		return nil, s.fail(what, err)
	}
	return out, nil
}

// OutboxComplete moves a claimed row to a terminal state, fenced; to
// FAILED, a fallback chain's row without a delivery moves its chain on in
// the same statement (qOutboxFail).
func (s *Store) OutboxComplete(ctx context.Context, f store.Fence, state heraldtype.OutboxState, reason string) (bool, error) {
	args := []any{s.now(), string(state), reason, f.NotificationID, string(f.Channel), f.Token}
	if state == heraldtype.OutboxFailed {
		// A chain's row moves its chain on in the same statement.
		var n int
		var wake *string
		if err := s.pipe.QueryRow(ctx, qOutboxFail, args...).Scan(&n, &wake); err != nil {
			return false, s.fail(fmt.Sprintf("fail outbox row %d", f.ID), err)
		}
		s.wakeFallback(wake)
		return n == 1, nil
	}
	tag, err := s.pipe.Exec(ctx, qOutboxComplete, args...)
	if err != nil {
		return false, s.fail(fmt.Sprintf("complete outbox row %d", f.ID), err)
	}
	return tag.RowsAffected() == 1, nil
}

// OutboxMarkPublished marks relay-claimed rows PUBLISHED in one statement,
// each fenced by its own token. It locks the rows in the order of their
// keys, as a campaign send's first outcome does (migration 36), so that
// the two never deadlock.
func (s *Store) OutboxMarkPublished(ctx context.Context, fences []store.Fence) (int, error) {
	if len(fences) == 0 {
		return 0, nil
	}
	fences = slices.SortedFunc(slices.Values(fences), func(a, b store.Fence) int {
		return cmp.Or(strings.Compare(a.NotificationID, b.NotificationID), strings.Compare(string(a.Channel), string(b.Channel)))
	})
	nids, chs, tokens := fenceArrays(fences)
	tag, err := s.pool.Exec(ctx, qOutboxPublished, s.now(), nids, chs, tokens)
	if err != nil {
		return 0, s.fail(fmt.Sprintf("mark %d outbox rows published", len(fences)), err)
	}
	return int(tag.RowsAffected()), nil
}

// OutboxExtend extends the leases still held by fences in one statement,
// each fenced by its own token.
func (s *Store) OutboxExtend(ctx context.Context, fences []store.Fence, lease time.Duration) (int, error) {
	if len(fences) == 0 {
		return 0, nil
	}
	nids, chs, tokens := fenceArrays(fences)
	tag, err := s.pool.Exec(ctx, qOutboxExtend, s.now(), lease, nids, chs, tokens)
	if err != nil {
		return 0, s.fail(fmt.Sprintf("extend %d outbox leases", len(fences)), err)
	}
	return int(tag.RowsAffected()), nil
}

// fenceArrays splits fences into the parallel arrays a set-based fenced
// write unnests.
func fenceArrays(fences []store.Fence) (nids, chs []string, tokens []int64) {
	nids, chs, tokens = make([]string, len(fences)), make([]string, len(fences)), make([]int64, len(fences))
	for i, f := range fences {
		nids[i], chs[i], tokens[i] = f.NotificationID, string(f.Channel), f.Token
	}
	return nids, chs, tokens
}

// OutboxRetry returns a claimed row to PENDING after p.Delay, fenced.
func (s *Store) OutboxRetry(ctx context.Context, p store.OutboxRetryParams) (bool, error) {
	failed := 0
	if p.Failed {
		failed = 1
	}
	var lane string
	err := s.pipe.QueryRow(ctx, qOutboxRetry, s.now(), p.Delay, p.Reason, failed, p.Fence.NotificationID, string(p.Fence.Channel), p.Fence.Token).Scan(&lane)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, s.fail(fmt.Sprintf("retry outbox row %d", p.Fence.ID), err)
	}
	if p.Delay <= 0 {
		// Due at once: let this process's claimer know.
		s.wakeups.Notify(heraldtype.Lane(lane))
	}
	return true, nil
}

// OutboxReclaimExpired returns rows whose lease ran out to PENDING
// (CLAIM_EXPIRED) and wakes their lanes' claimers in this process.
func (s *Store) OutboxReclaimExpired(ctx context.Context) (int, error) {
	rows, err := s.pool.Query(ctx, qOutboxReclaim, s.now())
	if err != nil {
		return 0, s.fail("reclaim expired leases", err)
	}
	defer rows.Close()
	total := 0
	var lanes []heraldtype.Lane
	for rows.Next() {
		var lane string
		var n int
		if err := rows.Scan(&lane, &n); err != nil {
			return 0, s.fail("reclaim expired leases: scan", err)
		}
		total += n
		lanes = append(lanes, heraldtype.Lane(lane))
	}
	if err := rows.Err(); err != nil {
		return 0, s.fail("reclaim expired leases", err)
	}
	for _, l := range lanes {
		s.wakeups.Notify(l)
	}
	return total, nil
}

// OutboxExpire marks PENDING rows past expires_at EXPIRED, ends their
// deliveries waiting in RETRY_WAIT, and returns them, at most limit
// (qOutboxExpire).
func (s *Store) OutboxExpire(ctx context.Context, limit int) ([]store.Expired, error) {
	rows, err := s.pool.Query(ctx, qOutboxExpire, s.now(), limit)
	if err != nil {
		return nil, s.fail("expire outbox rows", err)
	}
	defer rows.Close()
	var out []store.Expired
	for rows.Next() {
		var e store.Expired
		var lane, ch string
		if err := rows.Scan(&e.ID, &e.MessageID, &e.Tenant, &lane, &ch, &e.DeliveryEnded); err != nil {
			return nil, s.fail("expire outbox rows: scan", err)
		}
		e.Lane, e.Channel = heraldtype.Lane(lane), heraldtype.Channel(ch)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("expire outbox rows", err)
	}
	return out, nil
}

// OutboxBacklog counts due PENDING rows per lane.
func (s *Store) OutboxBacklog(ctx context.Context) (map[heraldtype.Lane]int, error) {
	rows, err := s.pool.Query(ctx, qOutboxBacklog, s.now(), laneNames)
	if err != nil {
		return nil, s.fail("count outbox backlog", err)
	}
	defer rows.Close()
	out := map[heraldtype.Lane]int{}
	for rows.Next() {
		var lane string
		var n int
		if err := rows.Scan(&lane, &n); err != nil {
			return nil, s.fail("count outbox backlog: scan", err)
		}
		out[heraldtype.Lane(lane)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("count outbox backlog", err)
	}
	return out, nil
}

// laneNames is every lane's name, qOutboxBacklog's $2.
var laneNames = func() []string {
	names := make([]string, len(heraldtype.Lanes))
	for i, l := range heraldtype.Lanes {
		names[i] = string(l)
	}
	return names
}()

// promote moves lane's deferred rows due within store.DeferHorizon into
// the claim's index (qOutboxPromote) when this store's claims of the lane
// last did so store.PromoteEvery ago, or that promotion filled its batch
// (store.Promotions). It runs on the claim's connections, whose settings
// keep its plan on outbox_deferred.
func (s *Store) promote(ctx context.Context, lane heraldtype.Lane) error {
	at := time.Now()
	if s.clock != nil {
		at = s.clock.Now()
	}
	if !s.promotions.Due(lane, at) {
		return nil
	}
	if s.promoting != nil {
		s.promoting()
	}
	tag, err := s.claims.Exec(ctx, qOutboxPromote, string(lane), s.now(), store.PromoteBatch)
	if err != nil {
		return s.fail("promote deferred outbox rows", err)
	}
	s.promotions.Done(lane, at, int(tag.RowsAffected()))
	return nil
}

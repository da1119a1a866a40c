package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// OutboxClaim leases up to p.Limit due rows of p.Lane. First, at most
// once every store.PromoteEvery per lane (store.Promotions), it promotes
// the lane's deferred rows that fall due within store.DeferHorizon into
// the claim's index (qOutboxPromote), in the same transaction: a row
// whose promotion came late is claimed by this claim already. The
// promotion is recorded once its transaction has committed.
func (s *Store) OutboxClaim(ctx context.Context, p store.OutboxClaimParams) ([]store.Claimed, error) {
	if p.Limit <= 0 {
		return nil, nil // SQLite reads a LIMIT below zero as none
	}
	var out []store.Claimed
	var promoted int64 // the rows the promotion moved; -1 when none ran
	var at time.Time
	err := s.w.do(ctx, func(tx wtx) error {
		out, promoted, at = out[:0], -1, s.clock.Now()
		now := ms(at)
		if s.promotions.Due(p.Lane, at) {
			r, err := tx.Exec(qOutboxPromote, string(p.Lane), now+store.DeferHorizon.Milliseconds(), store.PromoteBatch)
			if err != nil {
				return fmt.Errorf("claim: promote deferred rows: %w", err)
			}
			if promoted, err = r.RowsAffected(); err != nil {
				return fmt.Errorf("claim: promote deferred rows: %w", err)
			}
		}
		var first, firstScope string
		var another bool
		switch err := tx.QueryRow(qOutboxLaneTenants, string(p.Lane)).Scan(&first, &firstScope, &another); {
		case errors.Is(err, sql.ErrNoRows):
			return nil // nothing PENDING in the lane
		case err != nil:
			return fmt.Errorf("claim: lane's tenants: %w", err)
		}
		q, args := qOutboxClaim, []any{string(p.State()), p.Owner, now + p.Lease.Milliseconds(), now, string(p.Lane), now, now, p.Limit}
		switch {
		case !another && first == p.Skip && (p.SkipScope == nil || *p.SkipScope == firstScope):
			return nil // the one tenant and scope waiting is the one to skip
		case !another:
			if capped := p.SkipCapped(); capped > 0 && first == p.Skip {
				args[7] = min(p.Limit, capped) // the skipped tenant's other scope, capped
			}
			args = append(args, first, firstScope)
			q = qOutboxClaimOneTenant
		case p.Skip != "":
			var capped any
			if n := p.SkipCapped(); n > 0 {
				capped = n
			}
			args = append(args, p.Skip, p.After, scopeMemory(p.Scopes), p.SkipScope, capped)
		default:
			args = append(args, nil, p.After, scopeMemory(p.Scopes), nil, nil)
		}
		rows, err := tx.Query(q, args...)
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		byNotification := map[string][]int{}
		var ids []string
		for rows.Next() {
			var c store.Claimed
			var ch string
			if err := rows.Scan(&c.Fence.ID, &c.Fence.Token, &c.NotificationID, &c.MessageID, &ch, &c.Attempts, &c.Fence.OffChain, &c.Fence.LazyChain,
				&c.Scope); err != nil {
				rows.Close()
				return fmt.Errorf("scan claimed row: %w", err)
			}
			c.OutboxID, c.Channel, c.Lane = c.Fence.ID, heraldtype.Channel(ch), p.Lane
			c.Fence.NotificationID, c.Fence.Channel = c.NotificationID, c.Channel
			if _, ok := byNotification[c.NotificationID]; !ok {
				ids = append(ids, c.NotificationID)
			}
			byNotification[c.NotificationID] = append(byNotification[c.NotificationID], len(out))
			out = append(out, c)
		}
		if err := rows.Close(); err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		if len(out) == 0 {
			return nil
		}
		idList, _ := json.Marshal(ids)
		if err := readJobs(tx, out, byNotification, string(idList), !p.Publishing || p.Profiles, !p.Publishing); err != nil {
			return err
		}
		if p.Publishing {
			for i := range out {
				if k := out[i].Known; k != nil {
					k.Delivery = true // for the relay's gate: not read
				}
			}
			return nil
		}
		return readDelivered(tx, out)
	})
	if err != nil {
		return nil, fmt.Errorf("claim outbox batch: %w", err)
	}
	if promoted >= 0 {
		s.promotions.Done(p.Lane, at, int(promoted))
	}
	return out, nil
}

// deferredAt is the deferred flag of a row written PENDING at now and due
// at available: 1 when it is due more than store.DeferHorizon after its
// write, so that it stays out of the claim's index (outbox_fair, whose
// every (tenant, scope) the claim probes) until a claim promotes it
// (store/promote.go, qOutboxPromote); else 0.
func deferredAt(available, now int64) int {
	if available-now > store.DeferHorizon.Milliseconds() {
		return 1
	}
	return 0
}

// scopeMemory is qOutboxClaim's ?11: OutboxClaimParams.Scopes as a JSON
// object.
func scopeMemory(m map[string]string) string {
	if len(m) == 0 {
		return "{}"
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// readJobs fills the claimed rows' jobs from their notifications; with
// known, each also gets its recipient's profile as heraldtype.Known, and
// with marks (a claimer's claim, not the relay's) the cancel mark.
func readJobs(tx wtx, out []store.Claimed, byNotification map[string][]int, idList string, known, marks bool) error {
	rows, err := tx.Query(qOutboxJobs, idList)
	if err != nil {
		return fmt.Errorf("read claimed notifications: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, tenant, recipient, eventID, kind, params string
		var expires, profileAt sql.NullInt64
		var profile sql.NullString
		var cancelled bool
		if err := rows.Scan(&id, &tenant, &recipient, &eventID, &kind, &params, &expires, &profile, &profileAt, &cancelled); err != nil {
			return fmt.Errorf("scan claimed notification: %w", err)
		}
		for _, i := range byNotification[id] {
			j := &out[i].Job
			j.Tenant, j.Recipient, j.EventID, j.Kind = tenant, recipient, eventID, kind
			j.Params, j.ExpiresAt = json.RawMessage(params), fromNullMs(expires)
			if known {
				j.Known = knownProfile(profile, profileAt)
				j.Known.Cancelled = marks && cancelled
			}
		}
	}
	return rows.Err()
}

// knownProfile is what a transport's read of a recipient's profile tells
// the sender (heraldtype.Known): the profile, or none (profile not Valid).
func knownProfile(profile sql.NullString, updatedAt sql.NullInt64) *heraldtype.Known {
	k := &heraldtype.Known{ProfileRead: true}
	if profile.Valid {
		k.Profile, k.ProfileUpdatedAt = []byte(profile.String), fromMs(updatedAt.Int64)
	}
	return k
}

// readDelivered marks the claimed jobs whose message already has a delivery row.
func readDelivered(tx wtx, out []store.Claimed) error {
	byMessage := make(map[string]*heraldtype.Known, len(out))
	ids := make([]string, len(out))
	for i := range out {
		ids[i] = out[i].MessageID
		byMessage[out[i].MessageID] = out[i].Known
	}
	err := forEachMessage(tx, func(id string) {
		if k := byMessage[id]; k != nil {
			k.Delivery = true
		}
	}, qOutboxDelivered, jsonList(ids))
	if err != nil {
		return fmt.Errorf("read claimed deliveries: %w", err)
	}
	return nil
}

// jsonList is ids as the JSON array that json_each reads.
func jsonList(ids []string) string {
	b, _ := json.Marshal(ids)
	return string(b)
}

// forEachMessage runs q with args and calls fn with the message id of each
// row it returns.
func forEachMessage(tx wtx, fn func(id string), q string, args ...any) error {
	rows, err := tx.Query(q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return err
		}
		fn(id)
	}
	return rows.Err()
}

// OutboxComplete moves a claimed row to a terminal state, fenced. A row
// of a fallback chain ended FAILED without a delivery moves its chain on
// in the same transaction (fallbackFailed).
func (s *Store) OutboxComplete(ctx context.Context, f store.Fence, state heraldtype.OutboxState, reason string) (bool, error) {
	var ok bool
	var wake heraldtype.Lane
	err := s.w.do(ctx, func(tx wtx) error {
		ok, wake = false, ""
		now := s.now()
		r, err := tx.Exec(qOutboxComplete, string(state), reason, now, f.ID, f.Token, now)
		if err != nil {
			return err
		}
		n, _ := r.RowsAffected()
		if ok = n == 1; ok && state == heraldtype.OutboxFailed {
			wake, err = fallbackFailed(tx, now, f.ID)
		}
		return err
	})
	if err != nil {
		return false, fmt.Errorf("complete outbox row %d: %w", f.ID, err)
	}
	s.wakeFallback(wake)
	return ok, nil
}

// OutboxRetry returns a claimed row to PENDING after p.Delay, fenced.
func (s *Store) OutboxRetry(ctx context.Context, p store.OutboxRetryParams) (bool, error) {
	failed := 0
	if p.Failed {
		failed = 1
	}
	ok, err := s.fenced(ctx, qOutboxRetry, func(now int64) []any {
		at := s.after(p.Delay)
		return []any{at, deferredAt(at, now), p.Reason, failed, now, p.Fence.ID, p.Fence.Token, now}
	})
	if err != nil {
		return false, fmt.Errorf("retry outbox row %d: %w", p.Fence.ID, err)
	}
	if ok && p.Delay <= 0 {
		// Due at once: let the claimers know.
		for _, l := range heraldtype.Lanes {
			s.wakeups.Notify(l)
		}
	}
	return ok, nil
}

// OutboxMarkPublished marks relay-claimed rows PUBLISHED, each fenced.
func (s *Store) OutboxMarkPublished(ctx context.Context, fences []store.Fence) (int, error) {
	n, err := s.fencedEach(ctx, fences, qOutboxPublished, func(now int64, f store.Fence) []any {
		return []any{now, f.ID, f.Token, now}
	})
	if err != nil {
		return 0, fmt.Errorf("mark %d outbox rows published: %w", len(fences), err)
	}
	return n, nil
}

// OutboxExtend extends the leases still held by fences, each fenced, in
// one transaction.
func (s *Store) OutboxExtend(ctx context.Context, fences []store.Fence, lease time.Duration) (int, error) {
	n, err := s.fencedEach(ctx, fences, qOutboxExtend, func(now int64, f store.Fence) []any {
		return []any{now + lease.Milliseconds(), f.ID, f.Token, now}
	})
	if err != nil {
		return 0, fmt.Errorf("extend %d outbox leases: %w", len(fences), err)
	}
	return n, nil
}

// fencedEach runs the fenced write q once per fence in one transaction and
// returns how many rows it changed.
func (s *Store) fencedEach(ctx context.Context, fences []store.Fence, q string, args func(now int64, f store.Fence) []any) (int, error) {
	if len(fences) == 0 {
		return 0, nil
	}
	var n int
	err := s.w.do(ctx, func(tx wtx) error {
		n = 0
		now := s.now()
		for _, f := range fences {
			r, err := tx.Exec(q, args(now, f)...)
			if err != nil {
				return err
			}
			k, _ := r.RowsAffected()
			n += int(k)
		}
		return nil
	})
	return n, err
}

func (s *Store) fenced(ctx context.Context, q string, args func(now int64) []any) (bool, error) {
	var n int64
	err := s.w.do(ctx, func(tx wtx) error {
		r, err := tx.Exec(q, args(s.now())...)
		if err != nil {
			return err
		}
		n, _ = r.RowsAffected()
		return nil
	})
	return n == 1, err
}

// OutboxReclaimExpired returns rows whose lease ran out to PENDING.
func (s *Store) OutboxReclaimExpired(ctx context.Context) (int, error) {
	var n int64
	err := s.w.do(ctx, func(tx wtx) error {
		now := s.now()
		r, err := tx.Exec(qOutboxReclaim, now, now)
		if err != nil {
			return err
		}
		n, _ = r.RowsAffected()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("reclaim expired leases: %w", err)
	}
	if n > 0 {
		for _, l := range heraldtype.Lanes {
			s.wakeups.Notify(l)
		}
	}
	return int(n), nil
}

// OutboxExpire marks PENDING rows past expires_at EXPIRED and, in the same
// transaction, ends their deliveries waiting in RETRY_WAIT; at most limit
// rows, so the writer's transaction stays short.
func (s *Store) OutboxExpire(ctx context.Context, limit int) ([]store.Expired, error) {
	var out []store.Expired
	err := s.w.do(ctx, func(tx wtx) error {
		out = out[:0]
		now := s.now()
		rows, err := tx.Query(qOutboxExpire, now, now, limit)
		if err != nil {
			return err
		}
		byMessage := map[string]int{}
		for rows.Next() {
			var e store.Expired
			var lane, ch string
			if err := rows.Scan(&e.ID, &e.MessageID, &e.Tenant, &lane, &ch); err != nil {
				rows.Close()
				return err
			}
			e.Lane, e.Channel = heraldtype.Lane(lane), heraldtype.Channel(ch)
			byMessage[e.MessageID] = len(out)
			out = append(out, e)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return err
		}
		if len(out) == 0 {
			return nil
		}
		ids := make([]string, len(out))
		for i, e := range out {
			ids[i] = e.MessageID
		}
		err = forEachMessage(tx, func(id string) { out[byMessage[id]].DeliveryEnded = true }, qOutboxExpireDeliveries, now, jsonList(ids))
		if err != nil {
			return fmt.Errorf("end waiting deliveries: %w", err)
		}
		// A fallback chain's later steps expire with it (fallback.go).
		if _, err := tx.Exec(qFallbackExpired, now, jsonList(ids)); err != nil {
			return fmt.Errorf("skip waiting fallback steps: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("expire outbox rows: %w", err)
	}
	return out, nil
}

// OutboxBacklog counts due PENDING rows per lane.
func (s *Store) OutboxBacklog(ctx context.Context) (map[heraldtype.Lane]int, error) {
	rows, err := s.query(ctx, qOutboxBacklog, s.now())
	if err != nil {
		return nil, fmt.Errorf("count outbox backlog: %w", err)
	}
	defer rows.Close()
	out := map[heraldtype.Lane]int{}
	for rows.Next() {
		var lane string
		var n int
		if err := rows.Scan(&lane, &n); err != nil {
			return nil, err
		}
		out[heraldtype.Lane(lane)] = n
	}
	return out, rows.Err()
}

package dispatch

import (
	"context"
	"log/slog"
	"time"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/store"
)

// Results of herald_dispatch_total: how a dispatcher settled an outbox row.
const (
	ResultDone      = "done"      // claimer: the sender finished with it
	ResultRetry     = "retry"     // claimer: back to PENDING until the delivery's retry is due
	ResultReleased  = "released"  // claimer: given back at shutdown, before a claim
	ResultBackoff   = "backoff"   // a failed attempt: PENDING again after the dispatcher's backoff
	ResultFailed    = "failed"    // the last attempt failed: FAILED, alerted
	ResultPublished = "published" // relay: the broker confirmed it
	ResultRepublish = "republish" // relay: the connection was lost before the confirm; offered again
	ResultDeferred  = "deferred"  // relay: its gate deferred the row, PENDING until it may go, unpublished
)

// ClaimerResults and RelayResults are the results each dispatcher counts,
// exported at 0 from the start.
var (
	ClaimerResults = []string{ResultDone, ResultRetry, ResultReleased, ResultBackoff, ResultFailed}
	RelayResults   = []string{ResultPublished, ResultRepublish, ResultDeferred, ResultBackoff, ResultFailed}
)

// settler writes what became of a claimed row, fenced; the claimers and the
// relays share it, so a failed attempt backs off, fails and alerts the same
// way on both transports.
type settler struct {
	who         string // "dispatch" or "relay", in log messages
	lane        heraldtype.Lane
	store       store.Outbox
	maxAttempts int
	logger      *slog.Logger
	alerts      alert.Sink
	metrics     *metrics.Metrics
}

// backOff handles a failed attempt on row: PENDING again after the
// dispatcher's backoff, or FAILED (alerted) once MaxAttempts is reached; the
// AlertAfterAttempts-th failure raises an alert too.
func (s settler) backOff(ctx context.Context, row store.Claimed, reason string, cause error) (result string, ok bool, err error) {
	attempt := row.Attempts + 1
	if attempt >= s.maxAttempts {
		ok, err = s.store.OutboxComplete(ctx, row.Fence, heraldtype.OutboxFailed, reason)
		if ok {
			s.raise(ctx, alert.OutboxFailed, row, reason)
		}
		return ResultFailed, ok, err
	}
	s.logger.LogAttrs(ctx, slog.LevelWarn, s.who+": attempt failed, backing off",
		slog.String("message_id", row.MessageID), slog.Int("attempt", attempt), slog.Any("error", cause))
	ok, err = s.store.OutboxRetry(ctx, store.OutboxRetryParams{Fence: row.Fence, Delay: Backoff(attempt), Reason: reason, Failed: true})
	if ok && attempt == AlertAfterAttempts {
		s.raise(ctx, alert.DispatchSlow, row, reason)
	}
	return ResultBackoff, ok, err
}

// report counts a settlement and logs one that did not take.
func (s settler) report(ctx context.Context, row store.Claimed, result string, ok bool, err error) {
	s.metrics.Dispatch(s.lane, result)
	switch {
	case err != nil:
		// The lease will run out and the row will be offered again; the
		// delivery row keeps that from becoming a second send.
		s.logger.LogAttrs(ctx, slog.LevelWarn, s.who+": could not settle outbox row",
			slog.String("message_id", row.MessageID), slog.String("result", result), slog.Any("error", err))
	case !ok:
		s.logger.LogAttrs(ctx, slog.LevelWarn, s.who+": lease lost before settling; write fenced off",
			slog.String("message_id", row.MessageID), slog.Int64("token", row.Fence.Token))
	}
}

func (s settler) raise(ctx context.Context, kind string, row store.Claimed, reason string) {
	s.metrics.Alert(kind)
	s.alerts.Alert(ctx, alert.Alert{Kind: kind, MessageID: row.MessageID, Tenant: row.Tenant, Reason: reason})
}

// ClaimAgainAfterWake is how long after a wake-up a loop that found its
// lane drained claims once more. A wake-up is one NOTIFY for many rows:
// herald.Client sends at most one per lane every few milliseconds and
// writes the rows in between without one, so rows that commit just after
// the woken claim ran are taken by this second look, not at the next poll.
const ClaimAgainAfterWake = 25 * time.Millisecond

// CoolAfter is the fewest rows a claim that came back short must have
// taken for its loop to cool down before the next ("Claims cool down"):
// a claim that took one row or none says rows come no faster than claims
// take them.
const CoolAfter = 2

// cooler is a claim loop's cooldown ("Claims cool down"): when its last
// claim began, if that claim took CoolAfter rows or more but came back
// short of its limit.
type cooler struct {
	every time.Duration
	since time.Time // zero: no cooldown
}

// claimed records a claim that began at began and took took of limit rows.
func (c *cooler) claimed(began time.Time, took, limit int) {
	c.since = time.Time{}
	if took >= CoolAfter && took < limit {
		c.since = began
	}
}

// wait waits out the rest of the cooldown, if any, then takes the
// wake-up (wake, a NOTIFY) and freed-slot signal (freed; nil for none)
// that came meanwhile: the claim about to begin sees every row they were
// sent for. woken reports whether a wake-up was taken, for the loop's
// second look; ok is false when ctx ended. The cooldown is spent either
// way: the next wait waits only after another claimed.
func (c *cooler) wait(ctx context.Context, wake, freed <-chan struct{}) (woken, ok bool) {
	var rest time.Duration
	if !c.since.IsZero() {
		rest = c.every - time.Since(c.since)
	}
	c.since = time.Time{}
	if rest <= 0 {
		return false, ctx.Err() == nil
	}
	t := time.NewTimer(rest)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, false
	case <-t.C:
	}
	select {
	case <-wake:
		woken = true
	default:
	}
	select {
	case <-freed:
	default:
	}
	return woken, true
}

// claimPause spaces out the claims of a loop whose claims keep failing (the
// store is unreachable): 100 ms, doubling, at most 5 s; a success resets it.
type claimPause struct{ wait time.Duration }

// after logs err and waits; it reports false when ctx ended meanwhile.
func (p *claimPause) after(ctx context.Context, logger *slog.Logger, who string, lane heraldtype.Lane, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	p.wait = min(max(2*p.wait, 100*time.Millisecond), 5*time.Second)
	logger.LogAttrs(ctx, slog.LevelWarn, who+": claim failed",
		slog.String("lane", string(lane)), slog.Duration("retry_in", p.wait), slog.Any("error", err))
	return clock.Sleep(ctx, p.wait)
}

func (p *claimPause) reset() { p.wait = 0 }

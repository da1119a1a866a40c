// Package alert raises alerts: things a person must look at because herald
// chose not to guess (UNKNOWN outcomes, stale claims, expired or failed rows)
// or cannot go on without one (parked messages). An alert carries ids and
// reason codes only, never personal data.
package alert

import (
	"context"
	"log/slog"
	"sync"
)

// Alert is one event worth a person's attention.
type Alert struct {
	// Kind is a stable code: UNKNOWN_OUTCOME, STALE_CLAIM, OUTBOX_EXPIRED…
	Kind      string
	MessageID string
	Tenant    string
	Reason    string
	// Count, when above 1, is how many rows one alert stands for: a
	// sweep that expires a flood of rows names the first ones each and
	// the rest in one alert (MessageID empty; Tenant empty when several).
	Count int
}

// Alert kinds.
const (
	UnknownOutcome = "UNKNOWN_OUTCOME"
	StaleClaim     = "STALE_CLAIM"
	OutboxExpired  = "OUTBOX_EXPIRED"
	OutboxFailed   = "OUTBOX_FAILED"
	DispatchSlow   = "DISPATCH_RETRYING" // the 5th failed dispatch attempt of a row
	RecordFailed   = "RECORD_FAILED"     // a provider result could not be written
	RetryExhausted = "RETRY_EXHAUSTED"
	// Parked: a message was parked (the same failure would recur: an
	// unknown kind, a template that no longer renders, a body that is not
	// a job); it waits for a person to fix the cause and requeue it.
	Parked = "PARKED"
	// Redriven: the watchdog found a row waiting past its deadline with
	// nothing left to move it on, and moved it on itself (reason: what it
	// found). The normal path failed somewhere; the row is fine.
	Redriven = "REDRIVEN"
	// Unaccounted: reconciliation (package reconcile) found a planned send
	// that nothing will move on and could not repair it (a kind no longer
	// configured, a failed repair); Reason is "<finding kind>:<why>".
	Unaccounted = "UNACCOUNTED"
	// UnknownUnsettled: deliveries in UNKNOWN nothing has settled: raised
	// once per reconciliation run that finds any (reason UNSETTLED, naming
	// the one or counting them), and by the leader's look-up rounds once per
	// delivery they leave for a person (LOOKUP_NOT_FOUND,
	// LOOKUP_NO_REFERENCE; package settle).
	UnknownUnsettled = "UNKNOWN_UNSETTLED"
	// CampaignStalled: a RUNNING campaign's fan-out has failed (or given
	// up waiting) at every attempt for campaign.RunnerConfig.StallAfter;
	// raised once per such stretch by the leader's runner, which goes on
	// retrying. Reason is "<campaign id>:<FAILING|BUSY>".
	CampaignStalled = "CAMPAIGN_STALLED"
	// FallbackUnsent: a delivery report or a status look-up turned a send
	// of a fallback chain into a definite failure after the chain had
	// skipped its later steps on that send's first word (PROVIDER_ACCEPTED,
	// UNKNOWN): every send of the chain has now failed and herald sends no
	// other channel by itself, so the recipient was told nothing. Raised by
	// package settle, once per such report; Reason is the report's.
	FallbackUnsent = "FALLBACK_UNSENT"
)

// Kinds is every alert kind herald raises, for the metrics that count them
// from the start.
var Kinds = []string{UnknownOutcome, StaleClaim, OutboxExpired, OutboxFailed, DispatchSlow, RecordFailed, RetryExhausted, Parked, Redriven,
	Unaccounted, UnknownUnsettled, CampaignStalled, FallbackUnsent}

// Sink receives alerts.
type Sink interface {
	Alert(ctx context.Context, a Alert)
}

// Log writes alerts to a slog logger at error level.
type Log struct{ Logger *slog.Logger }

// Alert logs a.
func (l Log) Alert(ctx context.Context, a Alert) {
	attrs := []slog.Attr{slog.String("alert", a.Kind), slog.String("message_id", a.MessageID),
		slog.String("tenant", a.Tenant), slog.String("reason", a.Reason)}
	if a.Count > 1 || (a.Count == 1 && a.MessageID == "") {
		attrs = append(attrs, slog.Int("count", a.Count))
	}
	l.Logger.LogAttrs(ctx, slog.LevelError, "alert", attrs...)
}

// Recorder keeps alerts in memory, for tests.
type Recorder struct {
	mu     sync.Mutex
	alerts []Alert
}

// Alert records a.
func (r *Recorder) Alert(_ context.Context, a Alert) {
	r.mu.Lock()
	r.alerts = append(r.alerts, a)
	r.mu.Unlock()
}

// Alerts returns what was recorded.
func (r *Recorder) Alerts() []Alert {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Alert(nil), r.alerts...)
}

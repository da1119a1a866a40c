package lookup_test

import (
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/lookup"
	"github.com/heraldhq/herald/store"
)

var (
	now       = time.Date(2030, 3, 14, 9, 0, 0, 0, time.UTC)
	outboxAt  = now.Add(-2 * time.Minute)
	deliverAt = now.Add(-time.Minute)
)

// one builds a view of a notification with a single planned send.
func one(sendAt *time.Time, ostate heraldtype.OutboxState, oreason string, d *store.Delivery) store.NotificationView {
	return store.NotificationView{
		ID: "ntf_1", Kind: "payment.approved", Recipient: "user-1", EventID: "evt-1", CreatedAt: outboxAt,
		SendAt: sendAt, Now: now,
		Deliveries: []store.DeliveryView{{
			MessageID: "ntf_1.sms", Channel: heraldtype.ChannelSMS,
			OutboxState: ostate, OutboxReason: oreason, OutboxUpdated: outboxAt, Delivery: d,
		}},
	}
}

func delivery(s heraldtype.DeliveryState, reason string, attempts int) *store.Delivery {
	return &store.Delivery{MessageID: "ntf_1.sms", State: s, Reason: reason, Attempts: attempts, UpdatedAt: deliverAt}
}

func TestViewState(t *testing.T) {
	t.Parallel()
	future, past := now.Add(time.Hour), now.Add(-time.Hour)
	for _, tc := range []struct {
		name      string
		view      store.NotificationView
		state     string
		reason    string
		attempts  int
		updatedAt time.Time
	}{
		{
			name:  "NoDeliveryRowIsPending",
			view:  one(nil, heraldtype.OutboxPending, "", nil),
			state: "PENDING", updatedAt: outboxAt,
		},
		{
			name:  "ClaimedButNotYetSentIsPending",
			view:  one(nil, heraldtype.OutboxClaimed, "", nil),
			state: "PENDING", updatedAt: outboxAt,
		},
		{
			name:  "SendAtAheadIsScheduled",
			view:  one(&future, heraldtype.OutboxPending, "", nil),
			state: "SCHEDULED", updatedAt: outboxAt,
		},
		{
			name:  "SendAtPassedIsPending",
			view:  one(&past, heraldtype.OutboxPending, "", nil),
			state: "PENDING", updatedAt: outboxAt,
		},
		{
			name:  "SendingShowsTheDelivery",
			view:  one(nil, heraldtype.OutboxClaimed, "", delivery(heraldtype.DeliverySending, "", 1)),
			state: "SENDING", attempts: 1, updatedAt: deliverAt,
		},
		{
			name:  "RetryWaitShowsTheDelivery",
			view:  one(nil, heraldtype.OutboxPending, "", delivery(heraldtype.DeliveryRetryWait, "HTTP_429", 2)),
			state: "RETRY_WAIT", reason: "HTTP_429", attempts: 2, updatedAt: deliverAt,
		},
		{
			name:  "TerminalDeliveryWins",
			view:  one(nil, heraldtype.OutboxDone, "", delivery(heraldtype.DeliveryProviderAccepted, "", 1)),
			state: "PROVIDER_ACCEPTED", attempts: 1, updatedAt: deliverAt,
		},
		{
			name:  "TerminalDeliveryWinsOverExpiredOutbox",
			view:  one(nil, heraldtype.OutboxExpired, heraldtype.ReasonExpired, delivery(heraldtype.DeliveryUnknown, heraldtype.ReasonStaleClaim, 1)),
			state: "UNKNOWN", reason: heraldtype.ReasonStaleClaim, attempts: 1, updatedAt: deliverAt,
		},
		{
			name:  "ExpiredOutboxWinsOverWaitingDelivery",
			view:  one(nil, heraldtype.OutboxExpired, heraldtype.ReasonExpired, delivery(heraldtype.DeliveryRetryWait, "HTTP_429", 1)),
			state: "EXPIRED", reason: heraldtype.ReasonExpired, attempts: 1, updatedAt: outboxAt,
		},
		{
			name:  "ExpiredBeforeAnySendWinsOverScheduled",
			view:  one(&future, heraldtype.OutboxExpired, heraldtype.ReasonExpired, nil),
			state: "EXPIRED", reason: heraldtype.ReasonExpired, updatedAt: outboxAt,
		},
		{
			name:  "FailedOutbox",
			view:  one(nil, heraldtype.OutboxFailed, heraldtype.ReasonStoreUnavailable, nil),
			state: "FAILED", reason: heraldtype.ReasonStoreUnavailable, updatedAt: outboxAt,
		},
		{
			name:  "SuppressedWithReason",
			view:  one(nil, heraldtype.OutboxDone, "", delivery(heraldtype.DeliverySuppressed, heraldtype.ReasonDestinationUnavailable, 0)),
			state: "SUPPRESSED", reason: heraldtype.ReasonDestinationUnavailable, updatedAt: deliverAt,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n := lookup.View(tc.view)
			if n.ID != "ntf_1" || n.Kind != "payment.approved" || n.Recipient != "user-1" {
				t.Errorf("header = %q %q %q", n.ID, n.Kind, n.Recipient)
			}
			if len(n.Deliveries) != 1 {
				t.Fatalf("deliveries = %d, want 1", len(n.Deliveries))
			}
			d := n.Deliveries[0]
			if d.MessageID != "ntf_1.sms" || d.Channel != "sms" {
				t.Errorf("entry = %q on %q", d.MessageID, d.Channel)
			}
			if d.State != tc.state || d.Reason != tc.reason || d.Attempts != tc.attempts || !d.UpdatedAt.Equal(tc.updatedAt) {
				t.Errorf("entry = %s/%q attempts %d at %s, want %s/%q attempts %d at %s",
					d.State, d.Reason, d.Attempts, d.UpdatedAt, tc.state, tc.reason, tc.attempts, tc.updatedAt)
			}
		})
	}
}

func TestViewWithNoPlannedSendsIsAnEmptyList(t *testing.T) {
	t.Parallel()
	n := lookup.View(store.NotificationView{ID: "ntf_1", Now: now})
	if n.Deliveries == nil || len(n.Deliveries) != 0 {
		t.Errorf("deliveries = %#v, want an empty list (JSON [] not null)", n.Deliveries)
	}
}

// next_attempt_at is shown only while the entry shows RETRY_WAIT: an
// expired row's waiting delivery has no next attempt.
func TestNextAttemptOnlyWhileWaiting(t *testing.T) {
	t.Parallel()
	next := now.Add(10 * time.Minute)
	waiting := delivery(heraldtype.DeliveryRetryWait, "HTTP_429", 1)
	waiting.NextAttemptAt = &next
	if got := lookup.View(one(nil, heraldtype.OutboxPending, "", waiting)).Deliveries[0]; got.NextAttemptAt == nil || !got.NextAttemptAt.Equal(next) {
		t.Errorf("RETRY_WAIT entry %+v, want next_attempt_at %s", got, next)
	}
	if got := lookup.View(one(nil, heraldtype.OutboxExpired, heraldtype.ReasonExpired, waiting)).Deliveries[0]; got.State != "EXPIRED" || got.NextAttemptAt != nil {
		t.Errorf("EXPIRED entry %+v, want no next_attempt_at", got)
	}
	if got := lookup.View(one(nil, heraldtype.OutboxPending, "", nil)).Deliveries[0]; got.NextAttemptAt != nil || got.AttemptsLog != nil {
		t.Errorf("PENDING entry %+v, want neither next_attempt_at nor (before WithAttempts) attempts_log", got)
	}
}

// A send put back PENDING to wait (quiet hours) shows PENDING with its
// reason "" as before, and deferred naming why and until when; not once
// it is due, nor while SCHEDULED, nor with a delivery row.
func TestDeferredShowsWhyAndUntilWhenWhilePending(t *testing.T) {
	t.Parallel()
	morning := now.Add(11 * time.Hour)
	at := func(v store.NotificationView, due time.Time) store.NotificationView {
		v.Deliveries[0].AvailableAt = due
		return v
	}
	got := lookup.View(at(one(nil, heraldtype.OutboxPending, heraldtype.ReasonQuietHours, nil), morning)).Deliveries[0]
	if got.State != heraldtype.ViewPending || got.Reason != "" || got.Deferred == nil ||
		*got.Deferred != (lookup.Deferred{Reason: heraldtype.ReasonQuietHours, Until: morning}) {
		t.Fatalf("deferred entry %+v (deferred %+v), want PENDING deferred for QUIET_HOURS until %s", got, got.Deferred, morning)
	}
	future := now.Add(time.Hour)
	waiting := delivery(heraldtype.DeliveryRetryWait, "HTTP_429", 1)
	for name, v := range map[string]store.NotificationView{
		"Due":       at(one(nil, heraldtype.OutboxPending, heraldtype.ReasonQuietHours, nil), now),
		"Scheduled": at(one(&future, heraldtype.OutboxPending, "", nil), future),
		"NoReason":  at(one(nil, heraldtype.OutboxPending, "", nil), morning),
		"RetryWait": at(one(nil, heraldtype.OutboxPending, "HTTP_429", waiting), morning),
		"Claimed":   at(one(nil, heraldtype.OutboxClaimed, heraldtype.ReasonQuietHours, nil), morning),
	} {
		if e := lookup.View(v).Deliveries[0]; e.Deferred != nil {
			t.Errorf("%s: %s entry deferred %+v, want none", name, e.State, e.Deferred)
		}
	}
	// A retry whose attempt quiet hours put back past its
	// next_attempt_at (already passed, read alone it looks overdue) shows
	// the deferral; a retry waiting for its own next_attempt_at does not.
	passed := now.Add(-time.Minute)
	held := delivery(heraldtype.DeliveryRetryWait, "BIZPPURIO_3001", 1)
	held.NextAttemptAt = &passed
	e := lookup.View(at(one(nil, heraldtype.OutboxPending, heraldtype.ReasonQuietHours, held), morning)).Deliveries[0]
	if e.State != string(heraldtype.DeliveryRetryWait) || e.Deferred == nil ||
		*e.Deferred != (lookup.Deferred{Reason: heraldtype.ReasonQuietHours, Until: morning}) {
		t.Errorf("a retry held by quiet hours: %s, deferred %+v; want RETRY_WAIT deferred for QUIET_HOURS until %s", e.State, e.Deferred, morning)
	}
	own := delivery(heraldtype.DeliveryRetryWait, "HTTP_429", 1)
	own.NextAttemptAt = &future
	if e := lookup.View(at(one(nil, heraldtype.OutboxPending, "HTTP_429", own), future)).Deliveries[0]; e.Deferred != nil {
		t.Errorf("a retry waiting for its own next_attempt_at: deferred %+v, want none", e.Deferred)
	}
	// PostgreSQL writes the row's due time a few microseconds after the
	// delivery's next_attempt_at (clock_timestamp() read twice): still the
	// retry's own wait.
	if e := lookup.View(at(one(nil, heraldtype.OutboxPending, "HTTP_429", own), future.Add(58*time.Microsecond))).Deliveries[0]; e.Deferred != nil {
		t.Errorf("a retry due 58µs after its next_attempt_at: deferred %+v, want none", e.Deferred)
	}
}

package fallback_test

import (
	"testing"

	"github.com/heraldhq/herald/fallback"
	"github.com/heraldhq/herald/heraldtype"
)

func TestDefinite(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		state  heraldtype.DeliveryState
		reason string
		want   bool
	}{
		{heraldtype.DeliveryPermanentFailure, "UNREGISTERED", true},
		{heraldtype.DeliveryRetryExhausted, "HTTP_503", true},
		{heraldtype.DeliverySuppressed, heraldtype.ReasonDestinationUnavailable, true},
		{heraldtype.DeliverySuppressed, heraldtype.ReasonConsentDenied, true},
		{heraldtype.DeliverySuppressed, heraldtype.ReasonQuietHours, false},
		{heraldtype.DeliverySuppressed, heraldtype.ReasonDuplicateEvent, false},
		{heraldtype.DeliverySuppressed, heraldtype.ReasonCancelled, false},
		{heraldtype.DeliveryUnknown, "TIMEOUT", false},
		{heraldtype.DeliveryProviderAccepted, "", false},
		{heraldtype.DeliveryDelivered, "", false},
		{heraldtype.DeliveryStored, "STORED", false},
	} {
		if got := fallback.Definite(c.state, c.reason); got != c.want {
			t.Errorf("Definite(%s, %s) = %v, want %v", c.state, c.reason, got, c.want)
		}
	}
}

// Decide is the chain's rule on its rows as they stand.
func TestDecide(t *testing.T) {
	t.Parallel()
	waiting := func(step int) fallback.Send {
		return fallback.Send{Step: step, Outbox: heraldtype.OutboxWaiting}
	}
	ended := func(step int, state heraldtype.DeliveryState, reason string) fallback.Send {
		return fallback.Send{Step: step, Outbox: heraldtype.OutboxDone, Delivery: state, Reason: reason}
	}
	for _, c := range []struct {
		name  string
		sends []fallback.Send
		want  fallback.Decision
	}{
		{"NothingWaits", []fallback.Send{ended(1, heraldtype.DeliveryProviderAccepted, "")}, fallback.Decision{Verdict: fallback.Wait}},
		{"PendingStepOne", []fallback.Send{{Step: 1, Outbox: heraldtype.OutboxPending}, waiting(2)}, fallback.Decision{Verdict: fallback.Wait}},
		{"RetryWaitHolds", []fallback.Send{{Step: 1, Outbox: heraldtype.OutboxPending, Delivery: heraldtype.DeliveryRetryWait}, waiting(2)},
			fallback.Decision{Verdict: fallback.Wait}},
		{"PublishedWithoutDeliveryIsInTheBroker", []fallback.Send{{Step: 1, Outbox: heraldtype.OutboxPublished}, waiting(2)},
			fallback.Decision{Verdict: fallback.Wait}},
		{"FailureReleases", []fallback.Send{ended(1, heraldtype.DeliveryPermanentFailure, "X"), waiting(2), waiting(3)},
			fallback.Decision{Verdict: fallback.Release, Step: 2, After: "PERMANENT_FAILURE"}},
		{"SuppressedForAddressReleases", []fallback.Send{ended(1, heraldtype.DeliverySuppressed, heraldtype.ReasonDestinationUnavailable), waiting(2)},
			fallback.Decision{Verdict: fallback.Release, Step: 2, After: heraldtype.ReasonDestinationUnavailable}},
		{"OneDeviceStillSending", []fallback.Send{ended(1, heraldtype.DeliveryPermanentFailure, "X"),
			{Step: 1, Outbox: heraldtype.OutboxClaimed, Delivery: heraldtype.DeliverySending}, waiting(2)}, fallback.Decision{Verdict: fallback.Wait}},
		{"OneDeviceAccepted", []fallback.Send{ended(1, heraldtype.DeliveryPermanentFailure, "X"), ended(1, heraldtype.DeliveryProviderAccepted, ""), waiting(2)},
			fallback.Decision{Verdict: fallback.Skip, After: "PROVIDER_ACCEPTED"}},
		{"UnknownSkips", []fallback.Send{ended(1, heraldtype.DeliveryUnknown, "TIMEOUT"), waiting(2)},
			fallback.Decision{Verdict: fallback.Skip, After: "UNKNOWN"}},
		{"OutboxFailedReleases", []fallback.Send{{Step: 1, Outbox: heraldtype.OutboxFailed}, waiting(2)},
			fallback.Decision{Verdict: fallback.Release, Step: 2, After: "FAILED"}},
		{"OutboxFailedWithARetryWaits", []fallback.Send{{Step: 1, Outbox: heraldtype.OutboxFailed, Delivery: heraldtype.DeliveryRetryWait}, waiting(2)},
			fallback.Decision{Verdict: fallback.Wait}},
		{"OutboxExpiredSkips", []fallback.Send{{Step: 1, Outbox: heraldtype.OutboxExpired}, waiting(2)},
			fallback.Decision{Verdict: fallback.Skip, After: "EXPIRED"}},
		{"SecondStepReleasesTheThird", []fallback.Send{ended(1, heraldtype.DeliveryRetryExhausted, "X"), ended(2, heraldtype.DeliveryPermanentFailure, "Y"), waiting(3)},
			fallback.Decision{Verdict: fallback.Release, Step: 3, After: "PERMANENT_FAILURE"}},
		{"AWaitingStepWaitsForTheOneBefore", []fallback.Send{ended(1, heraldtype.DeliveryPermanentFailure, "X"), {Step: 2, Outbox: heraldtype.OutboxClaimed}, waiting(3)},
			fallback.Decision{Verdict: fallback.Wait}},
	} {
		if got := fallback.Decide(c.sends); got != c.want {
			t.Errorf("%s: Decide = %+v, want %+v", c.name, got, c.want)
		}
	}
}

// LeftUnsent: every send ended in a definite failure and some step was
// skipped; anything that reached the recipient, might have (UNKNOWN), or
// is still under way, and a chain with nothing skipped, is not.
func TestLeftUnsent(t *testing.T) {
	failed := func(step int) fallback.Send {
		return fallback.Send{Step: step, Outbox: heraldtype.OutboxDone, Delivery: heraldtype.DeliveryPermanentFailure}
	}
	skipped := func(step int) fallback.Send { return fallback.Send{Step: step, Outbox: heraldtype.OutboxSkipped} }
	with := func(step int, state heraldtype.DeliveryState, reason string) fallback.Send {
		return fallback.Send{Step: step, Outbox: heraldtype.OutboxDone, Delivery: state, Reason: reason}
	}
	for name, c := range map[string]struct {
		sends []fallback.Send
		want  bool
	}{
		"FailedLateAfterSkipping":  {[]fallback.Send{failed(1), skipped(2), skipped(3)}, true},
		"TwoDevicesBothFailedLate": {[]fallback.Send{failed(1), failed(1), skipped(2)}, true},
		"OneDeviceStillAccepted":   {[]fallback.Send{failed(1), with(1, heraldtype.DeliveryProviderAccepted, ""), skipped(2)}, false},
		"StillUnknown":             {[]fallback.Send{with(1, heraldtype.DeliveryUnknown, "TIMEOUT"), skipped(2)}, false},
		"ASecondStepDelivered":     {[]fallback.Send{failed(1), with(2, heraldtype.DeliveryDelivered, ""), skipped(3)}, false},
		"EveryStepTriedAndFailed":  {[]fallback.Send{failed(1), failed(2)}, false},
		"CancelledNotFailed":       {[]fallback.Send{failed(1), with(2, heraldtype.DeliverySuppressed, heraldtype.ReasonCancelled), skipped(3)}, false},
		"NoAddressCountsAsFailed":  {[]fallback.Send{with(1, heraldtype.DeliverySuppressed, heraldtype.ReasonDestinationUnavailable), failed(2), skipped(3)}, true},
		"AStepStillWaiting":        {[]fallback.Send{failed(1), {Step: 2, Outbox: heraldtype.OutboxWaiting}}, false},
		"NoSends":                  {nil, false},
	} {
		if got := fallback.LeftUnsent(c.sends); got != c.want {
			t.Errorf("%s: %v, want %v", name, got, c.want)
		}
	}
}

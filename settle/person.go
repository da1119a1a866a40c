package settle

import (
	"context"
	"errors"
	"fmt"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// Result is what a person found an UNKNOWN delivery came to.
type Result string

const (
	ResultDelivered Result = "delivered"
	ResultFailed    Result = "failed"
)

// Moves is the state and reason r writes; false for a result that is
// neither delivered nor failed.
func (r Result) Moves() (heraldtype.DeliveryState, string, bool) {
	switch r {
	case ResultDelivered:
		return heraldtype.DeliveryDelivered, ReasonSettledDelivered, true
	case ResultFailed:
		return heraldtype.DeliveryPermanentFailure, ReasonSettledFailed, true
	}
	return "", "", false
}

// Reasons a person's word writes.
const (
	ReasonSettledDelivered = "SETTLED_DELIVERED"
	ReasonSettledFailed    = "SETTLED_FAILED"
)

// ErrResult is a result other than delivered or failed.
var ErrResult = errors.New(`settle: the result is "delivered" or "failed"`)

// ErrNotUnknown is a delivery a person may not settle: it is not UNKNOWN
// (any more). The error names its state.
var ErrNotUnknown = errors.New("settle: the delivery is not UNKNOWN")

// ByPerson moves tenant's UNKNOWN delivery messageID as r says (tenant ""
// for the operator: any tenant's). A message id with no delivery, or
// another tenant's, is store.ErrNotFound; a delivery a person settled the
// same way already is no error, with Moved false (a retry whose answer
// was lost: the caller records nothing again); one in any other state is
// ErrNotUnknown, with nothing changed. The outcome names the delivery's
// tenant.
func ByPerson(ctx context.Context, st Store, tenant, messageID string, r Result) (store.ReportOutcome, error) {
	to, reason, ok := r.Moves()
	if !ok {
		return store.ReportOutcome{}, ErrResult
	}
	p := store.ReportParams{AnyProvider: true, Tenant: tenant, MessageID: messageID, From: onlyUnknown, To: to, Reason: reason}
	if messageID == "" {
		return store.ReportOutcome{}, store.ErrNotFound
	}
	out, err := st.DeliveryReport(ctx, p)
	if err != nil {
		return out, err
	}
	switch {
	case out.Moved:
	case out.From == to && out.Reason == reason:
		// Settled so already: a retry whose first answer was lost.
	default:
		return out, fmt.Errorf("%w: it is %s", ErrNotUnknown, out.From)
	}
	return out, nil
}

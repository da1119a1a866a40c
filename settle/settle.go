// Package settle applies a provider's later word on a message to its
// delivery: the delivery reports a provider sends to
// POST /v1/callbacks/{provider} (Apply, from httpapi) and the answers of
// status look-ups the leader makes for UNKNOWN deliveries (Looker).
//
// What a report may move (Move), the same for both sources:
//
//	report      moves from                     to                  reason
//	delivered   PROVIDER_ACCEPTED, UNKNOWN     DELIVERED           the report's (e.g. TWILIO_DELIVERED)
//	failed      PROVIDER_ACCEPTED, UNKNOWN     PERMANENT_FAILURE   the report's (e.g. TWILIO_30003)
//	pending     UNKNOWN                        PROVIDER_ACCEPTED   the report's: the call went out after all
//	not_found   UNKNOWN                        UNKNOWN             LOOKUP_NOT_FOUND: left for a person
//
// A failed report never moves a fallback chain on: the chain was decided
// on the send's first word. When it leaves a chain that skipped its later
// channels with every send failed (fallback.LeftUnsent), Apply raises
// FALLBACK_UNSENT, so a person hears the recipient was told nothing.
//
// Anything else changes nothing: a report never moves a delivery back
// (a late "sent" after "delivered"), never ends a send that is still in
// flight or waiting (SENDING, RETRY_WAIT: the sender owns those), and never
// touches another provider's messages (the store answers ErrNotFound),
// save those of the same vendor account: a vendor that pushes an
// account's every report to one URL (provider.AccountReceiver: Bizppurio,
// run as one entry per channel) has the report taken at any of the
// account's entries settle a message whichever of them sent it. A
// report repeated changes nothing the second time. A report that finds the
// send still SENDING — a provider can call back before the sender has
// written what the call answered — is ErrNotYet, which the callback
// endpoint answers 503 with Retry-After, so a provider that retries its
// callbacks brings it again; the sender's own result, conditional on
// SENDING, is never written over a report.
//
// A provider that can be asked only by its own reference (Twilio's sid)
// cannot be asked about a call whose answer was lost, which is most
// UNKNOWNs: such a delivery stays UNKNOWN with reason
// LOOKUP_NO_REFERENCE, for a person, and is not asked about again.
//
// A status look-up that finds no record of the message proves nothing
// (providers keep records for days, some record a call only once it is
// processed): the delivery stays UNKNOWN with reason LOOKUP_NOT_FOUND,
// which takes it out of the look-up rounds and leaves it to a person (the
// reconciliation report lists it among the UNKNOWN). A look-up that fails
// (the provider unreachable or refusing) leaves the delivery as it was,
// for a later round.
//
// # A person's word
//
// A provider with neither delivery reports nor a status look-up (a
// webhook, FCM, APNs, SMTP) leaves an UNKNOWN for good: nothing in herald
// can learn how it ended. A person can: the support desk asked the
// customer, the vendor's console shows the message, the receiving
// system's log has it. ByPerson records what they found, through the
// same conditional write a report makes:
//
//	result     moves from   to                  reason
//	delivered  UNKNOWN      DELIVERED           SETTLED_DELIVERED
//	failed     UNKNOWN      PERMANENT_FAILURE   SETTLED_FAILED
//
// Only an UNKNOWN is settled this way (a report or a receipt that came
// first wins, and a settled delivery is not settled otherwise:
// ErrNotUnknown; the same result again is a retry, answered without a
// move). A person's word is final: a report or a receipt after it finds a
// state it may not move. What follows from the new state is what follows
// from a report's: DELIVERED keeps the event's key (package suppression)
// until it is purged, as any accepted send's; PERMANENT_FAILURE holds it
// no more, and once the key's lease has run out (usually before anyone
// settles) the producer may send the event again. A fallback chain that the
// UNKNOWN ended (FALLBACK_NOT_NEEDED) stays ended. The caller records who
// said so (the audit log): the API's admin route and the CLI's herald
// unknown settle.
package settle

import (
	"context"
	"errors"
	"strings"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/fallback"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/store"
)

// Store is what settling needs of the store.
type Store interface {
	DeliveryReport(ctx context.Context, p store.ReportParams) (store.ReportOutcome, error)
	DeliveryUnknownPage(ctx context.Context, p store.UnknownPageParams) ([]store.UnknownDelivery, error)
	// NotificationGet reads a failed send's notification, to see its
	// fallback chain (chainUnsent).
	NotificationGet(ctx context.Context, tenant, id string) (store.NotificationView, error)
}

// Reasons written when a report carries none.
const (
	ReasonReportDelivered = "REPORT_DELIVERED"
	ReasonReportFailed    = "REPORT_FAILED"
	ReasonReportPending   = "REPORT_PENDING"
	// ReasonLookupNotFound: a status look-up found no record (see the
	// package doc); store.ReasonLookupPrefix keeps it out of later rounds.
	ReasonLookupNotFound = store.ReasonLookupPrefix + "NOT_FOUND"
	// ReasonLookupNoReference: the provider can be asked only by its own
	// reference and the call's answer carried none
	// (provider.ErrNoReference); left for a person like LOOKUP_NOT_FOUND.
	ReasonLookupNoReference = store.ReasonLookupPrefix + "NO_REFERENCE"
)

// ErrNotYet: the report found the send still in flight (SENDING); nothing
// changed, and the report may be brought again later.
var ErrNotYet = errors.New("settle: the send is still in flight")

var (
	sentOrUnknown = []heraldtype.DeliveryState{heraldtype.DeliveryProviderAccepted, heraldtype.DeliveryUnknown}
	onlyUnknown   = []heraldtype.DeliveryState{heraldtype.DeliveryUnknown}
)

// Move is what r may do to a delivery of providerName (the package doc's
// table); false for a report that moves nothing whatever the state.
func Move(providerName string, r provider.Report) (store.ReportParams, bool) {
	p := store.ReportParams{Provider: providerName, MessageID: r.MessageID, Reason: r.Reason}
	def := ""
	switch r.Result {
	case provider.ReportDelivered:
		p.From, p.To, def = sentOrUnknown, heraldtype.DeliveryDelivered, ReasonReportDelivered
	case provider.ReportFailed:
		p.From, p.To, def = sentOrUnknown, heraldtype.DeliveryPermanentFailure, ReasonReportFailed
	case provider.ReportPending:
		p.From, p.To, def = onlyUnknown, heraldtype.DeliveryProviderAccepted, ReasonReportPending
	case provider.ReportNotFound:
		p.From, p.To, p.Reason = onlyUnknown, heraldtype.DeliveryUnknown, ReasonLookupNotFound
	default:
		return store.ReportParams{}, false
	}
	if p.Reason == "" {
		p.Reason = def
	}
	return p, true
}

// Apply applies r, which providerName sent (source: metrics.ReportCallback
// or metrics.ReportLookup), to its delivery. A report that names no
// message, or a message that is not the provider's, is store.ErrNotFound;
// one that finds the send in flight is ErrNotYet. A failure report that
// leaves its notification's fallback chain with nothing sent raises
// FALLBACK_UNSENT to alerts (nil: none).
func Apply(ctx context.Context, st Store, m *metrics.Metrics, alerts alert.Sink, providerName, source string, r provider.Report) (store.ReportOutcome, error) {
	return apply(ctx, st, m, alerts, providerName, nil, source, r)
}

// apply is Apply for a report that may also be about a message one of
// sameAccount sent: the other entries of providerName's vendor account,
// whose reports all come to one URL (provider.AccountReceiver).
func apply(ctx context.Context, st Store, m *metrics.Metrics, alerts alert.Sink, providerName string, sameAccount []string, source string, r provider.Report) (store.ReportOutcome, error) {
	p, ok := Move(providerName, r)
	if !ok {
		return store.ReportOutcome{}, errors.New("settle: a report with no result")
	}
	p.AlsoProviders = sameAccount
	if p.MessageID == "" {
		return store.ReportOutcome{}, store.ErrNotFound
	}
	out, err := st.DeliveryReport(ctx, p)
	if err != nil {
		return out, err
	}
	m.ProviderReport(providerName, source, r.Result.String(), out.Moved)
	if !out.Moved && out.From == heraldtype.DeliverySending {
		return out, ErrNotYet
	}
	if out.Moved && p.To == heraldtype.DeliveryPermanentFailure {
		// The move is made; a failed read only costs the alert, which the
		// report's own metric and the read API still show.
		if unsent, err := chainUnsent(ctx, st, out.Tenant, p.MessageID); err == nil && unsent {
			m.Alert(alert.FallbackUnsent)
			if alerts != nil {
				alerts.Alert(ctx, alert.Alert{Kind: alert.FallbackUnsent, MessageID: p.MessageID, Tenant: out.Tenant, Reason: p.Reason})
			}
		}
	}
	return out, nil
}

// chainUnsent reports whether the send messageID, just failed by a
// report, is on a fallback chain that has now ended with nothing sent
// (fallback.LeftUnsent): the chain skipped its later steps on the send's
// first word, and herald moves no chain again. Off a chain: false. The
// notification is the message id's part before its first dot (herald's
// ids have none), and only the send with that exact message id counts.
func chainUnsent(ctx context.Context, st Store, tenant, messageID string) (bool, error) {
	nid, _, ok := strings.Cut(messageID, ".")
	if !ok {
		return false, nil
	}
	v, err := st.NotificationGet(ctx, tenant, nid)
	if err != nil {
		return false, err
	}
	var sends []fallback.Send
	onChain := false
	for _, dv := range v.Deliveries {
		if dv.Fallback == nil {
			continue
		}
		s := fallback.Send{Step: dv.Fallback.Step, Outbox: dv.OutboxState}
		if dv.Delivery != nil {
			s.Delivery, s.Reason = dv.Delivery.State, dv.Delivery.Reason
		}
		sends = append(sends, s)
		onChain = onChain || dv.MessageID == messageID
	}
	return onChain && fallback.LeftUnsent(sends), nil
}

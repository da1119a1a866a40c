package store

import (
	"context"
	"errors"
	"time"

	"github.com/heraldhq/herald/heraldtype"
)

// Reports applies a provider's later word on a message — a delivery report
// (POST /v1/callbacks/{provider}) or the answer to a status look-up — to
// its delivery, and lists the UNKNOWN deliveries a look-up may settle.
// Package settle decides what a report may move; the store makes the move
// exactly once.
type Reports interface {
	// DeliveryReport moves p.MessageID's delivery to p.To with p.Reason
	// when it was made through p.Provider or one of p.AlsoProviders (any
	// provider with p.AnyProvider: a person's word, settle.ByPerson), is
	// p.Tenant's (any tenant's when "") and is in one of p.From, through
	// one write conditional on the state it read, so a report never
	// writes over a result another write made meanwhile (a receipt, a
	// second report), and nothing moves a delivery out of a state not in
	// p.From. A message id that does not exist, or whose delivery another
	// provider made (neither p.Provider nor one of p.AlsoProviders) or
	// another tenant's, is ErrNotFound: a provider's report reaches only
	// its own messages (and its account's: AlsoProviders), a tenant's
	// admin only the tenant's. The outcome says what the report found and
	// whether it moved it.
	DeliveryReport(ctx context.Context, p ReportParams) (ReportOutcome, error)
	// DeliveryUnknownPage returns up to p.Limit UNKNOWN deliveries made
	// through p.Provider with a message id after p.After, by message id,
	// leaving out those whose reason starts with ReasonLookupPrefix: a
	// look-up already answered for them and left them for a person.
	DeliveryUnknownPage(ctx context.Context, p UnknownPageParams) ([]UnknownDelivery, error)
	// DeliveryUnknownList returns up to p.Limit UNKNOWN deliveries after
	// p.After, by provider and message id, of p.Tenant ("" every tenant's)
	// and p.Provider ("" every provider's), those a look-up left for a
	// person included: what a person may settle (settle.ByPerson).
	DeliveryUnknownList(ctx context.Context, p UnknownListParams) ([]UnknownEntry, error)
}

// UnknownListParams pages through UNKNOWN deliveries for a person.
type UnknownListParams struct {
	Tenant   string
	Provider string
	// After is the last entry of the page before (zero for the first).
	After UnknownPosition
	Limit int
}

// UnknownPosition is a place in DeliveryUnknownList's order.
type UnknownPosition struct {
	Provider  string
	MessageID string
}

// UnknownEntry is one UNKNOWN delivery as a person looks at it.
type UnknownEntry struct {
	MessageID      string
	NotificationID string
	Tenant         string
	Provider       string
	Channel        heraldtype.Channel
	Reason         string
	Attempts       int
	// Since is when it became UNKNOWN (or last changed, a look-up's mark).
	Since time.Time
}

// Position is e's place in DeliveryUnknownList's order.
func (e UnknownEntry) Position() UnknownPosition {
	return UnknownPosition{Provider: e.Provider, MessageID: e.MessageID}
}

// ReasonLookupPrefix starts the reason of an UNKNOWN delivery a status
// look-up could not settle (LOOKUP_NOT_FOUND): the settle rounds ask no
// more about it.
const ReasonLookupPrefix = "LOOKUP_"

// ReportParams is one report's move.
type ReportParams struct {
	// Provider is the provider whose report it is. AnyProvider, for a
	// person's word (settle.ByPerson), reaches every provider's delivery
	// instead; a Provider "" without it is refused.
	Provider    string
	AnyProvider bool
	// AlsoProviders are other providers whose deliveries the report
	// reaches as well as Provider's: the entries of one vendor account,
	// whose reports all come to one URL (Bizppurio registers one report
	// URL per account, whichever entry sent the message). Defaults to
	// none: Provider's deliveries only. A "" among them is refused;
	// with AnyProvider they add nothing.
	AlsoProviders []string
	// Tenant, when set, is the only tenant whose delivery it may move.
	Tenant    string
	MessageID string
	// From is the states the report may move the delivery out of.
	From []heraldtype.DeliveryState
	// To and Reason are what it writes.
	To     heraldtype.DeliveryState
	Reason string
}

// ReportOutcome is what a report did.
type ReportOutcome struct {
	// From is the delivery's state as the report found it.
	From heraldtype.DeliveryState
	// Moved: the report wrote To over From.
	Moved bool
	// Channel, Tenant and Reason are the delivery's (Reason as the
	// report found it).
	Channel heraldtype.Channel
	Tenant  string
	Reason  string
}

// ErrNoProvider is a report that names no provider and is not a
// person's word (ReportParams.AnyProvider), or that names "" among
// ReportParams.AlsoProviders.
var ErrNoProvider = errors.New("store: a report names no provider")

// Check refuses params that would reach every provider's deliveries by
// mistake (a Provider "" without AnyProvider), or the deliveries made
// through no provider (a "" in AlsoProviders). Both drivers call it.
func (p ReportParams) Check() error {
	if p.Provider == "" && !p.AnyProvider {
		return ErrNoProvider
	}
	for _, name := range p.AlsoProviders {
		if name == "" {
			return ErrNoProvider
		}
	}
	return nil
}

// UnknownPageParams pages through a provider's UNKNOWN deliveries.
type UnknownPageParams struct {
	Provider string
	// After is the last message id of the page before ("" for the first).
	After string
	Limit int
}

// UnknownDelivery is one UNKNOWN delivery a status look-up may settle.
type UnknownDelivery struct {
	MessageID string
	// ProviderRef is the provider's own id for it, when an answer carried
	// one ("" when the answer was lost, which is most UNKNOWNs).
	ProviderRef string
	// ClaimedAt is when its last attempt was claimed: about when the call
	// was made.
	ClaimedAt time.Time
}

// ReportMoves reports whether p may move a delivery found in state from.
// Both drivers decide through it.
func ReportMoves(p ReportParams, from heraldtype.DeliveryState) bool {
	for _, s := range p.From {
		if s == from {
			return true
		}
	}
	return false
}

package store

import (
	"context"
	"fmt"
)

// Sealed is the store's side of personal data at rest (package seal): the
// stores keep sealed values as opaque text; the re-encryption job
// (seal.Rekey) pages through each field that holds them and swaps a value
// for one sealed with the current key.
type Sealed interface {
	// SealedPage returns up to p.Limit rows of p.Field whose key is after
	// p.After (nil: from the first), in key order, with their tenant and
	// value as stored. Rows whose field is NULL are left out.
	SealedPage(ctx context.Context, p SealedPageParams) ([]SealedValue, error)
	// SealedSwap sets each swap's row to New where it still holds Old
	// (compare and set, so a write made since the page was read stays)
	// and returns how many rows changed.
	SealedSwap(ctx context.Context, field SealedField, swaps []SealedSwap) (int, error)
}

// SealedField names one column that holds sealed values.
type SealedField string

// The fields that hold personal data. Keys are the rows' primary (or
// unique) keys, in the order listed.
const (
	// notifications.params: key (id). A JSON object, or seal.SealJSON's
	// JSON string.
	SealedNotificationParams SealedField = "notifications.params"
	// campaigns.params: key (id).
	SealedCampaignParams SealedField = "campaigns.params"
	// campaign_recipients.params: key (campaign_id, recipient); the tenant
	// is the campaign's.
	SealedCampaignRecipientParams SealedField = "campaign_recipients.params"
	// profiles.data: key (tenant, recipient). The profile document, whose
	// "addresses" values are sealed one by one.
	SealedProfiles SealedField = "profiles.data"
	// devices.token: key (tenant, recipient, device_id).
	SealedDeviceTokens SealedField = "devices.token"
)

// SealedFields is every field, in the order the job walks them.
var SealedFields = []SealedField{
	SealedProfiles, SealedDeviceTokens, SealedCampaignParams, SealedCampaignRecipientParams, SealedNotificationParams,
}

// KeyLen is how many columns make the field's row key.
func (f SealedField) KeyLen() int {
	switch f {
	case SealedCampaignRecipientParams, SealedProfiles:
		return 2
	case SealedDeviceTokens:
		return 3
	}
	return 1
}

// SealedPageParams selects one page of a field.
type SealedPageParams struct {
	Field SealedField
	// After is the last key of the previous page (Field.KeyLen values),
	// nil for the first page.
	After []string
	Limit int
}

// SealedValue is one row's value.
type SealedValue struct {
	Key    []string
	Tenant string
	Value  string
}

// SealedSwap replaces one row's Old value with New.
type SealedSwap struct {
	Key      []string
	Old, New string
}

// Args are a page statement's arguments, the same on every store: the key
// after which the page starts (Field.KeyLen values, "" for a first page:
// keys are never empty), then the limit.
func (p SealedPageParams) Args() []any {
	n := p.Field.KeyLen()
	args := make([]any, 0, n+1)
	for i := range n {
		after := ""
		if i < len(p.After) {
			after = p.After[i]
		}
		args = append(args, after)
	}
	return append(args, p.Limit)
}

// Dest sizes v's key for field f and returns the scan destinations of a
// page row: the key columns, the tenant, the value.
func (f SealedField) Dest(v *SealedValue) []any {
	v.Key = make([]string, f.KeyLen())
	dest := make([]any, 0, len(v.Key)+2)
	for i := range v.Key {
		dest = append(dest, &v.Key[i])
	}
	return append(dest, &v.Tenant, &v.Value)
}

// Args are a swap statement's arguments: the key, the new value, the old
// one. A key of the wrong length for f is an error.
func (sw SealedSwap) Args(f SealedField) ([]any, error) {
	if len(sw.Key) != f.KeyLen() {
		return nil, fmt.Errorf("a key of %d values, want %d", len(sw.Key), f.KeyLen())
	}
	args := make([]any, 0, len(sw.Key)+2)
	for _, k := range sw.Key {
		args = append(args, k)
	}
	return append(args, sw.New, sw.Old), nil
}

package seal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/heraldhq/herald/store"
)

// FieldReport is what Rekey did to one field.
type FieldReport struct {
	Field store.SealedField `json:"field"`
	// Scanned rows; Current of them were sealed with the current key
	// already (or hold nothing personal: empty params); Sealed were
	// swapped for a value sealed with it; Raced were written by someone
	// else between the page and the swap (they hold a value written
	// since, sealed as every write is); Unreadable did not open.
	Scanned    int `json:"scanned"`
	Current    int `json:"current"`
	Sealed     int `json:"sealed"`
	Raced      int `json:"raced"`
	Unreadable int `json:"unreadable"`
	// UnreadableKeys counts the unreadable values by the key id they
	// name ("" for a corrupt value).
	UnreadableKeys map[string]int `json:"unreadable_keys,omitempty"`
}

// RekeyOptions tunes Rekey.
type RekeyOptions struct {
	// Page is how many rows one read and one swap take (default 500).
	Page int
	// Progress, when set, is called after each page with the field's
	// report so far.
	Progress func(FieldReport)
}

// Rekey walks every sealed field (store.SealedFields) and swaps each value
// not sealed with k's current key for one that is (see "Rotation" in the
// package doc). It needs a ring: without keys there is nothing to seal
// with. A value that does not open is counted, not changed, and the walk
// goes on; the reports say how many and under which key ids.
func Rekey(ctx context.Context, st store.Sealed, k *Keyring, opt RekeyOptions) ([]FieldReport, error) {
	if k == nil {
		return nil, ErrNoKeys
	}
	if opt.Page <= 0 {
		opt.Page = 500
	}
	var out []FieldReport
	for _, f := range store.SealedFields {
		r, err := rekeyField(ctx, st, k, f, opt)
		out = append(out, r)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

func rekeyField(ctx context.Context, st store.Sealed, k *Keyring, f store.SealedField, opt RekeyOptions) (FieldReport, error) {
	r := FieldReport{Field: f}
	var after []string
	for {
		page, err := st.SealedPage(ctx, store.SealedPageParams{Field: f, After: after, Limit: opt.Page})
		if err != nil {
			return r, err
		}
		if len(page) == 0 {
			return r, nil
		}
		var swaps []store.SealedSwap
		for _, v := range page {
			r.Scanned++
			next, changed, err := k.reseal(f, v.Tenant, v.Value)
			switch {
			case err != nil:
				r.Unreadable++
				if r.UnreadableKeys == nil {
					r.UnreadableKeys = map[string]int{}
				}
				r.UnreadableKeys[unreadableKey(err)]++
			case !changed:
				r.Current++
			default:
				swaps = append(swaps, store.SealedSwap{Key: v.Key, Old: v.Value, New: next})
			}
		}
		if len(swaps) > 0 {
			n, err := st.SealedSwap(ctx, f, swaps)
			if err != nil {
				return r, err
			}
			r.Sealed += n
			r.Raced += len(swaps) - n
		}
		if opt.Progress != nil {
			opt.Progress(r)
		}
		last := page[len(page)-1].Key
		if after != nil && slices.Equal(last, after) {
			return r, fmt.Errorf("seal: %s: the store's page did not move past key %q", f, after)
		}
		after = last
	}
}

// unreadableKey is the key id an unreadable value names ("" for a
// corrupt one).
func unreadableKey(err error) string {
	var ue *unknownKeyError
	if errors.As(err, &ue) {
		return ue.id
	}
	return ""
}

// reseal returns v of field f sealed with the current key, and whether
// that differs from v.
func (k *Keyring) reseal(f store.SealedField, tenant, v string) (string, bool, error) {
	switch f {
	case store.SealedDeviceTokens:
		if KeyID(v) == k.current || v == "" {
			return v, false, nil
		}
		plain, err := k.Open(Device, tenant, v)
		if err != nil {
			return "", false, err
		}
		return k.Seal(Device, tenant, plain), true, nil
	case store.SealedProfiles:
		return k.resealProfile(tenant, v)
	}
	raw := json.RawMessage(v)
	if JSONKeyID(raw) == k.current {
		return v, false, nil
	}
	if isEmptyParams(raw) {
		return v, false, nil // {} holds nothing personal (an erased row's)
	}
	plain, err := k.OpenJSON(tenant, raw)
	if err != nil {
		return "", false, err
	}
	return string(k.SealJSON(tenant, plain)), true, nil
}

// resealProfile reseals the "addresses" values of a profile document,
// keeping every other member as it is.
func (k *Keyring) resealProfile(tenant, v string) (string, bool, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal([]byte(v), &doc); err != nil {
		return "", false, ErrCorrupt
	}
	raw, ok := doc["addresses"]
	if !ok {
		return v, false, nil
	}
	var addrs map[string]string
	if err := json.Unmarshal(raw, &addrs); err != nil {
		return "", false, ErrCorrupt
	}
	changed := false
	for ch, a := range addrs {
		if a == "" || KeyID(a) == k.current {
			continue
		}
		plain, err := k.Open(Address, tenant, a)
		if err != nil {
			return "", false, err
		}
		addrs[ch], changed = k.Seal(Address, tenant, plain), true
	}
	if !changed {
		return v, false, nil
	}
	doc["addresses"], _ = json.Marshal(addrs)
	b, err := json.Marshal(doc)
	if err != nil {
		return "", false, err
	}
	return string(b), true, nil
}

// isEmptyParams reports params that hold nothing personal: {} (an erased
// row's), null or none. A sealed value, a JSON string, is never empty.
func isEmptyParams(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return len(raw) == 0 || json.Unmarshal(raw, &m) == nil && len(m) == 0
}

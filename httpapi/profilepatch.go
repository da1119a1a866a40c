package httpapi

import (
	"encoding/json"
	"log/slog"
	"maps"
	"net/http"
	"slices"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/consent"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/problem"
	"github.com/heraldhq/herald/seal"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/validate"
)

// profilePatch is PATCH /v1/recipients/{recipient}/profile's body, a JSON
// merge patch (RFC 7396) of the profile: a field left out is kept, a map's
// key set to null is removed, and language or time_zone set to null is
// cleared. A consent change alone keeps the addresses, which a PUT of the
// consent alone would remove.
type profilePatch struct {
	Addresses json.RawMessage `json:"addresses"`
	Consent   json.RawMessage `json:"consent"`
	Language  json.RawMessage `json:"language"`
	TimeZone  json.RawMessage `json:"time_zone"`
}

// patch applies a merge patch to the profile, in the store's transaction
// that holds its row (store.ConsentHistory.ProfileChangeBy), so that two
// patches of one recipient at once both land, and records the consent
// changes it makes as a PUT does.
func (p *profiles) patch(w http.ResponseWriter, r *http.Request) {
	var body profilePatch
	if !validate.DecodeJSON(w, r, &body, maxProfileBody, false) {
		return
	}
	tenant := auth.Tenant(r.Context())
	addresses, clearAddresses, prob := patchMap[string](body.Addresses, "addresses", checkAddress)
	if prob != nil {
		problem.Write(w, *prob)
		return
	}
	consents, clearConsent, prob := patchMap[bool](body.Consent, "consent", nil) // any bool is a consent
	if prob != nil {
		problem.Write(w, *prob)
		return
	}
	language, setLanguage, prob := patchString(body.Language, "language")
	if prob != nil {
		problem.Write(w, *prob)
		return
	}
	zone, setZone, prob := patchString(body.TimeZone, "time_zone")
	if prob != nil {
		problem.Write(w, *prob)
		return
	}
	if prob := checkLanguageAndZone(language, zone); prob != nil {
		problem.Write(w, *prob)
		return
	}
	for _, a := range addresses { // stored sealed, as PUT stores them
		if a != nil {
			*a = p.seal.Seal(seal.Address, tenant, *a)
		}
	}
	err := p.store.ProfileChangeBy(r.Context(), tenant, r.PathValue("recipient"), consent.Actor(r), func(prof *store.Profile) error {
		prof.Addresses = mergeInto(prof.Addresses, clearAddresses, addresses)
		prof.Consent = mergeInto(prof.Consent, clearConsent, consents)
		if setLanguage {
			prof.Language = language
		}
		if setZone {
			prof.TimeZone = zone
		}
		return nil
	})
	if err != nil {
		p.logger.LogAttrs(r.Context(), slog.LevelError, "profiles: store unavailable", slog.Any("error", err))
		problem.New(w, http.StatusServiceUnavailable, "the store is unavailable")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// patchMap reads a merge patch's map field: the values set (nil for a
// key set to null, to remove) and whether the whole map is null (clear
// it). Every key must be a channel; check, when not nil, refuses a value.
func patchMap[V any](raw json.RawMessage, field string, check func(ch string, v V) *problem.Problem) (map[heraldtype.Channel]*V, bool, *problem.Problem) {
	if len(raw) == 0 {
		return nil, false, nil
	}
	if string(raw) == "null" {
		return nil, true, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, false, &problem.Problem{Status: http.StatusBadRequest, Detail: field + " must be an object of channels (a value of null removes one)", Param: field}
	}
	out := make(map[heraldtype.Channel]*V, len(m))
	// In key order, so that a patch with several mistakes is answered the
	// same every time.
	for _, ch := range slices.Sorted(maps.Keys(m)) {
		if p := checkChannel(field, ch); p != nil {
			return nil, false, p
		}
		var v *V
		if err := json.Unmarshal(m[ch], &v); err != nil {
			// Each value on its own, so that the problem names it.
			detail := validate.ValueError(err, field+"."+ch)
			if detail == "" {
				detail = field + "." + ch + ": " + err.Error()
			}
			return nil, false, &problem.Problem{Status: http.StatusBadRequest, Detail: detail, Param: field + "." + ch}
		}
		if v != nil && check != nil {
			if p := check(ch, *v); p != nil {
				return nil, false, p
			}
		}
		out[heraldtype.Channel(ch)] = v
	}
	return out, false, nil
}

// mergeInto applies a map's patch to have: cleared first, then each key
// set or removed.
func mergeInto[V any](have map[heraldtype.Channel]V, clear bool, patch map[heraldtype.Channel]*V) map[heraldtype.Channel]V {
	if clear {
		have = nil
	}
	for ch, v := range patch {
		if v == nil {
			delete(have, ch)
			continue
		}
		if have == nil {
			have = map[heraldtype.Channel]V{}
		}
		have[ch] = *v
	}
	return have
}

// patchString reads a merge patch's string field: its value ("" for null)
// and whether it was given.
func patchString(raw json.RawMessage, field string) (string, bool, *problem.Problem) {
	if len(raw) == 0 {
		return "", false, nil
	}
	if string(raw) == "null" {
		return "", true, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false, &problem.Problem{Status: http.StatusBadRequest, Detail: field + " must be a string or null", Param: field}
	}
	return s, true, nil
}

// checkChannel refuses a field's key that is not a channel.
func checkChannel(field, ch string) *problem.Problem {
	if !heraldtype.Channel(ch).Valid() {
		return &problem.Problem{Status: http.StatusUnprocessableEntity, Detail: "unknown channel " + ch + "; one of " + heraldtype.ChannelNames(), Param: field + "." + ch}
	}
	return nil
}

// checkAddress refuses an address its channel does not take.
func checkAddress(ch, a string) *problem.Problem {
	if p := checkChannel("addresses", ch); p != nil {
		return p
	}
	if err := validate.Address(heraldtype.Channel(ch), a); err != nil {
		return &problem.Problem{Status: http.StatusUnprocessableEntity, Detail: ch + ": " + err.Error(), Param: "addresses." + ch}
	}
	return nil
}

// checkLanguageAndZone refuses a language or time zone herald cannot use
// ("" is none).
func checkLanguageAndZone(language, zone string) *problem.Problem {
	if language != "" {
		if err := validate.Language(language); err != nil {
			return &problem.Problem{Status: http.StatusUnprocessableEntity, Detail: err.Error(), Param: "language"}
		}
	}
	if zone != "" {
		if _, err := validate.TimeZone(zone); err != nil {
			return &problem.Problem{Status: http.StatusUnprocessableEntity, Detail: "time_zone: " + err.Error(), Param: "time_zone"}
		}
	}
	return nil
}

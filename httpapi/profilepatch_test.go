package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// PATCH merges into the profile: a consent change alone keeps the
// addresses and the time zone (a PUT of the consent alone replaces them
// all), a key set to null is removed, a field set to null cleared, and the
// consent history records what changed.
func TestProfilePatchMergesAndKeepsTheRest(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	authA := "Bearer " + keyA
	const path = "/v1/recipients/p-200/profile"
	do := func(method, body string, want int) response {
		t.Helper()
		r := b.do(t, method, path, authA, body)
		if r.status != want {
			t.Fatalf("%s %s: %d %s, want %d", method, body, r.status, r.body, want)
		}
		return r
	}
	type profile struct {
		Addresses map[string]string `json:"addresses"`
		Consent   map[string]bool   `json:"consent"`
		Language  string            `json:"language"`
		TimeZone  string            `json:"time_zone"`
	}
	get := func() profile {
		t.Helper()
		var p profile
		if r := do(http.MethodGet, "", http.StatusOK); json.Unmarshal(r.body, &p) != nil {
			t.Fatalf("profile %s", r.body)
		}
		return p
	}
	// No profile yet: a patch creates one.
	do(http.MethodPatch, `{"addresses":{"sms":"01012345678","alimtalk":"01012345678"},"consent":{"sms":true,"alimtalk":true},"time_zone":"Asia/Seoul","language":"ko"}`, http.StatusNoContent)
	// The patient opts out of marketing on both channels.
	do(http.MethodPatch, `{"consent":{"sms":false,"alimtalk":false}}`, http.StatusNoContent)
	p := get()
	if p.Addresses["sms"] != "01012345678" || p.Addresses["alimtalk"] != "01012345678" || p.TimeZone != "Asia/Seoul" || p.Language != "ko" ||
		p.Consent["sms"] || p.Consent["alimtalk"] || len(p.Consent) != 2 {
		t.Fatalf("after the opt-out: %+v; want the addresses, time zone and language kept, consent false", p)
	}
	// The front desk changes the phone and drops AlimTalk; the language
	// is cleared; consent is left alone.
	do(http.MethodPatch, `{"addresses":{"sms":"01099998888","alimtalk":null},"language":null}`, http.StatusNoContent)
	p = get()
	if p.Addresses["sms"] != "01099998888" || len(p.Addresses) != 1 || p.Language != "" || p.TimeZone != "Asia/Seoul" || len(p.Consent) != 2 {
		t.Fatalf("after the address patch: %+v", p)
	}
	// The history has the opt-outs, and no change the address patch did
	// not make.
	r := b.do(t, http.MethodGet, "/v1/recipients/p-200/consent-history", authA, "")
	if r.status != http.StatusOK || strings.Count(string(r.body), `"new":false`) != 2 || strings.Count(string(r.body), `"new":true`) != 2 {
		t.Fatalf("consent history: %d %s; want the two grants and the two opt-outs", r.status, r.body)
	}
	// Bad patches change nothing.
	for body, want := range map[string]int{
		`{"consent":{"fax":false}}`:              http.StatusUnprocessableEntity,
		`{"addresses":{"email":"not-an-email"}}`: http.StatusUnprocessableEntity,
		`{"consent":{"sms":"no"}}`:               http.StatusBadRequest,
		`{"language":5}`:                         http.StatusBadRequest,
		`{"time_zone":"Mars/Olympus"}`:           http.StatusUnprocessableEntity,
		`{"time_zone":"Local"}`:                  http.StatusUnprocessableEntity,
		`{"phone":"0101"}`:                       http.StatusBadRequest,
		`[]`:                                     http.StatusBadRequest,
	} {
		wantProblem(t, b.do(t, http.MethodPatch, path, authA, body), want)
	}
	if q := get(); q.Addresses["sms"] != "01099998888" || len(q.Addresses) != 1 || len(q.Consent) != 2 {
		t.Fatalf("after the refused patches: %+v", q)
	}
	// A value of the wrong kind is named as PUT names it, not as a map
	// that is not an object.
	if r := b.do(t, http.MethodPatch, path, authA, `{"consent":{"sms":1}}`); r.status != http.StatusBadRequest ||
		!strings.Contains(string(r.body), "consent.sms: got a number where true or false belongs") {
		t.Fatalf("consent sms 1: %d %s", r.status, r.body)
	}
	// addresses: null clears them all.
	do(http.MethodPatch, `{"addresses":null}`, http.StatusNoContent)
	if q := get(); len(q.Addresses) != 0 || len(q.Consent) != 2 {
		t.Fatalf("after addresses null: %+v", q)
	}
}

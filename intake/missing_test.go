package intake_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// A 422 for missing params names every one at once (missing_params), so a
// caller fixes its request in one try.
func TestMissingParamsAreAllNamedAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, params string
		want         []string
	}{
		{"NoParams", `{}`, []string{"amount", "merchant"}},
		{"NullParams", `null`, []string{"amount", "merchant"}},
		{"OneGiven", `{"merchant": "Cafe Mori"}`, []string{"amount"}},
		{"NullCountsAsMissing", `{"amount": null, "merchant": null}`, []string{"amount", "merchant"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			r := b.post(t, keyA, "k-1", `{"recipient":"user-1","event_id":"evt-1","kind":"payment.approved","params":`+tc.params+`}`)
			p := wantProblem(t, r, http.StatusUnprocessableEntity)
			var body struct {
				MissingParams []string `json:"missing_params"`
			}
			if err := json.Unmarshal(r.body, &body); err != nil {
				t.Fatalf("problem %s: %v", r.body, err)
			}
			if !slices.Equal(body.MissingParams, tc.want) {
				t.Errorf("missing_params = %q, want %q; body %s", body.MissingParams, tc.want, r.body)
			}
			if p.Param != "params."+tc.want[0] {
				t.Errorf("param = %q, want params.%s", p.Param, tc.want[0])
			}
			for _, name := range tc.want {
				if !strings.Contains(p.Detail, `"`+name+`"`) {
					t.Errorf("detail %q does not name %q", p.Detail, name)
				}
			}
			b.wantNothingWritten(t)
		})
	}
	t.Run("OtherProblemsHaveNoList", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := b.post(t, keyA, "k-1", `{"recipient":"user-1","event_id":"evt-1","kind":"payment.refunded","params":{}}`)
		p := wantProblem(t, r, http.StatusUnprocessableEntity)
		if strings.Contains(string(r.body), "missing_params") {
			t.Errorf("an unknown kind's 422 lists missing params: %s", r.body)
		}
		if p.Param != "kind" || p.Detail != `unknown kind "payment.refunded" (GET /v1/kinds lists the kinds this server knows)` {
			t.Errorf("an unknown kind's 422: param %q, detail %q; want it to point at GET /v1/kinds", p.Param, p.Detail)
		}
	})
}

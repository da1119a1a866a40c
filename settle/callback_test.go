package settle_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testdb"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/settle"
)

// jsonReceiver takes reports as JSON {"message_id", "status"}, unsigned.
type jsonReceiver struct{}

func (jsonReceiver) ParseCallback(_ *http.Request, body []byte) ([]provider.Report, error) {
	var b struct {
		MessageID string `json:"message_id"`
		Status    string `json:"status"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return nil, provider.ErrBadCallback
	}
	res := map[string]provider.ReportResult{"delivered": provider.ReportDelivered, "failed": provider.ReportFailed}[b.Status]
	return []provider.Report{{MessageID: b.MessageID, Result: res, Reason: "TEST_" + strings.ToUpper(b.Status)}}, nil
}

// accountReceiver is a jsonReceiver whose vendor pushes every report of
// account to one URL (provider.AccountReceiver).
type accountReceiver struct {
	jsonReceiver
	account string
}

func (r accountReceiver) CallbackAccount() string { return r.account }

// A vendor that pushes an account's every report to one URL: a report
// taken at any of the account's entries settles a message whichever
// entry sent it, once, not while it is SENDING; a message of another
// account, or of a provider that does not share its account, is taken
// (204) and left as it was.
func TestCallbacksReachTheAccountsOtherEntries(t *testing.T) {
	t.Parallel()
	for _, driver := range testdb.Drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			st := testdb.Open(t, driver, nil).Store
			h := &settle.CallbackHandler{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				Receivers: map[string]provider.CallbackReceiver{
					"biz-at":  accountReceiver{account: "bizppurio acc-1"},
					"biz-sms": accountReceiver{account: "bizppurio acc-1"},
					"biz-two": accountReceiver{account: "bizppurio acc-2"},
					"alone":   accountReceiver{},
					"alone-2": accountReceiver{},
					"plain":   jsonReceiver{},
				}}
			post := func(name, mid, status string) int {
				t.Helper()
				rec := httptest.NewRecorder()
				req := httptest.NewRequest(http.MethodPost, "/v1/callbacks/"+name,
					strings.NewReader(`{"message_id":"`+mid+`","status":"`+status+`"}`))
				req.SetPathValue("provider", name)
				h.ServeHTTP(rec, req)
				return rec.Code
			}
			want := func(mid string, state heraldtype.DeliveryState, reason string) {
				t.Helper()
				if s, r := stateOf(t, st, mid); s != state || r != reason {
					t.Fatalf("%s: %s(%s), want %s(%s)", mid, s, r, state, reason)
				}
			}

			sms := sent(t, st, "biz-sms", heraldtype.DeliveryUnknown)
			// Other accounts, and receivers that share no account, leave it.
			for _, name := range []string{"biz-two", "alone", "plain"} {
				if code := post(name, sms, "delivered"); code != http.StatusNoContent {
					t.Fatalf("%s's report on biz-sms's message: %d, want 204", name, code)
				}
				want(sms, heraldtype.DeliveryUnknown, "")
			}
			// The account's other entry settles it, once.
			if code := post("biz-at", sms, "delivered"); code != http.StatusNoContent {
				t.Fatalf("biz-at's report on biz-sms's message: %d, want 204", code)
			}
			want(sms, heraldtype.DeliveryDelivered, "TEST_DELIVERED")
			for _, name := range []string{"biz-at", "biz-sms"} {
				if code := post(name, sms, "failed"); code != http.StatusNoContent {
					t.Fatalf("a late failure at %s: %d, want 204", name, code)
				}
			}
			want(sms, heraldtype.DeliveryDelivered, "TEST_DELIVERED")

			// Either way round, and an accepted send too.
			at := sent(t, st, "biz-at", heraldtype.DeliveryProviderAccepted)
			if code := post("biz-sms", at, "failed"); code != http.StatusNoContent {
				t.Fatalf("biz-sms's report on biz-at's message: %d, want 204", code)
			}
			want(at, heraldtype.DeliveryPermanentFailure, "TEST_FAILED")

			// A send of the account still in flight: brought again later.
			inFlight := sent(t, st, "biz-sms", heraldtype.DeliverySending)
			if code := post("biz-at", inFlight, "delivered"); code != http.StatusServiceUnavailable {
				t.Fatalf("biz-at's report on biz-sms's SENDING: %d, want 503", code)
			}
			want(inFlight, heraldtype.DeliverySending, "")

			// The other account's own entry still settles its own.
			two := sent(t, st, "biz-two", heraldtype.DeliveryUnknown)
			if code := post("biz-at", two, "delivered"); code != http.StatusNoContent {
				t.Fatalf("biz-at's report on biz-two's message: %d, want 204", code)
			}
			want(two, heraldtype.DeliveryUnknown, "")
			if code := post("biz-two", two, "delivered"); code != http.StatusNoContent {
				t.Fatalf("biz-two's own report: %d, want 204", code)
			}
			want(two, heraldtype.DeliveryDelivered, "TEST_DELIVERED")

			// Entries that name no account share none.
			alone := sent(t, st, "alone-2", heraldtype.DeliveryUnknown)
			if code := post("alone", alone, "delivered"); code != http.StatusNoContent {
				t.Fatalf("alone's report on alone-2's message: %d, want 204", code)
			}
			want(alone, heraldtype.DeliveryUnknown, "")
		})
	}
}

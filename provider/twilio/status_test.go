package twilio_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/twilio"
)

// fetched answers a look-up with the Message resource in a given status.
func fetched(status, errorCode string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"sid": %q, "account_sid": %q, "status": %q, "error_code": %s, "error_message": null,
			"date_created": "Tue, 27 Nov 2018 16:14:39 +0000", "date_updated": "Tue, 27 Nov 2018 16:15:02 +0000",
			"date_sent": "Tue, 27 Nov 2018 16:14:40 +0000", "direction": "outbound-api"}`,
			messageSid, accountSID, status, errorCode)
	}
}

func TestStatusLookUp(t *testing.T) {
	t.Parallel()
	updated := time.Date(2018, 11, 27, 16, 15, 2, 0, time.UTC)
	rows := []struct {
		name   string
		answer http.HandlerFunc
		want   provider.Report
	}{
		{"DeliveredIsDelivered", fetched("delivered", "null"),
			provider.Report{Result: provider.ReportDelivered, Reason: "TWILIO_DELIVERED", At: updated}},
		{"UndeliveredWithCodeIsFailed", fetched("undelivered", "30003"),
			provider.Report{Result: provider.ReportFailed, Reason: "TWILIO_30003", At: updated}},
		{"UndeliveredUnknownDestinationIsDead", fetched("undelivered", "30005"),
			provider.Report{Result: provider.ReportFailed, Reason: "TWILIO_30005", DeadDestination: true, At: updated}},
		{"FailedLandlineIsDead", fetched("failed", `"30006"`),
			provider.Report{Result: provider.ReportFailed, Reason: "TWILIO_30006", DeadDestination: true, At: updated}},
		{"SentIsPending", fetched("sent", "null"),
			provider.Report{Result: provider.ReportPending, Reason: "TWILIO_SENT", At: updated}},
		{"QueuedIsPending", fetched("queued", "null"),
			provider.Report{Result: provider.ReportPending, Reason: "TWILIO_QUEUED", At: updated}},
		{"Status404IsNotFound", refused(404, 20404),
			provider.Report{Result: provider.ReportNotFound, Reason: "TWILIO_20404"}},
		{"Status404WithoutBodyIsNotFound", refused(404, 0),
			provider.Report{Result: provider.ReportNotFound, Reason: "HTTP_404"}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, row.answer)
			rep, err := newTwilio(t, config(f.URL)).Status(context.Background(), provider.StatusQuery{MessageID: "msg-1", ProviderRef: messageSid})
			if err != nil {
				t.Fatalf("Status: %v", err)
			}
			want := row.want
			want.MessageID, want.ProviderRef = "msg-1", messageSid
			if !rep.At.Equal(want.At) {
				t.Errorf("At = %v, want %v", rep.At, want.At)
			}
			rep.At, want.At = time.Time{}, time.Time{}
			if rep != want {
				t.Fatalf("report = %+v, want %+v", rep, want)
			}
			h := f.only(t)
			if h.method != http.MethodGet || h.path != "/2010-04-01/Accounts/"+accountSID+"/Messages/"+messageSid+".json" {
				t.Errorf("request = %s %s, want GET of the message's resource", h.method, h.path)
			}
			if h.user != accountSID || h.pass != authToken {
				t.Errorf("basic auth user = %q, want the account", h.user)
			}
		})
	}
}

func TestStatusLookUpFailuresAreErrors(t *testing.T) {
	t.Parallel()
	for name, answer := range map[string]http.HandlerFunc{
		"Status401":       refused(401, 20003),
		"Status429":       refused(429, 20429, "Retry-After", "3"),
		"Status500":       refused(500, 20500),
		"Status400":       refused(400, 0),
		"UnreadableJSON":  func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "<Response/>") },
		"InboundStatus":   fetched("received", "null"),
		"StatusNotString": func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"sid": "SM1", "status": 5}`) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, answer)
			rep, err := newTwilio(t, config(f.URL)).Status(context.Background(), provider.StatusQuery{MessageID: "msg-1", ProviderRef: messageSid})
			if err == nil {
				t.Fatalf("Status = %+v, want an error, never a guess", rep)
			}
		})
	}
	t.Run("NoSidAsksNothing", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, fetched("delivered", "null"))
		_, err := newTwilio(t, config(f.URL)).Status(context.Background(), provider.StatusQuery{MessageID: "msg-1"})
		if !errors.Is(err, twilio.ErrNoSid) {
			t.Fatalf("error = %v, want ErrNoSid", err)
		}
		if n := f.count(); n != 0 {
			t.Fatalf("fake saw %d requests, want none", n)
		}
	})
}

package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/store"
)

// A cancel that comes while a send's provider call is in flight reports it
// SENDING; when the call then fails for now, the retry is not made, on
// either store and either transport: the retry's copy ends the send
// SUPPRESSED(CANCELLED) without a second call, and that end is counted.
func TestACancelDuringTheCallStopsItsRetry(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"sqlite", "postgres", "sqlite+rabbitmq", "postgres+rabbitmq"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			a, base := newHerald(t, transportConfig(t, driver, nil), app.Options{})
			sms := a.Sim("sim-sms")
			runHerald(t, a)
			if code, body := call(t, base, http.MethodPut, "/v1/recipients/r1/profile", config.DevAPIKey,
				`{"addresses":{"sms":"+821000000001"},"consent":{"sms":true}}`); code != http.StatusNoContent {
				t.Fatalf("profile: %d %s", code, body)
			}
			answered := make(chan string, 1)
			sms.OnCall(func(ctx context.Context, m provider.Message) provider.Outcome {
				// The cancel comes while the call is at the provider.
				nid, _, _ := strings.Cut(m.MessageID, ".")
				// A second call (it must not come) cancels again, which
				// changes nothing, and is counted below.
				select {
				case answered <- cancelOver(base, nid):
				default:
				}
				return provider.NotSentOutcome("HTTP_429", 100*time.Millisecond)
			})
			code, body := call(t, base, http.MethodPost, "/v1/notifications", config.DevAPIKey,
				`{"recipient":"r1","event_id":"appt-1","kind":"appointment.reminder","params":{"date":"12/07","time":"09:00"}}`)
			if code != http.StatusAccepted {
				t.Fatalf("POST = %d %s", code, body)
			}
			var created struct{ ID string }
			if err := json.Unmarshal(body, &created); err != nil {
				t.Fatal(err)
			}
			select {
			case got := <-answered:
				if want := "SENDING false"; got != want {
					t.Fatalf("the cancel during the call answered %q; want %q", got, want)
				}
			case <-time.After(testenv.Patience):
				t.Fatal("no provider call")
			}
			msg := store.MessageID(created.ID, "sms")
			testenv.WaitFor(t, "the retry's copy to end the send", testenv.Patience, func() bool {
				d, err := a.Store().DeliveryGet(context.Background(), msg)
				return err == nil && d.State == "SUPPRESSED" && d.Reason == "CANCELLED"
			})
			if n := sms.CallCount(msg); n != 1 {
				t.Errorf("%d provider calls; want the one in flight at the cancel", n)
			}
			// Counted by the sender once the claim has returned, a moment
			// after the row reads SUPPRESSED.
			line := `herald_deliveries_total{channel="sms",lane="transactional",state="SUPPRESSED"} 1`
			testenv.WaitFor(t, "/metrics to count the end", testenv.Patience, func() bool {
				_, metrics := get(t, base, "/metrics", "")
				return strings.Contains(string(metrics), line+"\n")
			})
		})
	}
}

// cancelOver cancels notification id over HTTP and returns its one send's
// state and whether it was cancelled, or what went wrong.
func cancelOver(base, id string) string {
	req, err := http.NewRequest(http.MethodPost, base+"/v1/notifications/"+id+"/cancel", nil)
	if err != nil {
		return err.Error()
	}
	req.Header.Set("Authorization", "Bearer "+config.DevAPIKey)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var res struct {
		Deliveries []struct {
			State     string
			Cancelled bool
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil || len(res.Deliveries) != 1 {
		return fmt.Sprintf("status %d: %+v %v", resp.StatusCode, res, err)
	}
	return fmt.Sprintf("%s %v", res.Deliveries[0].State, res.Deliveries[0].Cancelled)
}

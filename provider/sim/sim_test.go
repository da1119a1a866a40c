package sim_test

import (
	"context"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/sim"
)

// A dead address is answered dead on every call, whatever the fault mix;
// every other address gets the mix (here: all accepted).
func TestDeadAddresses(t *testing.T) {
	t.Parallel()
	s := sim.New(sim.Config{DeadAddresses: []string{"tok-dead"}})
	for i := range 3 {
		out := s.Send(context.Background(), provider.Message{MessageID: "m-dead", Address: "tok-dead"})
		if out.Class != provider.Permanent || out.Reason != heraldtype.ReasonUnregistered || !out.DeadDestination {
			t.Fatalf("call %d to a dead address: %+v, want permanent UNREGISTERED, dead destination", i+1, out)
		}
	}
	for _, addr := range []string{"tok-live", ""} {
		if out := s.Send(context.Background(), provider.Message{MessageID: "m-" + addr, Address: addr}); out.Class != provider.Accepted || out.DeadDestination {
			t.Fatalf("call to %q: %+v, want accepted", addr, out)
		}
	}
	if s.Total() != 5 || s.CallCount("m-dead") != 3 {
		t.Fatalf("recorded %d calls, %d to the dead address; want 5 and 3", s.Total(), s.CallCount("m-dead"))
	}
}

// A call that reached the simulator (accepted, or UNKNOWN: it went out and
// only its answer was lost) is reported after ReportAfter and answered by a
// look-up; a call it refused is neither, and a look-up about it finds
// nothing.
func TestReportsAndLookups(t *testing.T) {
	t.Parallel()
	s := sim.New(sim.Config{ReportAfter: time.Millisecond, StatusLookup: true})
	got := make(chan provider.Report, 4)
	s.SetReporter(func(r provider.Report) { got <- r })
	s.OnCall(func(_ context.Context, m provider.Message) provider.Outcome {
		switch m.MessageID {
		case "m-unknown":
			return provider.UnknownOutcome("SIM_UNKNOWN")
		case "m-refused":
			return provider.NotSentOutcome("SIM_NOT_SENT", 0)
		}
		return provider.Outcome{}
	})
	for _, id := range []string{"m-ok", "m-unknown", "m-refused"} {
		s.Send(context.Background(), provider.Message{MessageID: id})
	}
	seen := map[string]provider.Report{}
	for range 2 {
		select {
		case r := <-got:
			seen[r.MessageID] = r
		case <-time.After(5 * time.Second):
			t.Fatalf("reports %v, want two", seen)
		}
	}
	for _, id := range []string{"m-ok", "m-unknown"} {
		if r := seen[id]; r.Result != provider.ReportDelivered || r.Reason != "SIM_DELIVERED" {
			t.Fatalf("report for %s: %+v, want delivered", id, r)
		}
		if r, err := s.Status(context.Background(), provider.StatusQuery{MessageID: id}); err != nil || r.Result != provider.ReportDelivered {
			t.Fatalf("look-up of %s: %+v %v, want delivered", id, r, err)
		}
	}
	select {
	case r := <-got:
		t.Fatalf("a report for a refused call: %+v", r)
	case <-time.After(20 * time.Millisecond):
	}
	if r, err := s.Status(context.Background(), provider.StatusQuery{MessageID: "m-refused"}); err != nil || r.Result != provider.ReportNotFound {
		t.Fatalf("look-up of a refused call: %+v %v, want not found", r, err)
	}
	if _, err := sim.New(sim.Config{}).Status(context.Background(), provider.StatusQuery{MessageID: "m-ok"}); err == nil {
		t.Fatal("a look-up with StatusLookup off answered")
	}
}

package sim_test

import (
	"context"
	"testing"

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

package twilio_test

import (
	"context"
	"testing"

	"github.com/heraldhq/herald/provider"
)

// BenchmarkSend is one create against the local fake, calls in parallel
// (the fake answers at once: this is the adapter's own cost plus loopback
// HTTP).
func BenchmarkSend(b *testing.B) {
	tw := newTwilio(b, config(newFake(b, created(201)).URL))
	m := message("msg-bench")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if out := tw.Send(context.Background(), m); out.Class != provider.Accepted {
				b.Errorf("outcome = %+v", out)
				return
			}
		}
	})
}

// BenchmarkParseCallback is the signature check and parse of one report
// (ParseCallback reads the body it is given, not the request's).
func BenchmarkParseCallback(b *testing.B) {
	tw := newTwilio(b, config(""))
	r, body := signedCallback("msg-bench", statusParams("delivered", ""))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tw.ParseCallback(r, body); err != nil {
			b.Fatal(err)
		}
	}
}

package fcm_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/provider"
)

// BenchmarkSend measures sends/s with FCM answering 100 ms after each
// request (seed 003's latency) and many sends in flight, over the fake's
// TLS and HTTP/2:
//
//	go test ./provider/fcm/ -run '^$' -bench BenchmarkSend -benchtime 20000x
//
// The fake runs in this process, so B/op and allocs/op count its side of
// each call (TLS, HTTP/2 server, JSON decoding) as well as the adapter's.
func BenchmarkSend(b *testing.B) {
	for _, inFlight := range []int{256, 512} {
		b.Run(fmt.Sprintf("Latency100ms/InFlight%d", inFlight), func(b *testing.B) {
			p, fk := setup(b)
			fk.setSendAnswer(func(w http.ResponseWriter, r *http.Request) {
				t := time.NewTimer(100 * time.Millisecond)
				defer t.Stop()
				select {
				case <-t.C:
					fmt.Fprint(w, `{"name": "projects/proj-1/messages/0:1"}`)
				case <-r.Context().Done():
				}
			})
			if out := p.Send(context.Background(), message("warm-up")); out.Class != provider.Accepted {
				b.Fatalf("warm-up: %+v", out)
			}
			var failed atomic.Int64
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for range inFlight {
				wg.Go(func() {
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						if out := p.Send(context.Background(), message(strconv.FormatInt(i, 10))); out.Class != provider.Accepted {
							failed.Add(1)
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "sends/s")
			b.ReportMetric(float64(failed.Load())/float64(b.N), "failed/op")
			if tokens, _ := fk.counts(); tokens != 1 {
				b.Errorf("token requests %d, want 1", tokens)
			}
		})
	}
}

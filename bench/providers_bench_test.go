package bench

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/apns"
	"github.com/heraldhq/herald/provider/webhook"
)

// providerLatency is seed 003's provider answer time.
const providerLatency = 100 * time.Millisecond

// sendsConcurrency is the transactional lane's sender concurrency in the
// provider benchmarks: at 100 ms a call, 2,000 sends/s need at least 200
// calls in flight.
const sendsConcurrency = 512

// BenchmarkSendsWebhook100ms: b.N notifications through one herald process
// whose webhook provider is the real adapter, calling a receiver that
// answers after 100 ms. The receiver holds every call until all b.N are
// accepted, so intake's pace is not measured: sends/s is calls answered
// per second from the release to the last, and the peak Go heap and the
// heap per call in flight are reported beside it.
func BenchmarkSendsWebhook100ms(b *testing.B) {
	f := newFakeReceiver()
	srv := httptest.NewServer(f)
	b.Cleanup(srv.Close)
	driveSends(b, "sim-webhook", webhook.New(webhook.Config{URL: srv.URL}), f, nil)
}

// BenchmarkSendsAPNs100ms is BenchmarkSendsWebhook100ms over the real APNs
// adapter (HTTP/2, token auth) to a fake APNs answering after 100 ms: the
// bench kind goes to push, and each of its 1,000 recipients has one device.
func BenchmarkSendsAPNs100ms(b *testing.B) {
	f := newFakeReceiver()
	srv := httptest.NewUnstartedServer(f)
	srv.EnableHTTP2 = true
	srv.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: 250} // as APNs grants an authenticated connection
	srv.StartTLS()
	b.Cleanup(srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		b.Fatal(err)
	}
	p, err := apns.New(apns.Config{KeyP8: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		KeyID: "ABC123DEFG", TeamID: "TEAM456XYZ", Topic: "com.example.herald", Endpoint: srv.URL, RootCAs: roots})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close() })
	driveSends(b, "sim-push", p, f, func(c *config.Config) {
		k := &c.Kinds[0]
		k.Channels = []string{"push"}
		k.Templates = map[string]config.Template{"push": {Title: "Paid", Body: "Paid {{.amount}} won"}}
	})
}

// registerDevices gives each of the bench's 1,000 recipients one push
// device (a 64-hex-digit token, as APNs issues).
func registerDevices(b *testing.B, e *env) {
	for i := range 1000 {
		req, _ := http.NewRequest(http.MethodPut, fmt.Sprintf("%s/v1/recipients/user-%d/devices/%064x", e.bases[0], i, i+1),
			strings.NewReader(`{"platform":"apns"}`))
		req.Header.Set("Authorization", "Bearer "+config.DevAPIKey)
		resp, err := httpClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			b.Fatalf("register a device: %d", resp.StatusCode)
		}
	}
}

// fakeReceiver answers 202 after providerLatency, once released, and counts.
type fakeReceiver struct {
	gate  chan struct{}
	calls atomic.Int64
}

func newFakeReceiver() *fakeReceiver { return &fakeReceiver{gate: make(chan struct{})} }

func (f *fakeReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	<-f.gate
	time.Sleep(providerLatency)
	f.calls.Add(1)
	w.WriteHeader(http.StatusAccepted)
}

// driveSends runs one herald with p as its webhook provider and the
// transactional lane at sendsConcurrency, posts b.N notifications, and
// reports the provider's calls per second (calls counts them) and memory.
func driveSends(b *testing.B, name string, p provider.Provider, f *fakeReceiver, adjust func(*config.Config)) {
	calls := &f.calls
	e := startWithProvider(b, name, p, func(c *config.Config) {
		c.Lanes = map[string]config.Lane{"transactional": {Concurrency: sendsConcurrency}}
		if adjust != nil {
			adjust(c)
		}
	})
	if name == "sim-push" {
		registerDevices(b, e)
	}
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
		}
	}()
	var base runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&base)
	drivePosts(b, e)
	b.ResetTimer()
	began := time.Now()
	close(f.gate)
	for calls.Load() < int64(b.N) {
		if time.Since(began) > 10*time.Minute {
			b.Fatalf("%d of %d calls", calls.Load(), b.N)
		}
		time.Sleep(time.Millisecond)
	}
	took := time.Since(began)
	b.StopTimer()
	close(stop)
	<-sampled
	b.ReportMetric(float64(b.N)/took.Seconds(), "sends/s")
	b.ReportMetric(float64(peak.Load())/(1<<20), "peak-heap-MB")
	if peak.Load() > base.HeapInuse {
		b.ReportMetric(float64(peak.Load()-base.HeapInuse)/sendsConcurrency/1024, "heap-KB/in-flight")
	}
}

package apns_test

// The benchmark puts the fake in a child process (this test binary, started
// again with APNS_FAKE_CHILD=1), so the adapter's allocations and memory are
// measured alone and the two do not share one process's scheduler and GC:
//
//	go test ./provider/apns -run '^$' -bench Send -benchtime 40000x
//
// APNS_BENCH_INFLIGHT (default 2000) is how many Send calls run at once,
// APNS_BENCH_STREAMS (default 250) the fake's streams per connection; the
// fake answers every call after 100 ms (seed 003's provider latency).

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/apns"
)

// providerLatency is seed 003's provider answer time.
const providerLatency = 100 * time.Millisecond

func TestMain(m *testing.M) {
	if os.Getenv("APNS_FAKE_CHILD") == "1" {
		serveFakeChild()
		return
	}
	os.Exit(m.Run())
}

// childHello is the child's first line on stdout.
type childHello struct {
	URL  string `json:"url"`
	Cert []byte `json:"cert"` // DER
}

// serveFakeChild runs the fake until stdin closes (the parent ended).
func serveFakeChild() {
	block, _ := pem.Decode([]byte(os.Getenv("APNS_FAKE_PUBKEY")))
	if block == nil {
		fmt.Fprintln(os.Stderr, "apns fake: no public key")
		os.Exit(2)
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apns fake:", err)
		os.Exit(2)
	}
	streams, _ := strconv.Atoi(os.Getenv("APNS_FAKE_STREAMS"))
	ecPub, ok := pub.(*ecdsa.PublicKey)
	if !ok {
		fmt.Fprintln(os.Stderr, "apns fake: not an EC public key")
		os.Exit(2)
	}
	f := startFake(ecPub, clock.Real{}, streams, false)
	f.delay = providerLatency
	_ = json.NewEncoder(os.Stdout).Encode(childHello{URL: f.srv.URL, Cert: f.srv.Certificate().Raw})
	_, _ = bufio.NewReader(os.Stdin).ReadString(0) // EOF when the parent ends
	f.srv.Close()
}

// startChild starts the fake in a child process and returns its URL and
// the roots that trust it.
func startChild(b *testing.B, pubPEM []byte, streams int) (string, *x509.CertPool) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "APNS_FAKE_CHILD=1",
		"APNS_FAKE_PUBKEY="+string(pubPEM), "APNS_FAKE_STREAMS="+strconv.Itoa(streams))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	var hello childHello
	if err := json.NewDecoder(stdout).Decode(&hello); err != nil {
		b.Fatalf("read the child's address: %v", err)
	}
	cert, err := x509.ParseCertificate(hello.Cert)
	if err != nil {
		b.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	return hello.URL, roots
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// BenchmarkSend100ms: b.N Send calls, APNS_BENCH_INFLIGHT of them at once,
// against the fake in a child process answering after 100 ms. Reported:
// sends/s, the connections used, how long the first (unmeasured) round of
// APNS_BENCH_INFLIGHT calls took from cold, the Go heap in use at its peak above the
// idle heap (in all, and per call in flight), the process's peak RSS, and
// the allocations and this process's CPU time per Send (B/op, allocs/op,
// cpu-µs/send).
func BenchmarkSend100ms(b *testing.B) {
	inflight := envInt("APNS_BENCH_INFLIGHT", 2000)
	streams := envInt("APNS_BENCH_STREAMS", 250)
	key, p8 := newKey(b)
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		b.Fatal(err)
	}
	url, roots := startChild(b, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), streams)
	a, err := apns.New(apns.Config{KeyP8: p8, KeyID: keyID, TeamID: teamID, Topic: topic,
		Endpoint: url, RootCAs: roots, Timeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close() })

	// Messages are made before the clock starts; ids as herald makes them.
	msgs := make([]provider.Message, b.N)
	for i := range msgs {
		msgs[i] = message(fmt.Sprintf("ntf_01JBENCH%017d-push", i))
	}
	// One round unmeasured, from cold: connections dialled, the token
	// signed. Its time is reported as the ramp.
	warm := time.Now()
	drive(b, a, msgs[:min(inflight, len(msgs))], inflight)
	ramp := time.Since(warm)

	runtime.GC()
	base := heapInUse()
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if h := heapInUse(); h > peak.Load() {
				peak.Store(h)
			}
		}
	}()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	start := time.Now()
	drive(b, a, msgs, inflight)
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	b.StopTimer()
	close(stop)
	<-sampled

	conns, _ := apns.PoolState(a)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "sends/s")
	// CPU of this process (the adapter; the fake is the child) per send:
	// what a shared machine's load does not change.
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/send")
	b.ReportMetric(float64(conns), "conns")
	b.ReportMetric(float64(ramp.Milliseconds()), "cold-round-ms")
	above := float64(0)
	if p := peak.Load(); p > base {
		above = float64(p - base)
	}
	b.ReportMetric(above/(1<<20), "peak-heap-MiB")
	b.ReportMetric(above/float64(inflight), "heap-B/inflight")
	b.ReportMetric(float64(peakRSS())/(1<<20), "peak-RSS-MiB")
}

// drive sends msgs from inflight goroutines and fails b on any outcome
// other than Accepted.
func drive(b *testing.B, a *apns.APNs, msgs []provider.Message, inflight int) {
	var next atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	for range min(inflight, len(msgs)) {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(len(msgs)) {
					return
				}
				if out := a.Send(context.Background(), msgs[i]); out.Class != provider.Accepted {
					if failed.Add(1) == 1 {
						b.Errorf("send %d: %+v", i, out)
					}
				}
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d sends not accepted", n, len(msgs))
	}
}

var heapSample = []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}

// heapInUse is the bytes of live and not yet swept heap objects.
func heapInUse() uint64 {
	metrics.Read(heapSample)
	return heapSample[0].Value.Uint64()
}

// cpuTime is the user and system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peakRSS is the process's high-water resident set (Linux VmHWM), 0
// where it cannot be read.
func peakRSS() uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

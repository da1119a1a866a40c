package webhook_test

// BenchmarkSend measures the adapter's throughput and memory against a
// receiver that answers 100 ms after each request (seed 003's latency),
// with thousands of calls in flight at once:
//
//	go test ./provider/webhook/ -run '^$' -bench BenchmarkSend -benchtime 20000x
//
// The receiver is a child process (this test binary, started with
// benchServerEnv set), so the allocations and heap counted are the
// adapter's alone, not the fake's. Metrics: sends/s over the timed part;
// B/op and allocs/op (the adapter's, per call); heap-B/inflight and
// stack-B/inflight, the peak rise of HeapInuse and StackInuse during the
// run over the number of calls in flight; conns/op, the connections the
// receiver saw opened per call (0 when every call reuses one); cpu-µs/op,
// the adapter's CPU time per call; failed/op, calls that were not accepted.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/webhook"
)

// benchServerEnv, set to a latency ("100ms"), makes the test binary the
// benchmark's receiver instead of running tests.
const benchServerEnv = "HERALD_WEBHOOK_BENCH_RECEIVER"

func TestMain(m *testing.M) {
	if latency := os.Getenv(benchServerEnv); latency != "" {
		os.Exit(benchReceiver(latency))
	}
	os.Exit(m.Run())
}

// benchReceiver answers every POST 202 after latency, GET /conns with the
// number of connections opened so far, prints its address on stdout and
// exits when stdin closes.
func benchReceiver(latency string) int {
	delay, err := time.ParseDuration(latency)
	if err != nil {
		fmt.Fprintln(os.Stderr, "receiver:", err)
		return 2
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "receiver:", err)
		return 1
	}
	var conns atomic.Int64
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && r.URL.Path == "/conns" {
				fmt.Fprint(w, conns.Load())
				return
			}
			_, _ = io.Copy(io.Discard, r.Body)
			t := time.NewTimer(delay) // the provider's latency
			defer t.Stop()
			select {
			case <-t.C:
				w.WriteHeader(http.StatusAccepted)
			case <-r.Context().Done():
			}
		}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		},
	}
	go func() { _ = srv.Serve(ln) }()
	fmt.Println(ln.Addr().String())
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// startBenchReceiver runs the receiver in a child process for the rest of b.
func startBenchReceiver(b *testing.B, latency time.Duration) string {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), benchServerEnv+"="+latency.String())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			b.Errorf("receiver: %v", err)
		}
	})
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("receiver's address: %v", err)
	}
	return "http://" + strings.TrimSpace(addr)
}

// receiverConns asks the receiver how many connections it has seen opened,
// this question's own included (it opens one of its own each time).
func receiverConns(b *testing.B, base string) int64 {
	b.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(base + "/conns")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// cpuTime is the CPU time (user and system) this process has used: the
// adapter's, the receiver being another process. Unlike sends/s it does not
// depend on what else the machine runs.
func cpuTime(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// memPeak samples HeapInuse and StackInuse every 20 ms until stop, and
// returns their peaks.
func memPeak(stop <-chan struct{}) (heap, stack uint64) {
	var ms runtime.MemStats
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		runtime.ReadMemStats(&ms)
		heap, stack = max(heap, ms.HeapInuse), max(stack, ms.StackInuse)
		select {
		case <-stop:
			return heap, stack
		case <-tick.C:
		}
	}
}

func BenchmarkSend(b *testing.B) {
	for _, inFlight := range []int{2048, 4096} {
		b.Run(fmt.Sprintf("Latency100ms/InFlight%d", inFlight), func(b *testing.B) {
			benchmarkSend(b, 100*time.Millisecond, inFlight)
		})
	}
}

func benchmarkSend(b *testing.B, latency time.Duration, inFlight int) {
	base := startBenchReceiver(b, latency)
	keys := [][]byte{[]byte("bench-key-new-0123456789abcdef"), []byte("bench-key-old-0123456789abcdef")}

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	baseHeap, baseStack := ms.HeapInuse, ms.StackInuse

	// Signed with two keys, as during a rotation: the costliest request.
	w := webhook.New(webhook.Config{URL: base + "/hook", Timeout: 30 * time.Second, Secrets: keys})
	m := message("")
	var failed atomic.Int64
	var reasonsMu sync.Mutex
	reasons := map[string]int{}
	run := func(n int64) {
		var next atomic.Int64
		var wg sync.WaitGroup
		for g := range inFlight {
			wg.Go(func() {
				msg := m
				for i := next.Add(1); i <= n; i = next.Add(1) {
					msg.MessageID = "ntf-" + strconv.Itoa(g) + "-" + strconv.FormatInt(i, 10) + ".webhook"
					if out := w.Send(context.Background(), msg); out.Class != provider.Accepted {
						failed.Add(1)
						reasonsMu.Lock()
						reasons[out.Class.String()+" "+out.Reason]++
						reasonsMu.Unlock()
					}
				}
			})
		}
		wg.Wait()
	}

	run(int64(inFlight)) // warm up: open the connections once
	failed.Store(0)
	connsBefore := receiverConns(b, base)
	stop := make(chan struct{})
	peak := make(chan [2]uint64, 1)
	go func() { h, s := memPeak(stop); peak <- [2]uint64{h, s} }()

	b.ReportAllocs()
	b.ResetTimer()
	cpuBefore := cpuTime(b)
	start := time.Now()
	run(int64(b.N))
	elapsed := time.Since(start)
	cpu := cpuTime(b) - cpuBefore
	b.StopTimer()
	close(stop)
	p := <-peak

	conns := receiverConns(b, base) - connsBefore - 1 // less the /conns request itself
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "sends/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
	b.ReportMetric(float64(conns)/float64(b.N), "conns/op")
	b.ReportMetric(float64(failed.Load())/float64(b.N), "failed/op")
	b.ReportMetric(float64(int64(p[0])-int64(baseHeap))/float64(inFlight), "heap-B/inflight")
	b.ReportMetric(float64(int64(p[1])-int64(baseStack))/float64(inFlight), "stack-B/inflight")
	if len(reasons) > 0 {
		b.Logf("calls not accepted: %v", reasons)
	}
}

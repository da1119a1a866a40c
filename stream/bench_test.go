package stream_test

// The streams benchmark: many open streams on one Hub, over real HTTP
// connections on loopback, their clients in a child process (this test
// binary again, see TestMain) so the server's memory is measured alone.
//
//	go test ./stream -run '^$' -bench Streams -benchtime 1x
//
// HERALD_BENCH_STREAMS sets how many streams (default 10,000);
// HERALD_BENCH_DATABASE a PostgreSQL URL instead of a fresh SQLite file.
// Each process holds one file descriptor per stream: the benchmark raises
// its soft limit to the hard one and says so when that is too low.
//
// Reported: the server's heap and goroutine stacks per open stream (after
// a GC, against the same process before the streams opened), goroutines
// per stream, and how long until every stream has the new item:
//
//	Recipients:    one stream for each of N recipients; an item for each
//	               of them, created at once (concurrent creates, which set
//	               the pace); then another for each, committed unannounced,
//	               and one signal for all N inboxes (the fan-out alone).
//	OneRecipient:  N streams of one recipient; one item, five times.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/postgres"
	"github.com/heraldhq/herald/stream"
)

// TestMain runs the benchmark's clients when the child's variable is set.
func TestMain(m *testing.M) {
	if os.Getenv(clientEnv) != "" {
		if err := runClients(); err != nil {
			fmt.Fprintln(os.Stderr, "stream bench clients:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const (
	// clientEnv names the file of the child's work: the URL, then one
	// token per line, one stream each.
	clientEnv = "HERALD_STREAM_BENCH_CLIENTS"
)

// raiseFDLimit sets the soft limit of open files to the hard one and
// returns it.
func raiseFDLimit() (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	l.Cur = l.Max
	return l.Cur, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
}

// runClients opens one stream per token of the file clientEnv names and
// reports on stdout:
//
//	ready                  every stream answered its first event
//	round K UNIXNANO       every stream has K items; the time the last one came
func runClients() error {
	if _, err := raiseFDLimit(); err != nil {
		return err
	}
	raw, err := os.ReadFile(os.Getenv(clientEnv))
	if err != nil {
		return err
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	url, tokens := lines[0], lines[1:]
	n := len(tokens)
	var mu sync.Mutex
	items := map[int]int{} // items seen → streams that saw that many
	var ready sync.WaitGroup
	ready.Add(n)
	errs := make(chan error, n)
	sem := make(chan struct{}, 64) // dials at once
	for _, tok := range tokens {
		go func() {
			sem <- struct{}{}
			r, err := dialStream(url, tok)
			<-sem
			if err != nil {
				errs <- err
				ready.Done()
				return
			}
			first, seen := true, 0
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					errs <- fmt.Errorf("stream ended: %w", err)
					return
				}
				switch {
				case first && line == "\n":
					first = false
					ready.Done()
				case strings.HasPrefix(line, "event: item"):
					seen++
					mu.Lock()
					items[seen]++
					if items[seen] == n {
						fmt.Printf("round %d %d\n", seen, time.Now().UnixNano())
					}
					mu.Unlock()
				}
			}
		}()
	}
	ready.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	fmt.Println("ready")
	// Until the parent ends this process.
	return <-errs
}

// dialStream opens one stream and returns its body, past the headers.
func dialStream(url, token string) (*bufio.Reader, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	c, err := net.Dial("tcp", req.URL.Host)
	if err != nil {
		return nil, err
	}
	if err := req.Write(c); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 1024), req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("stream: %s %s", resp.Status, b)
	}
	return bufio.NewReaderSize(resp.Body, 512), nil
}

// children runs the clients for tokens in a child process and returns its
// report lines.
func children(b *testing.B, url string, tokens []string) <-chan string {
	b.Helper()
	path := filepath.Join(b.TempDir(), "clients")
	if err := os.WriteFile(path, []byte(url+"\n"+strings.Join(tokens, "\n")+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), clientEnv+"="+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return lines
}

// await reads the child's lines until one starts with prefix.
func await(b *testing.B, lines <-chan string, prefix string) string {
	b.Helper()
	timeout := time.After(5 * time.Minute)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				b.Fatalf("the clients exited before %q", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			b.Fatalf("no %q from the clients in 5 minutes", prefix)
		}
	}
}

// roundAt parses "round K UNIXNANO".
func roundAt(b *testing.B, line string) time.Time {
	f := strings.Fields(line)
	ns, err := strconv.ParseInt(f[len(f)-1], 10, 64)
	if err != nil {
		b.Fatalf("bad line %q", line)
	}
	return time.Unix(0, ns)
}

// memNow is the heap in use and the goroutine stacks, after a GC.
func memNow() (heap, stacks uint64, goroutines int) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, ms.StackInuse, runtime.NumGoroutine()
}

// benchStore opens the benchmark's store.
func benchStore(b *testing.B) testStore {
	b.Helper()
	if u := os.Getenv("HERALD_BENCH_DATABASE"); u != "" {
		s, err := postgres.Open(context.Background(), u, postgres.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}
	return drivers[0].open(b)
}

func BenchmarkStreams(b *testing.B) {
	n := 10_000
	if v := os.Getenv("HERALD_BENCH_STREAMS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	limit, err := raiseFDLimit()
	if err != nil {
		b.Fatal(err)
	}
	if limit < uint64(n)+200 {
		b.Fatalf("the open files limit is %d: %d streams need %d per process (ulimit -Hn)", limit, n, n+200)
	}
	b.Logf("open files limit raised to %d (the hard limit)", limit)
	b.Run("Recipients", func(b *testing.B) { benchStreams(b, n, false) })
	b.Run("OneRecipient", func(b *testing.B) { benchStreams(b, n, true) })
}

func benchStreams(b *testing.B, n int, one bool) {
	st := benchStore(b)
	// The Hub hears the store's signals through forward, which the
	// broadcast's second round turns off.
	sig := &store.InboxSignals{}
	forward := &forwarder{to: sig}
	forward.on.Store(true)
	b.Cleanup(st.InboxSignals().Watch(forward))
	e := setup(b, st, stream.Config{MaxStreams: 1 << 20, Signals: sig})
	// Recipients and items new to the database: on one an earlier run
	// filled (HERALD_BENCH_DATABASE) a stream would first be sent the
	// items already there, and a create with an earlier run's id would be
	// a dedup hit that writes nothing; the clients count items.
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	e.run = "_" + run
	recipient := func(i int) string {
		if one {
			return "r" + run
		}
		return fmt.Sprintf("r%s-%05d", run, i)
	}
	tokens := make([]string, n)
	for i := range tokens {
		tokens[i] = e.token(b, "t1", recipient(i))
	}
	heap0, stack0, g0 := memNow()
	lines := children(b, e.url(""), tokens)
	await(b, lines, "ready")
	for e.hub.Open() != n {
		time.Sleep(time.Millisecond) // the last handlers are between their flush and their wait
	}
	heap1, stack1, g1 := memNow()
	if path := os.Getenv("HERALD_BENCH_MEMPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	perStream := float64(heap1-heap0+stack1-stack0) / float64(n)
	b.ReportMetric(perStream, "B/stream")
	b.ReportMetric(float64(heap1-heap0)/float64(n), "heapB/stream")
	b.ReportMetric(float64(stack1-stack0)/float64(n), "stackB/stream")
	b.ReportMetric(float64(g1-g0)/float64(n), "goroutines/stream")
	b.Logf("%d streams: %.0f B each (heap %.0f, stacks %.0f), %.1f goroutines each",
		n, perStream, float64(heap1-heap0)/float64(n), float64(stack1-stack0)/float64(n), float64(g1-g0)/float64(n))

	// addAll creates an item for each recipient at once.
	addAll := func() {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 256 { // as many as SQLite's writer commits together
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
					e.add(b, "t1", recipient(i), "broadcast")
				}
			}()
		}
		wg.Wait()
	}
	if !one {
		// An item for each recipient, created at once: the creates set
		// the pace.
		began, cpu0 := time.Now(), cpuTime(b)
		addAll()
		committed := time.Since(began)
		reached := roundAt(b, await(b, lines, "round 1 ")).Sub(began)
		cpu := cpuTime(b) - cpu0
		b.ReportMetric(float64(reached.Milliseconds()), "ms-to-all")
		b.ReportMetric(float64(committed.Milliseconds()), "ms-to-commit")
		b.ReportMetric(float64((reached - committed).Milliseconds()), "ms-after-commit")
		b.ReportMetric(float64(cpu.Milliseconds()), "server-cpu-ms")
		b.Logf("%d items, one per recipient, created at once: all committed after %s, all %d streams had theirs after %s "+
			"(%s after the last commit); the server's CPU time, creates included: %s",
			n, committed.Round(time.Millisecond), n, reached.Round(time.Millisecond), (reached - committed).Round(time.Millisecond),
			cpu.Round(time.Millisecond))

		// Another item for each, committed unannounced, then one signal
		// for all 10,000 inboxes: the fan-out alone.
		forward.on.Store(false)
		addAll()
		keys := make([]store.InboxKey, n)
		for i := range keys {
			keys[i] = store.InboxKey{Tenant: "t1", Recipient: recipient(i)}
		}
		stopProfile := profileCPU(b)
		began, cpu0 = time.Now(), cpuTime(b)
		sig.Changed(keys...)
		reached = roundAt(b, await(b, lines, "round 2 ")).Sub(began)
		cpu = cpuTime(b) - cpu0
		stopProfile()
		b.ReportMetric(float64(reached.Milliseconds()), "ms-fanout")
		b.ReportMetric(float64(cpu.Milliseconds()), "server-cpu-ms-fanout")
		b.Logf("one signal for %d inboxes with a new item each: all streams had theirs after %s; the server's CPU time: %s",
			n, reached.Round(time.Millisecond), cpu.Round(time.Millisecond))
		return
	}
	defer profileCPU(b)()
	var took, cpu []time.Duration
	for k := 1; k <= 5; k++ {
		began, cpu0 := time.Now(), cpuTime(b)
		e.add(b, "t1", recipient(0), "to all")
		took = append(took, roundAt(b, await(b, lines, fmt.Sprintf("round %d ", k))).Sub(began))
		cpu = append(cpu, cpuTime(b)-cpu0)
	}
	b.Logf("one item to %d streams of one recipient, five times: %v; the server's CPU time each time: %v", n, took, cpu)
	slices.Sort(took)
	slices.Sort(cpu)
	b.ReportMetric(float64(took[len(took)/2].Milliseconds()), "ms-to-all-p50")
	b.ReportMetric(float64(took[len(took)-1].Milliseconds()), "ms-to-all-max")
	b.ReportMetric(float64(cpu[len(cpu)/2].Milliseconds()), "server-cpu-ms-p50")
}

// profileCPU profiles the CPU into the file HERALD_BENCH_CPUPROFILE names,
// if any, until the returned function is called: the rounds alone,
// without the streams' opening.
func profileCPU(b *testing.B) (stop func()) {
	path := os.Getenv("HERALD_BENCH_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// cpuTime is this process's CPU time so far, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// forwarder passes signals on while on.
type forwarder struct {
	to *store.InboxSignals
	on atomic.Bool
}

func (f *forwarder) InboxChanged(keys []store.InboxKey) {
	if f.on.Load() {
		f.to.Changed(keys...)
	}
}

func (f *forwarder) InboxMissed() {
	if f.on.Load() {
		f.to.Missed()
	}
}

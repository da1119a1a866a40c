package ratelimit_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/internal/testsqlite"
	"github.com/heraldhq/herald/ratelimit"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/postgres"
	"github.com/heraldhq/herald/store/sqlite"
)

// Two real herald-like processes (this test binary, run again as
// TestHelperCaller) share one database and call one fake provider that
// counts the calls it gets, each as fast as its limiter lets it. The
// parent starts both at once and reads the fake's counts per second.

const (
	helperEnv  = "RATELIMIT_HELPER"
	fakeName   = "fake"
	limitRate  = 200
	runFor     = 5 * time.Second
	headerProc = "X-Process"
	headerLane = "X-Lane"
)

// scenario is one run of the two processes.
type scenario struct {
	name  string
	burst int
	// lanes are each process's callers: lane:goroutines,…
	lanes [2]string
	// refuse, when set, makes the fake answer 429 (Retry-After: 1) to the
	// first call at or after it.
	refuse time.Duration
	check  func(t *testing.T, c counts)
}

func TestTwoProcessesShareTheLimit(t *testing.T) {
	t.Parallel()
	databases := []struct {
		driver string
		open   func(t *testing.T) string // a fresh, migrated database
	}{
		{"postgres", func(t *testing.T) string {
			url := testpg.Schema(t)
			s, err := postgres.Open(context.Background(), url, postgres.Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			return url
		}},
		{"sqlite", func(t *testing.T) string {
			path := testsqlite.Path(t)
			s, err := sqlite.Open(context.Background(), path, sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			return "sqlite:" + path
		}},
	}
	scenarios := []scenario{
		{name: "HoldTheRate", burst: 20, lanes: [2]string{"transactional:8", "transactional:8"}, check: shared},
		{name: "AlertBeforeMarketing", burst: limitRate, lanes: [2]string{"alert:4,marketing:4", "marketing:8"}, check: alertFirst},
		{name: "A429SlowsBoth", burst: 20, lanes: [2]string{"transactional:4", "transactional:4"}, refuse: 2 * time.Second, check: slowsBoth},
	}
	// One at a time: the rate each run reaches is what it checks.
	for _, db := range databases {
		t.Run(db.driver, func(t *testing.T) {
			for _, sc := range scenarios {
				t.Run(sc.name, func(t *testing.T) {
					c := runTwo(t, db.open(t), sc)
					c.log(t)
					sc.check(t, c)
				})
			}
		})
	}
}

// call is one call the fake counted.
type call struct {
	at      time.Duration // since the processes were told to go
	process string
	lane    heraldtype.Lane
	refused bool
}

type counts struct {
	calls []call
	burst int
	// takes is the round trips to the store both processes made.
	takes int
}

// between counts the calls at or after from and before to that match.
func (c counts) between(from, to time.Duration, match func(call) bool) int {
	n := 0
	for _, k := range c.calls {
		if k.at >= from && k.at < to && (match == nil || match(k)) {
			n++
		}
	}
	return n
}

func (c counts) log(t *testing.T) {
	t.Helper()
	var b strings.Builder
	for s := time.Duration(0); s < runFor; s += time.Second {
		fmt.Fprintf(&b, " [%d s: %d", s/time.Second, c.between(s, s+time.Second, nil))
		for _, p := range []string{"A", "B"} {
			fmt.Fprintf(&b, " %s=%d", p, c.between(s, s+time.Second, func(k call) bool { return k.process == p }))
		}
		fmt.Fprintf(&b, " marketing=%d]", c.between(s, s+time.Second, func(k call) bool { return k.lane == heraldtype.LaneMarketing }))
	}
	t.Logf("calls per second (all, per process, marketing):%s; %d in all, %d takes from the store", b.String(), len(c.calls), c.takes)
}

// steady is the span the checks read: after the first second, which
// holds the bucket's first burst.
const steadyFrom = time.Second

// holdsTheRate: in the steady span the two processes together call at
// the limit, within 10 %; no second goes past what the bucket can give
// (burst + rate × (1 s + the grant window)); the whole run, likewise.
func holdsTheRate(t *testing.T, c counts) {
	t.Helper()
	steady := c.between(steadyFrom, runFor, nil)
	rate := float64(steady) / (runFor - steadyFrom).Seconds()
	if rate < 0.9*limitRate || rate > 1.1*limitRate {
		t.Errorf("%.1f calls/s from %s to %s, want %d within 10%%", rate, steadyFrom, runFor, limitRate)
	}
	most := float64(c.burst) + limitRate*1.05
	for s := steadyFrom; s < runFor; s += time.Second {
		if n := c.between(s, s+time.Second, nil); float64(n) > most {
			t.Errorf("%d calls in second %d, more than the bucket can give (%.0f)", n, int(s/time.Second), most)
		}
	}
	if whole := float64(c.burst) + limitRate*(runFor.Seconds()+0.05); float64(len(c.calls)) > whole {
		t.Errorf("%d calls in the run, more than burst + rate × (%s + 50 ms) = %.0f", len(c.calls), runFor, whole)
	}
}

// shared: both processes call, each at least a fifth of the calls (one
// bucket, not one process's).
func shared(t *testing.T, c counts) {
	t.Helper()
	holdsTheRate(t, c)
	steady := c.between(steadyFrom, runFor, nil)
	for _, p := range []string{"A", "B"} {
		if n := c.between(steadyFrom, runFor, func(k call) bool { return k.process == p }); n < steady/5 {
			t.Errorf("process %s made %d of the %d calls: not a shared bucket", p, n, steady)
		}
	}
}

// alertFirst: process A's alerts take the whole rate; marketing, in A
// and in B, waits while they keep the bucket short.
func alertFirst(t *testing.T, c counts) {
	t.Helper()
	holdsTheRate(t, c)
	steady := c.between(steadyFrom, runFor, nil)
	marketing := c.between(steadyFrom, runFor, func(k call) bool { return k.lane == heraldtype.LaneMarketing })
	if float64(marketing) > 0.05*float64(steady) {
		t.Errorf("marketing made %d of %d calls while alerts were short of tokens, want at most 5%%", marketing, steady)
	}
}

// slowsBoth: after the 429 neither process calls until its Retry-After
// (1 s) has passed, except tokens already granted (50 ms); then the rate
// comes back, below the full rate at first.
func slowsBoth(t *testing.T, c counts) {
	t.Helper()
	var at time.Duration
	refused := ""
	for _, k := range c.calls {
		if k.refused {
			at, refused = k.at, k.process
		}
	}
	if refused == "" {
		t.Fatal("no call was refused")
	}
	t.Logf("process %s got the 429 at %s", refused, at.Round(time.Millisecond))
	if n := c.between(at+100*time.Millisecond, at+time.Second, nil); n != 0 {
		t.Errorf("%d calls in the second after process %s's 429 (from 0.1 s)", n, refused)
	}
	before := c.between(at-time.Second, at, nil)
	after := c.between(at+time.Second, at+2*time.Second, nil)
	if after == 0 || float64(after) > 0.9*float64(before) {
		t.Errorf("%d calls in the second after the pause, %d in the second before the 429: want fewer, but some", after, before)
	}
	for _, p := range []string{"A", "B"} {
		if c.between(at+time.Second, runFor, func(k call) bool { return k.process == p }) == 0 {
			t.Errorf("process %s made no call after the pause", p)
		}
	}
}

// runTwo runs the two processes of sc on database and returns what the
// fake counted.
func runTwo(t *testing.T, database string, sc scenario) counts {
	t.Helper()
	var (
		mu      sync.Mutex
		calls   []call
		start   time.Time
		refused bool
	)
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		k := call{at: time.Since(start), process: r.Header.Get(headerProc), lane: heraldtype.Lane(r.Header.Get(headerLane))}
		if sc.refuse > 0 && !refused && k.at >= sc.refuse {
			refused, k.refused = true, true
		}
		calls = append(calls, k)
		mu.Unlock()
		if k.refused {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer fake.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type child struct {
		cmd    *exec.Cmd
		stdin  io.WriteCloser
		lines  *bufio.Scanner
		stderr strings.Builder
	}
	var children []*child
	for i, lanes := range sc.lanes {
		c := &child{cmd: exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperCaller$", "-test.count=1")}
		c.cmd.Env = append(os.Environ(), helperEnv+"=1", "RL_DATABASE="+database, "RL_FAKE="+fake.URL,
			"RL_PROCESS="+string(rune('A'+i)), "RL_LANES="+lanes, "RL_BURST="+strconv.Itoa(sc.burst))
		c.cmd.Stderr = &c.stderr
		var err error
		if c.stdin, err = c.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		out, err := c.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		c.lines = bufio.NewScanner(out)
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		children = append(children, c)
	}
	expect := func(c *child, word string) string {
		t.Helper()
		for c.lines.Scan() {
			if rest, ok := strings.CutPrefix(c.lines.Text(), word); ok {
				return rest
			}
		}
		_ = c.cmd.Wait()
		t.Fatalf("the child said no %s:\n%s", word, c.stderr.String())
		return ""
	}
	for _, c := range children {
		expect(c, "READY")
	}
	mu.Lock()
	start = time.Now()
	mu.Unlock()
	for _, c := range children {
		if _, err := io.WriteString(c.stdin, "GO\n"); err != nil {
			t.Fatal(err)
		}
	}
	takes := 0
	for _, c := range children {
		n, err := strconv.Atoi(expect(c, "DONE takes="))
		if err != nil {
			t.Fatalf("the child's count of takes: %v", err)
		}
		takes += n
		if err := c.cmd.Wait(); err != nil {
			t.Fatalf("child: %v\n%s", err, c.stderr.String())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return counts{calls: calls, burst: sc.burst, takes: takes}
}

// TestHelperCaller is one of the two processes: it opens the database,
// says READY, and on GO calls the fake provider from its lanes' callers
// for runFor, each waiting on the limiter before every call; a 429 slows
// the limiter as the sender does.
func TestHelperCaller(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("run by TestTwoProcessesShareTheLimit")
	}
	ctx := context.Background()
	var st store.RateBuckets
	if path, ok := strings.CutPrefix(os.Getenv("RL_DATABASE"), "sqlite:"); ok {
		s, err := sqlite.Open(ctx, path, sqlite.Options{MustExist: true})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		st = s
	} else {
		s, err := postgres.Open(ctx, os.Getenv("RL_DATABASE"), postgres.Options{MustExist: true, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		st = s
	}
	burst, _ := strconv.Atoi(os.Getenv("RL_BURST"))
	counted := &counted{RateBuckets: st}
	l := ratelimit.New(ratelimit.Config{
		Store: counted, Limits: map[string]ratelimit.Limit{fakeName: {PerSecond: limitRate, Burst: burst}},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 10 * time.Second}
	process, fakeURL := os.Getenv("RL_PROCESS"), os.Getenv("RL_FAKE")

	fmt.Println("READY")
	if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil || line != "GO\n" {
		t.Fatalf("read GO: %q %v", line, err)
	}
	run, cancel := context.WithTimeout(ctx, runFor)
	defer cancel()
	var wg sync.WaitGroup
	for spec := range strings.SplitSeq(os.Getenv("RL_LANES"), ",") {
		lane, n, _ := strings.Cut(spec, ":")
		callers, _ := strconv.Atoi(n)
		for range callers {
			wg.Go(func() { callUntilDone(run, t, l, client, fakeURL, process, heraldtype.Lane(lane)) })
		}
	}
	wg.Wait()
	fmt.Printf("DONE takes=%d\n", counted.takes.Load())
}

func callUntilDone(ctx context.Context, t *testing.T, l *ratelimit.Limiter, client *http.Client, url, process string, lane heraldtype.Lane) {
	for ctx.Err() == nil {
		later, err := l.Wait(ctx, fakeName, lane)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			t.Errorf("Wait: %v", err)
			return
		case later > 0:
			select {
			case <-ctx.Done():
			case <-time.After(later):
			}
			continue
		}
		req, _ := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodPost, url, nil)
		req.Header.Set(headerProc, process)
		req.Header.Set(headerLane, string(lane))
		resp, err := client.Do(req)
		if err != nil {
			t.Errorf("call the fake: %v", err)
			return
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			l.Slow(ctx, fakeName, time.Duration(secs)*time.Second)
		}
	}
}

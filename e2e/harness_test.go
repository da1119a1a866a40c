// Package e2e drives the herald binary as a user would: real processes,
// real HTTP, real signals. It builds the binary once per test run — with
// -race when the tests themselves run with -race, so the crash and
// multi-process paths are race-checked too — and fails a test whose herald
// reported a data race.
//
// The binary is built by a `go build` subprocess, which `go test` cannot see
// into; heraldBinary therefore also reads every file the binary is built
// from, so that the test cache, which records the files a test reads,
// serves no result that an edit to herald would change.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testmq"
)

// TestMain removes the built binary after the run, and puts each test's
// vhost deletion off to the next test's creation (testmq.Main).
func TestMain(m *testing.M) {
	code := testmq.Main(m)
	if binDir != "" {
		if err := os.RemoveAll(binDir); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: remove the built binary: %v\n", err)
			code = max(code, 1)
		}
	}
	os.Exit(code)
}

// buildEnv are the environment variables that change what `go build`
// makes, or how a race-enabled herald behaves.
var buildEnv = []string{
	"GOFLAGS", "GOEXPERIMENT", "GOOS", "GOARCH", "GOAMD64", "GOTOOLCHAIN", "CGO_ENABLED",
	"CC", "CGO_CFLAGS", "CGO_LDFLAGS", "GORACE", "GODEBUG",
}

// recordBuildInputs reads, in this process, every file of this module that
// the herald binary is built from (the Go and embedded files of each of its
// packages, go.mod and go.sum) and stats their directories, so a file
// added, removed or changed there makes `go test` run these tests again
// instead of serving a cached result. `go list` runs in a subprocess, so
// the files it reads do not count; only what this function reads does. It
// must run inside a test (m.Run starts the log of what the test reads).
func recordBuildInputs() error {
	for _, k := range buildEnv {
		os.Getenv(k)
	}
	args := []string{"list", "-deps", "-json=Dir,GoFiles,CgoFiles,EmbedFiles,Module"}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "../cmd/herald")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go list the herald binary's packages: %v\n%s", err, stderr.Bytes())
	}
	var files []string
	dirs := map[string]bool{}
	modDir := ""
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p struct {
			Dir                           string
			GoFiles, CgoFiles, EmbedFiles []string
			Module                        *struct {
				Main bool
				Dir  string
			}
		}
		if err := dec.Decode(&p); err != nil {
			return fmt.Errorf("go list output: %w", err)
		}
		if p.Module == nil || !p.Module.Main {
			continue // the standard library and dependencies: go.sum pins them
		}
		modDir = p.Module.Dir
		dirs[p.Dir] = true
		for _, f := range append(append(p.GoFiles, p.CgoFiles...), p.EmbedFiles...) {
			path := filepath.Join(p.Dir, f)
			files = append(files, path)
			dirs[filepath.Dir(path)] = true
		}
	}
	if modDir == "" || len(files) == 0 {
		return fmt.Errorf("go list named no file of this module for cmd/herald:\n%s", out)
	}
	files = append(files, filepath.Join(modDir, "go.mod"), filepath.Join(modDir, "go.sum"))
	for _, f := range files {
		if _, err := os.ReadFile(f); err != nil {
			return fmt.Errorf("read build input: %w", err)
		}
	}
	for d := range dirs {
		// A directory's modification time changes when a file is added to
		// it: a new source file is an input too.
		if _, err := os.Stat(d); err != nil {
			return fmt.Errorf("stat build input: %w", err)
		}
	}
	return nil
}

var (
	buildOnce sync.Once
	binDir    string // removed by TestMain
	binPath   string
	buildErr  error
)

// heraldBinary builds cmd/herald once per test binary (with -race when this
// binary was built with -race) and returns its path.
func heraldBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if buildErr = recordBuildInputs(); buildErr != nil {
			return
		}
		binDir, buildErr = os.MkdirTemp("", "herald-e2e-bin-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "herald")
		args := []string{"build", "-o", binPath}
		if raceEnabled {
			args = append(args, "-race")
		}
		began := time.Now()
		out, err := exec.Command("go", append(args, "../cmd/herald")...).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			return
		}
		fmt.Fprintf(os.Stderr, "e2e: built herald (race detector %v) in %s\n", raceEnabled, time.Since(began).Round(time.Millisecond))
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// handedOut holds every address freeAddr gave out, so two servers of this
// run are never given the same port, even after one of them was killed.
var handedOut sync.Map

// freeAddr returns a loopback address nobody listens on right now and that
// no other test of this run was given. Another process may still take it
// before herald binds it: start notices and moves herald to another one.
func freeAddr(t *testing.T) string {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if _, taken := handedOut.LoadOrStore(addr, true); !taken {
			return addr
		}
	}
	t.Fatal("freeAddr: no fresh loopback port in 100 tries")
	return ""
}

// endpoint is where a server listens now. Clients hold one, so they follow
// the server when a restart had to move it to another port.
type endpoint struct {
	mu   sync.Mutex
	addr string
}

func (e *endpoint) get() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.addr
}

func (e *endpoint) set(addr string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.addr = addr
}

// endpoints maps the address each server was created with to its endpoint.
var endpoints sync.Map

// server is one herald, run as a child process, possibly several times in a
// row (start after kill or stop). Every process it starts is killed when
// the test ends, whatever happens, and its output is checked for data races.
type server struct {
	t      *testing.T
	bin    string
	config string
	env    []string
	// addr is where it listens (start moves it when the port was taken);
	// read it between starts, from the test's goroutine.
	addr  string
	ep    *endpoint
	moved bool
	cmd   *exec.Cmd
	done  chan struct{}
	logs  *testenv.Buffer
}

// raceReport is how the race detector starts a report.
const raceReport = "WARNING: DATA RACE"

func newServer(t *testing.T, config, addr string, env ...string) *server {
	t.Helper()
	s := &server{t: t, bin: heraldBinary(t), config: config, addr: addr, ep: &endpoint{addr: addr}, env: env, logs: &testenv.Buffer{}}
	endpoints.Store(addr, s.ep)
	t.Cleanup(func() {
		// Runs after the processes' own clean-ups have killed them, so
		// their whole output is here.
		if i := strings.Index(s.logs.String(), raceReport); i >= 0 {
			t.Errorf("herald (%s) reported a data race:\n%s", s.config, excerpt(s.logs.String()[i:], 60))
		}
	})
	return s
}

// listeningLine is what `herald serve` prints once it has bound its address.
var listeningLine = regexp.MustCompile(`listening on http://(\S+)`)

// start runs `herald serve --config` and waits until this very process
// reports its address and /healthz answers there. If the port was taken
// meanwhile (herald exits with "address already in use"), it restarts
// herald on a fresh port (HERALD_LISTEN) and moves the server's address and
// its clients there. The process is SIGKILLed when the test ends if it
// still runs.
func (s *server) start() {
	s.t.Helper()
	for try := 1; !s.launch(); try++ {
		if try == 5 {
			s.t.Fatalf("herald could not bind a port in 5 tries:\n%s", s.tail())
		}
		old := s.addr
		s.addr, s.moved = freeAddr(s.t), true
		s.ep.set(s.addr)
		s.t.Logf("%s was taken by another process; herald moves to %s", old, s.addr)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := testenv.HTTP.Get("http://" + s.addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-s.done:
			s.t.Fatalf("herald exited during start-up:\n%s", s.tail())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("herald at %s did not become healthy within 60 s:\n%s", s.addr, s.tail())
		}
	}
}

// launch starts one process and waits until it says where it listens. It
// returns false if the process exited because its address was in use.
func (s *server) launch() bool {
	s.t.Helper()
	mark := s.logs.Mark()
	cmd := exec.Command(s.bin, "serve", "--config", s.config)
	// The tests' configs decide; a developer's HERALD_* settings must not.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HERALD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, s.env...)
	if s.moved {
		cmd.Env = append(cmd.Env, "HERALD_LISTEN="+s.addr)
	}
	cmd.Stdout = s.logs
	cmd.Stderr = s.logs
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }() // the exit status is read from cmd.ProcessState
	s.cmd, s.done = cmd, done
	s.t.Cleanup(func() {
		select {
		case <-done:
			return
		default:
		}
		_ = cmd.Process.Kill() // an error means it is gone already
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			s.t.Errorf("herald pid %d still runs 30 s after SIGKILL", cmd.Process.Pid)
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		if m := listeningLine.FindStringSubmatch(s.logs.Since(mark)); m != nil {
			s.addr = m[1]
			s.ep.set(s.addr)
			return true
		}
		select {
		case <-done:
			out := s.logs.Since(mark)
			if strings.Contains(out, "address already in use") {
				return false
			}
			s.t.Fatalf("herald exited during start-up (exit code %d):\n%s", cmd.ProcessState.ExitCode(), excerpt(out, 40))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("herald did not report its address within 60 s:\n%s", excerpt(s.logs.Since(mark), 40))
		}
	}
}

// running reports whether the last process started still runs.
func (s *server) running() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL and waits for the process to die.
func (s *server) kill() {
	s.t.Helper()
	if err := s.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		s.t.Fatalf("SIGKILL herald: %v", err)
	}
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		s.t.Fatalf("herald pid %d still runs 30 s after SIGKILL", s.cmd.Process.Pid)
	}
}

// stop sends SIGTERM and returns the exit code; it fails the test if the
// process has not exited within timeout.
func (s *server) stop(timeout time.Duration) int {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		s.t.Fatalf("SIGTERM herald: %v (it exited before?):\n%s", err, s.tail())
	}
	select {
	case <-s.done:
	case <-time.After(timeout):
		s.kill()
		s.t.Fatalf("herald did not exit within %s of SIGTERM:\n%s", timeout, s.tail())
	}
	return s.cmd.ProcessState.ExitCode()
}

func (s *server) tail() string { return excerpt(s.logs.String(), -40) }

// excerpt returns the first n lines of text, or the last -n if n < 0.
func excerpt(text string, n int) string {
	lines := strings.Split(text, "\n")
	switch {
	case n >= 0 && len(lines) > n:
		lines = lines[:n]
	case n < 0 && len(lines) > -n:
		lines = lines[len(lines)+n:]
	}
	return strings.Join(lines, "\n")
}

// routeSink is a webhook receiver that records every message id it answered
// 2xx and on which URL path. Each herald process is configured with its own
// path (sink URL + "/p1"…), so the path tells which process made the call.
type routeSink struct {
	mu     sync.Mutex
	counts map[string]int // message id → 2xx answers
	paths  map[string]int // path → 2xx answers

	// hold, when set, is asked about each request before it is answered; a
	// true answer blocks the request until release is closed.
	hold    func(path string, callsOnPath int) bool
	held    chan string // message ids of held requests
	release chan struct{}
}

func newRouteSink() *routeSink {
	return &routeSink{counts: map[string]int{}, paths: map[string]int{}, held: make(chan string, 16), release: make(chan struct{})}
}

func (k *routeSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		MessageID string `json:"message_id"`
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil || json.Unmarshal(raw, &body) != nil || body.MessageID == "" || r.Header.Get("Idempotency-Key") != body.MessageID {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	k.mu.Lock()
	hold := k.hold != nil && k.hold(r.URL.Path, k.paths[r.URL.Path])
	if hold {
		k.hold = nil // one request only
	}
	// A held request counts as answered: a real provider would have acted
	// on it whether or not its answer ever reaches herald.
	k.counts[body.MessageID]++
	k.paths[r.URL.Path]++
	k.mu.Unlock()
	if hold {
		k.held <- body.MessageID // buffered; one request is held at most
		select {
		case <-k.release:
		case <-r.Context().Done(): // the caller died or gave up
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

func (k *routeSink) snapshot() (counts, paths map[string]int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	counts, paths = make(map[string]int, len(k.counts)), make(map[string]int, len(k.paths))
	for id, n := range k.counts {
		counts[id] = n
	}
	for p, n := range k.paths {
		paths[p] = n
	}
	return counts, paths
}

// duplicates lists the message ids answered 2xx more than once.
func duplicates(counts map[string]int) []string {
	var dups []string
	for id, n := range counts {
		if n > 1 {
			dups = append(dups, fmt.Sprintf("%s×%d", id, n))
		}
	}
	sort.Strings(dups)
	return dups
}

// postStats counts what the clients saw.
type postStats struct {
	unavailable atomic.Int64 // 503 answers (each a problem+json with Retry-After)
	connErrors  atomic.Int64 // requests that got no answer
	failovers   atomic.Int64 // retries sent to another process
}

// postAny sends one notification to clients[first], retrying with the same
// Idempotency-Key on connection errors (against the next process) and on
// 503 (against the same one) until it gets an answer, and returns the 202's
// id. A 503 that is not problem+json is an error.
func postAny(ctx context.Context, clients []*client, first int, key string, body any, st *postStats) (string, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return "", fmt.Errorf("%s: encode body: %w", key, err)
	}
	i := first
	var last error // why the last try got no 202
	for {
		c := clients[i%len(clients)]
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base()+"/v1/notifications", bytes.NewReader(raw))
		if err != nil {
			return "", fmt.Errorf("%s: %w", key, err)
		}
		req.Header.Set("Authorization", "Bearer "+c.key)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.http.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return "", fmt.Errorf("%s: %w (last try: %v)", key, ctx.Err(), last)
			}
			last = err
			st.connErrors.Add(1)
			if len(clients) > 1 {
				st.failovers.Add(1)
				i++
			}
			time.Sleep(10 * time.Millisecond) // retry pacing, not synchronisation
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			last = err
			st.connErrors.Add(1) // the answer was cut off: retry the same key
			continue
		}
		switch resp.StatusCode {
		case http.StatusAccepted:
			var a struct{ ID string }
			if err := json.Unmarshal(b, &a); err != nil || a.ID == "" {
				return "", fmt.Errorf("%s: 202 body %q", key, b)
			}
			return a.ID, nil
		case http.StatusServiceUnavailable:
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
				return "", fmt.Errorf("%s: 503 with Content-Type %q", key, ct)
			}
			st.unavailable.Add(1)
			last = fmt.Errorf("503: %s", b)
			time.Sleep(20 * time.Millisecond) // Retry-After says 1 s; be quicker in a test
			continue
		}
		return "", fmt.Errorf("%s: POST answered %d: %s", key, resp.StatusCode, b)
	}
}

// client is a herald API client that retries through restarts.
type client struct {
	ep   *endpoint
	key  string
	http *http.Client
}

// newClient returns a client of the herald at addr. If a server was created
// with that address, the client follows it when a restart moves it.
func newClient(addr, key string) *client {
	ep := &endpoint{addr: addr}
	if e, ok := endpoints.Load(addr); ok {
		ep = e.(*endpoint)
	}
	return &client{ep: ep, key: key, http: &http.Client{Timeout: 10 * time.Second}}
}

// client returns an API client of s that follows it across restarts.
func (s *server) client(key string) *client {
	return &client{ep: s.ep, key: key, http: &http.Client{Timeout: 10 * time.Second}}
}

// base is the client's URL prefix: http://host:port.
func (c *client) base() string { return "http://" + c.ep.get() }

// post sends one notification, retrying with the same Idempotency-Key on
// connection errors and 503 until it gets an answer, and returns the 202's id.
func (c *client) post(ctx context.Context, idemKey string, body any) (string, error) {
	return postAny(ctx, []*client{c}, 0, idemKey, body, &postStats{})
}

type notification struct {
	ID         string         `json:"id"`
	Deliveries []deliveryView `json:"deliveries"`
}

type deliveryView struct {
	MessageID string `json:"message_id"`
	State     string `json:"state"`
	Reason    string `json:"reason"`
}

func (c *client) get(ctx context.Context, id string) (notification, int, error) {
	var n notification
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base()+"/v1/notifications/"+id, nil)
	if err != nil {
		return n, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	resp, err := c.http.Do(req)
	if err != nil {
		return n, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return n, resp.StatusCode, nil
	}
	return n, 200, json.NewDecoder(resp.Body).Decode(&n)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// logLines returns the server's log lines that contain substr.
func logLines(logs, substr string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(logs))
	for sc.Scan() {
		if strings.Contains(sc.Text(), substr) {
			out = append(out, sc.Text())
		}
	}
	return out
}

// skipShort skips a long test in -short mode, but never with CI=true: a CI
// run must not pass by skipping the tests that need its services.
func skipShort(t *testing.T, what string) {
	t.Helper()
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip(what + ": skipped in -short mode")
	}
}

// TestStartMovesOffATakenPort: when another process holds the port a
// server was given, start moves herald to a fresh one, and clients made for
// the old address follow it.
func TestStartMovesOffATakenPort(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	cfg := filepath.Join(t.TempDir(), "herald.yaml")
	writeFile(t, cfg, fmt.Sprintf(`listen: %s
database: sqlite:%s
api_keys: [{key: k, tenant: t}]
`, addr, filepath.Join(t.TempDir(), "herald.db")))
	srv := newServer(t, cfg, addr)
	c := newClient(addr, "k")
	squatter, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("take %s: %v", addr, err)
	}
	defer squatter.Close()
	srv.start()
	if srv.addr == addr || c.base() != "http://"+srv.addr {
		t.Fatalf("herald listens at %s (given %s); the client calls %s", srv.addr, addr, c.base())
	}
	if _, code, err := c.get(context.Background(), "ntf_none"); err != nil || code != http.StatusNotFound {
		t.Fatalf("GET through the moved client: code %d, err %v; want 404 from herald", code, err)
	}
	srv.kill()
	srv.start() // restarts where it moved to
	if _, code, err := c.get(context.Background(), "ntf_none"); err != nil || code != http.StatusNotFound {
		t.Fatalf("GET after the restart: code %d, err %v; want 404 from herald", code, err)
	}
}

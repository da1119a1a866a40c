// Package e2e drives the herald binary as a user would: real processes,
// real HTTP, real signals. It builds the binary once per test run.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// heraldBinary builds cmd/herald once and returns its path.
func heraldBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "herald-e2e-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "herald")
		cmd := exec.Command("go", "build", "-o", binPath, "../cmd/herald")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// freeAddr returns a loopback address nobody listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// server is one herald process.
type server struct {
	t      *testing.T
	bin    string
	config string
	env    []string
	addr   string
	cmd    *exec.Cmd
	done   chan struct{}
	logs   *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newServer(t *testing.T, config, addr string, env ...string) *server {
	return &server{t: t, bin: heraldBinary(t), config: config, addr: addr, env: env, logs: &lockedBuffer{}}
}

// start runs `herald serve --config` and waits until /healthz answers.
func (s *server) start() {
	s.t.Helper()
	s.cmd = exec.Command(s.bin, "serve", "--config", s.config)
	s.cmd.Env = append(os.Environ(), s.env...)
	s.cmd.Stdout = s.logs
	s.cmd.Stderr = s.logs
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.done = make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + s.addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		select {
		case <-s.done:
			s.t.Fatalf("herald exited during start-up:\n%s", s.tail())
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("herald did not become healthy:\n%s", s.tail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill sends SIGKILL and waits for the process to die.
func (s *server) kill() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

// stop sends SIGTERM and returns the exit code.
func (s *server) stop(timeout time.Duration) int {
	s.t.Helper()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(timeout):
		s.kill()
		s.t.Fatalf("herald did not exit within %s of SIGTERM:\n%s", timeout, s.tail())
	}
	return s.cmd.ProcessState.ExitCode()
}

func (s *server) tail() string {
	lines := strings.Split(s.logs.String(), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
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
	raw, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(raw, &body); err != nil || body.MessageID == "" || r.Header.Get("Idempotency-Key") != body.MessageID {
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
		k.held <- body.MessageID
		<-k.release
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
	raw, _ := json.Marshal(body)
	i := first
	for {
		c := clients[i%len(clients)]
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/notifications", bytes.NewReader(raw))
		req.Header.Set("Authorization", "Bearer "+c.key)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.http.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return "", fmt.Errorf("%s: %w", key, ctx.Err())
			}
			st.connErrors.Add(1)
			if len(clients) > 1 {
				st.failovers.Add(1)
				i++
			}
			time.Sleep(10 * time.Millisecond) // retry pacing, not synchronisation
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
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
			time.Sleep(20 * time.Millisecond) // Retry-After says 1 s; be quicker in a test
			continue
		}
		return "", fmt.Errorf("%s: POST answered %d: %s", key, resp.StatusCode, b)
	}
}

// client is a herald API client that retries through restarts.
type client struct {
	base string
	key  string
	http *http.Client
}

func newClient(addr, key string) *client {
	return &client{base: "http://" + addr, key: key, http: &http.Client{Timeout: 10 * time.Second}}
}

// post sends one notification, retrying with the same Idempotency-Key on
// connection errors and 503 until it gets an answer, and returns the 202's id.
func (c *client) post(ctx context.Context, idemKey string, body any) (string, error) {
	return postAny(ctx, []*client{c}, 0, idemKey, body, &postStats{})
}

type notification struct {
	ID         string `json:"id"`
	Deliveries []struct {
		MessageID string `json:"message_id"`
		State     string `json:"state"`
		Reason    string `json:"reason"`
	} `json:"deliveries"`
}

func (c *client) get(ctx context.Context, id string) (notification, int, error) {
	var n notification
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/notifications/"+id, nil)
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

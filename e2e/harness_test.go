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
	"strings"
	"sync"
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

// sink is a webhook receiver that counts every message id it answered 2xx.
type sink struct {
	mu     sync.Mutex
	counts map[string]int
}

func (k *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		MessageID string `json:"message_id"`
	}
	raw, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(raw, &body); err != nil || body.MessageID == "" || r.Header.Get("Idempotency-Key") != body.MessageID {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	k.mu.Lock()
	k.counts[body.MessageID]++
	k.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (k *sink) snapshot() map[string]int {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[string]int, len(k.counts))
	for id, n := range k.counts {
		out[id] = n
	}
	return out
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
	raw, _ := json.Marshal(body)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/notifications", bytes.NewReader(raw))
		req.Header.Set("Authorization", "Bearer "+c.key)
		req.Header.Set("Idempotency-Key", idemKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.http.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			time.Sleep(20 * time.Millisecond) // the server is restarting
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusAccepted:
			var a struct{ ID string }
			if err := json.Unmarshal(b, &a); err != nil {
				return "", err
			}
			return a.ID, nil
		case http.StatusServiceUnavailable:
			time.Sleep(20 * time.Millisecond)
			continue
		}
		return "", fmt.Errorf("POST answered %d: %s", resp.StatusCode, b)
	}
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

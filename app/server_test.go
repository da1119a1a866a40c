package app_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/internal/ssetest"
	"github.com/heraldhq/herald/internal/testenv"
)

// The HTTP server's timeouts and limits (config server; issue 13). These
// tests wait out short timeouts on purpose: the timeout is what they test.

// closedWithin reads from c until it is closed by herald (EOF, a reset, or
// a reply followed by EOF) and fails the test if that takes longer than d.
func closedWithin(t *testing.T, c net.Conn, d time.Duration, what string) {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(d)); err != nil {
		t.Fatal(err)
	}
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the connection was still open after %s", what, d)
	}
}

// serveWith runs herald on testConfig edited by edit until the test ends
// and returns its base URL.
func serveWith(t *testing.T, edit func(*config.Config)) string {
	t.Helper()
	a, base := newHerald(t, testConfig(t, "", edit), app.Options{})
	runHerald(t, a)
	return base
}

func dial(t *testing.T, base string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestServerCutsOffATricklingBody(t *testing.T) {
	t.Parallel()
	base := serveWith(t, func(c *config.Config) { c.Server.ReadTimeout = config.Duration(300 * time.Millisecond) })
	c := dial(t, base)
	// Headers promise 1,000 bytes; the body stops after one.
	_, err := io.WriteString(c, "POST /v1/notifications HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+config.DevAPIKey+
		"\r\nIdempotency-Key: k1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
	if err != nil {
		t.Fatal(err)
	}
	closedWithin(t, c, 10*time.Second, "a body that stopped coming")
}

func TestServerClosesIdleKeepAlives(t *testing.T) {
	t.Parallel()
	base := serveWith(t, func(c *config.Config) { c.Server.IdleTimeout = config.Duration(300 * time.Millisecond) })
	c := dial(t, base)
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz: %v %v", res, err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	// Kept alive, then idle: herald closes it.
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("an idle keep-alive connection: read %v, want EOF", err)
	}
}

func TestServerRefusesOversizedHeaders(t *testing.T) {
	t.Parallel()
	base := serveWith(t, func(c *config.Config) { c.Server.MaxHeaderBytes = 4 << 10 })
	req, err := http.NewRequest(http.MethodGet, base+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Filler", strings.Repeat("x", 16<<10)) // net/http allows 4 KiB over the limit
	res, err := testenv.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("16 KiB of headers with max_header_bytes 4096: %d, want 431", res.StatusCode)
	}
}

func TestServerCapsOpenConnections(t *testing.T) {
	t.Parallel()
	base := serveWith(t, func(c *config.Config) { c.Server.MaxConnections = 1 })
	first := dial(t, base)
	if _, err := io.WriteString(first, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if res, err := http.ReadResponse(bufio.NewReader(first), nil); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("first connection: %v %v", res, err)
	}
	// The second connection is not served while the first is open.
	second := dial(t, base)
	if _, err := io.WriteString(second, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if err := second.SetReadDeadline(time.Now().Add(300 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(second)
	if _, err := br.Peek(1); err == nil {
		t.Fatal("a second connection was served while max_connections (1) was open")
	}
	first.Close()
	if err := second.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if res, err := http.ReadResponse(br, nil); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("second connection once the first closed: %v %v", res, err)
	}
}

// TestStreamOutlivesTheRequestTimeouts: the live stream lifts its own
// deadlines, so read_timeout and write_timeout do not cut it.
func TestStreamOutlivesTheRequestTimeouts(t *testing.T) {
	t.Parallel()
	const short = 200 * time.Millisecond
	base := serveWith(t, func(c *config.Config) {
		c.Server.ReadTimeout, c.Server.WriteTimeout = config.Duration(short), config.Duration(short)
	})
	token := mintToken(t, base, "alice")
	s := ssetest.Open(t, base+"/v1/me/stream", token)
	s.WantBadge(t, 0)
	time.Sleep(5 * short) // past both timeouts
	id := postShipped(t, base, "alice", "ship-late")
	if _, it := s.Item(t); it.NotificationID != id {
		t.Fatalf("item %+v, want the notification %s", it, id)
	}
}

func TestMetricsTokenAndListener(t *testing.T) {
	t.Parallel()
	scrape := func(t *testing.T, url, token string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := testenv.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode == http.StatusOK && !strings.Contains(string(body), "herald_notifications_accepted_total") {
			t.Fatalf("GET %s: 200 without herald's metrics", url)
		}
		return res.StatusCode
	}
	t.Run("Token", func(t *testing.T) {
		t.Parallel()
		// (config's tests read the token from token_file and token_env.)
		cfg := testConfig(t, "", func(c *config.Config) { c.Metrics = c.Metrics.WithToken("s3cret-scrape") })
		a, base := newHerald(t, cfg, app.Options{})
		runHerald(t, a)
		for token, want := range map[string]int{"": 401, "wrong": 401, "s3cret-scrape": 200} {
			if got := scrape(t, base+"/metrics", token); got != want {
				t.Errorf("GET /metrics with token %q: %d, want %d", token, got, want)
			}
		}
	})
	t.Run("OwnListener", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig(t, "", func(c *config.Config) { c.Metrics.Listen = "127.0.0.1:0" })
		a, base := newHerald(t, cfg, app.Options{})
		if _, err := a.Listen(); err != nil {
			t.Fatal(err)
		}
		runHerald(t, a)
		if got := scrape(t, base+"/metrics", ""); got != http.StatusNotFound {
			t.Errorf("GET /metrics on the API listener: %d, want 404", got)
		}
		if got := scrape(t, "http://"+a.MetricsAddr().String()+"/metrics", ""); got != http.StatusOK {
			t.Errorf("GET /metrics on metrics.listen: %d, want 200", got)
		}
	})
}

// TestOpenFilesLimitCapsConnections: under an open files limit that
// server.max_connections does not fit in, the listener takes what the limit
// leaves after the lanes' sends and the store, so a burst of clients waits
// in the accept queue instead of taking the descriptors the store and the
// providers' connections need; a limit that leaves too few is refused at
// start, naming it.
func TestOpenFilesLimitCapsConnections(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, "", nil)
	sends := 0
	for _, l := range cfg.Lanes {
		sends += l.Concurrency
	}
	t.Run("TooFewIsRefused", func(t *testing.T) {
		t.Parallel()
		_, err := app.New(context.Background(), testConfig(t, "", nil), app.Options{OpenFiles: 64, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err == nil || !strings.Contains(err.Error(), "open files limit (64)") {
			t.Fatalf("New under an open files limit of 64: %v, want the limit named", err)
		}
	})
	t.Run("ListenerTakesWhatIsLeft", func(t *testing.T) {
		t.Parallel()
		const left = 16
		var logs testenv.Buffer
		a, base := newHerald(t, cfg, app.Options{OpenFiles: uint64(sends + 64 + left), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		runHerald(t, a)
		if !strings.Contains(logs.String(), "connections="+strconv.Itoa(left)) {
			t.Errorf("no warning of the lowered cap in the log:\n%s", logs.String())
		}
		held := make([]net.Conn, left)
		for i := range held {
			held[i] = dial(t, base)
			if _, err := io.WriteString(held[i], "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			if res, err := http.ReadResponse(bufio.NewReader(held[i]), nil); err != nil || res.StatusCode != http.StatusOK {
				t.Fatalf("connection %d: %v %v", i, res, err)
			}
		}
		extra := dial(t, base)
		if _, err := io.WriteString(extra, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		if err := extra.SetReadDeadline(time.Now().Add(300 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(extra)
		if _, err := br.Peek(1); err == nil {
			t.Fatalf("connection %d was served with %d open under the open files limit", left+1, left)
		}
		held[0].Close()
		if err := extra.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		if res, err := http.ReadResponse(br, nil); err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("the waiting connection once one closed: %v %v", res, err)
		}
	})
}

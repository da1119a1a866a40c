package webhook_test

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"testing"

	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/webhook"
)

// proxyServer is a forward proxy for plain http that answers every request
// itself with 204 (as the receiver would through it) and refuses CONNECT
// with 403; it records the requests it saw.
func proxyServer(t *testing.T) (*url.URL, *recorder) {
	t.Helper()
	var rec recorder
	ts := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		rec.record(r)
		if r.Method == http.MethodConnect {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		if r.URL.Host != "receiver.invalid" {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	u, err := url.Parse(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u, &rec
}

// A receiver reached only through a proxy gets the request through it;
// a proxy that refuses the tunnel of an https request leaves it unsent.
func TestProxy(t *testing.T) {
	t.Run("PlainHTTPGoesThroughTheProxy", func(t *testing.T) {
		t.Parallel()
		proxy, rec := proxyServer(t)
		m := message("msg-proxy")
		out := webhook.New(webhook.Config{URL: "http://receiver.invalid/hook", Timeout: callTimeout, Proxy: http.ProxyURL(proxy)}).
			Send(context.Background(), m)
		wantOutcome(t, out, provider.Accepted)
		assertWireFormat(t, rec.only(t), m)
	})
	t.Run("RefusedTunnelIsNotSent", func(t *testing.T) {
		t.Parallel()
		proxy, rec := proxyServer(t)
		out := webhook.New(webhook.Config{URL: "https://receiver.invalid/hook", Timeout: callTimeout, Proxy: http.ProxyURL(proxy)}).
			Send(context.Background(), message("msg-proxy-tls"))
		wantOutcome(t, out, provider.NotSent, "CONNECTION_FAILED")
		if h := rec.only(t); h.method != http.MethodConnect {
			t.Fatalf("proxy saw %s, want only the CONNECT", h.method)
		}
	})
}

// Without Config.Proxy the adapter reads HTTP_PROXY as Go's clients do
// (net/http reads the environment once a process, so a child process of
// this test binary makes the call).
func TestProxyFromTheEnvironment(t *testing.T) {
	if os.Getenv("WEBHOOK_TEST_PROXY_CHILD") == "1" {
		out := webhook.New(webhook.Config{URL: "http://receiver.invalid/hook", Timeout: callTimeout}).
			Send(context.Background(), message("msg-proxy-env"))
		wantOutcome(t, out, provider.Accepted)
		return
	}
	t.Parallel()
	proxy, rec := proxyServer(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestProxyFromTheEnvironment$")
	cmd.Env = append(os.Environ(), "WEBHOOK_TEST_PROXY_CHILD=1", "HTTP_PROXY="+proxy.String(), "http_proxy=", "NO_PROXY=", "no_proxy=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if n := rec.count(); n != 1 {
		t.Fatalf("proxy saw %d requests, want 1", n)
	}
}

package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testmq"
)

// startConfigured starts herald on config, a template whose $LISTEN
// becomes a free address and whose other placeholders are replaced as
// oldnew says (strings.NewReplacer's pairs). Read the server's addr after
// it: start moves herald if another process took the port.
func startConfigured(t *testing.T, config string, oldnew ...string) *server {
	t.Helper()
	addr := freeAddr(t)
	cfgPath := filepath.Join(t.TempDir(), "herald.yaml")
	writeFile(t, cfgPath, strings.NewReplacer(append([]string{"$LISTEN", addr}, oldnew...)...).Replace(config))
	srv := newServer(t, cfgPath, addr)
	srv.start()
	return srv
}

// readyConfig runs the rabbitmq transport against $MQ with a simulated
// provider, so a notification is delivered once herald is ready.
const readyConfig = `listen: $LISTEN
database: $DATABASE
transport: rabbitmq
rabbitmq_url: $MQ
api_keys: [{key: shop-key, tenant: shop}]
providers:
  - {name: hook-sim, type: sim, channel: webhook}
kinds:
  - {name: payment.approved, category: transactional, channels: [webhook], templates: {webhook: {title: "Paid", body: "Paid {{.amount}} won"}}}
poll_interval: 100ms
`

// readyz is one answer of GET /readyz.
type readyz struct {
	code        int
	contentType string
	raw         string
	Status      any    `json:"status"` // "ready", or the problem's status code
	Detail      string `json:"detail"`
	Checks      []struct {
		Name   string `json:"name"`
		Status string `json:"status"`
		Reason string `json:"reason"`
	} `json:"checks"`
}

func getReadyz(t *testing.T, addr string) readyz {
	t.Helper()
	resp, err := testenv.HTTP.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET /readyz: read: %v", err)
	}
	r := readyz{code: resp.StatusCode, contentType: resp.Header.Get("Content-Type"), raw: string(raw)}
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("GET /readyz answered %d with a body that is not JSON: %v\n%s", r.code, err, raw)
	}
	return r
}

// failing returns the names of the failing checks.
func (r readyz) failing() []string {
	var out []string
	for _, c := range r.Checks {
		if c.Status != "ok" {
			out = append(out, c.Name)
		}
	}
	return out
}

// rabbitChecks is the readiness check of every lane's relay and consumer.
var rabbitChecks = func() []string {
	var out []string
	for _, l := range readmeLanes {
		out = append(out, "rabbitmq.relay."+l, "rabbitmq.consumer."+l)
	}
	return out
}()

// wantNotReadyForRabbitMQ checks a 503 that names every rabbitmq check and
// only those, as problem+json, with a reason for each.
func wantNotReadyForRabbitMQ(t *testing.T, r readyz) {
	t.Helper()
	if r.code != http.StatusServiceUnavailable || r.contentType != "application/problem+json" {
		t.Fatalf("readyz answered %d %s, want 503 application/problem+json:\n%s", r.code, r.contentType, r.raw)
	}
	failing := r.failing()
	if strings.Join(failing, " ") != strings.Join(rabbitChecks, " ") {
		t.Errorf("failing checks %v, want exactly %v:\n%s", failing, rabbitChecks, r.raw)
	}
	for _, name := range rabbitChecks {
		if !strings.Contains(r.Detail, name) {
			t.Errorf("detail %q does not name %s", r.Detail, name)
		}
	}
	for _, c := range r.Checks {
		if c.Status != "ok" && c.Reason == "" {
			t.Errorf("check %s fails without a reason:\n%s", c.Name, r.raw)
		}
	}
}

// TestReadyzReflectsRabbitMQ: with transport rabbitmq, /readyz is 200 only
// while every lane's relay publisher and consumer is connected (bug 3 of
// issue 15: a wrong host in rabbitmq_url left notifications PENDING while
// /readyz said 200); the 503 names each failing check with its reason and
// no password. /healthz stays 200 throughout.
func TestReadyzReflectsRabbitMQ(t *testing.T) {
	t.Parallel()
	start := func(t *testing.T, mq string) *server {
		t.Helper()
		return startConfigured(t, readyConfig, "$DATABASE", "sqlite:"+filepath.Join(t.TempDir(), "herald.db"), "$MQ", mq)
	}
	healthy := func(t *testing.T, srv *server) {
		t.Helper()
		resp, err := testenv.HTTP.Get("http://" + srv.addr + "/healthz")
		if err != nil {
			t.Fatalf("GET /healthz: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("healthz = %d, want 200 (liveness only)", resp.StatusCode)
		}
	}

	t.Run("WrongHostIsNotReady", func(t *testing.T) {
		t.Parallel()
		const password = "s3cr3t-pw"
		srv := start(t, "amqp://guest:"+password+"@127.0.0.1:1/")
		// Wait until every component has failed a try (a reason other than
		// "not connected yet"), so the answer shows why.
		var r readyz
		testenv.WaitFor(t, "readyz to give each rabbitmq check's connect error", 30*time.Second, func() bool {
			r = getReadyz(t, srv.addr)
			if r.code == http.StatusOK {
				t.Fatalf("readyz is 200 with the broker unreachable:\n%s", r.raw)
			}
			for _, c := range r.Checks {
				if strings.HasPrefix(c.Name, "rabbitmq.") && !strings.Contains(c.Reason, "connection refused") {
					return false
				}
			}
			return len(r.Checks) > 0
		})
		wantNotReadyForRabbitMQ(t, r)
		if strings.Contains(r.raw, password) {
			t.Errorf("readyz shows the broker's password:\n%s", r.raw)
		}
		if !strings.Contains(r.raw, "127.0.0.1:1") {
			t.Errorf("readyz does not say which broker it cannot reach:\n%s", r.raw)
		}
		healthy(t, srv)
		if code := srv.stop(60 * time.Second); code != 0 {
			t.Fatalf("herald exited %d after SIGTERM:\n%s", code, srv.tail())
		}
	})

	t.Run("RealBrokerLostAndBack", func(t *testing.T) {
		t.Parallel()
		mq := testmq.VHost(t)
		vhost := testmq.VHostOf(mq)
		user := "guest"
		if u, err := url.Parse(mq); err == nil && u.User != nil && u.User.Username() != "" {
			user = u.User.Username()
		}
		srv := start(t, mq)
		var r readyz
		testenv.WaitFor(t, "readyz 200 on a fresh vhost", 30*time.Second, func() bool {
			r = getReadyz(t, srv.addr)
			return r.code == http.StatusOK
		})
		if r.Status != "ready" || len(r.Checks) != 1+len(rabbitChecks) || len(r.failing()) != 0 {
			t.Errorf("ready answer lists %v, want store and every rabbitmq check ok:\n%s", r.Checks, r.raw)
		}

		// Cut every connection and keep herald from reconnecting (its user
		// loses the vhost), so the 503 lasts until the test lets it back.
		testmq.Ctl(t, "clear_permissions", "-p", vhost, user)
		testmq.CloseConnections(t, mq)
		testenv.WaitFor(t, "readyz 503 after the broker closed every connection", 30*time.Second, func() bool {
			r = getReadyz(t, srv.addr)
			return len(r.failing()) == len(rabbitChecks)
		})
		wantNotReadyForRabbitMQ(t, r)
		healthy(t, srv)

		testmq.Ctl(t, "set_permissions", "-p", vhost, user, ".*", ".*", ".*")
		testenv.WaitFor(t, "readyz 200 once herald reconnected", 30*time.Second, func() bool {
			r = getReadyz(t, srv.addr)
			return r.code == http.StatusOK
		})
		// Ready means it delivers.
		id := mustAccept(t, srv.addr, "shop-key", "pay-1",
			map[string]any{"recipient": "r-1", "event_id": "order-1", "kind": "payment.approved", "params": map[string]any{"amount": 1000}})
		awaitDeliveries(t, srv.addr, "shop-key", id, map[string]string{"webhook": "PROVIDER_ACCEPTED"})
		if code := srv.stop(60 * time.Second); code != 0 {
			t.Fatalf("herald exited %d after SIGTERM:\n%s", code, srv.tail())
		}
	})
}

// Package testmq gives tests a RabbitMQ to work in: the machine's broker
// (HERALD_TEST_RABBITMQ_URL, default amqp://guest:guest@127.0.0.1:5672/),
// with a fresh vhost per test, created with rabbitmqctl and deleted when the
// test ends (see VHost and Main).
//
// When the broker cannot be reached, tests that need it are skipped with a
// one-line reason; with CI=true they fail instead, so a CI job cannot pass by
// skipping everything.
package testmq

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/internal/testenv"
)

// EnvURL names the environment variable that overrides DefaultURL.
const EnvURL = "HERALD_TEST_RABBITMQ_URL"

// DefaultURL is the broker tests use when EnvURL is unset.
const DefaultURL = "amqp://guest:guest@127.0.0.1:5672/"

var broker = &testenv.Service{
	Name: "RabbitMQ", EnvURL: EnvURL, DefaultURL: DefaultURL,
	Probe: func(u string) error {
		conn, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
		if err == nil {
			conn.Close()
		}
		return err
	},
}

// Require returns BaseURL if the broker answers. Otherwise it ends the test:
// t.Skip, or t.Fatal when the environment has CI=true. The broker is probed
// once per test binary.
func Require(t testing.TB) string {
	t.Helper()
	return broker.Require(t)
}

// VHost creates a fresh vhost on the broker, grants the URL's user every
// permission on it, and returns the URL of that vhost. It is deleted (with
// everything in it) when the test ends, or, in a package whose TestMain
// runs Main, with the next vhost created or when the tests end.
//
// Each rabbitmqctl call boots an Erlang VM, about a second of CPU: three
// per test (add, permissions, delete) were three quarters of the
// broker/rabbitmq package's CPU. So the creation and the permissions are
// one call (rabbitmqctl eval), and under Main the deletion rides on the
// next creation.
func VHost(t testing.TB) string {
	t.Helper()
	base := Require(t)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("testmq: %s is not a URL: %v", EnvURL, err)
	}
	user := "guest"
	if u.User != nil && u.User.Username() != "" {
		user = u.User.Username()
	}
	name := "herald_test_" + testenv.RandomSuffix()
	gone := vhosts.take()
	if out, err := ctl("eval", deleteExpr(gone)+addExpr(name, user)); err != nil {
		vhosts.put(gone...)
		t.Fatalf("testmq: create vhost %s: %v\n%s", name, err, out)
	}
	t.Cleanup(func() {
		if vhosts.later(name) {
			return
		}
		if out, err := ctl("eval", deleteExpr([]string{name})+"ok."); err != nil {
			t.Errorf("testmq: cleanup: delete vhost %s: %v\n%s", name, err, out)
		}
	})
	u.Path = "/" + name
	u.RawPath = ""
	return u.String()
}

// Main runs a package's tests (call it from TestMain) with the deletion
// of each test's vhost put off to the next VHost call, which deletes it in
// its own rabbitmqctl call, and the last ones deleted when the tests end.
func Main(m *testing.M) int {
	vhosts.mu.Lock()
	vhosts.deferring = true
	vhosts.mu.Unlock()
	code := m.Run()
	if gone := vhosts.take(); len(gone) > 0 {
		if out, err := ctl("eval", deleteExpr(gone)+"ok."); err != nil {
			fmt.Fprintf(os.Stderr, "testmq: delete vhosts %v: %v\n%s", gone, err, out)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// vhosts are the vhosts of ended tests that wait for deletion (Main).
var vhosts pending

type pending struct {
	mu        sync.Mutex
	deferring bool
	names     []string
}

// later puts name's deletion off when Main runs the tests.
func (p *pending) later(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.deferring {
		p.names = append(p.names, name)
	}
	return p.deferring
}

func (p *pending) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	names := p.names
	p.names = nil
	return names
}

func (p *pending) put(names ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.names = append(p.names, names...)
}

// addExpr and deleteExpr are Erlang for rabbitmqctl eval: the broker's own
// functions behind add_vhost, set_permissions and delete_vhost. Names and
// the user are the package's own ([a-z0-9_]) or the URL's user, quoted
// as binaries.
func addExpr(name, user string) string {
	return fmt.Sprintf(`ok = rabbit_vhost:add(%[1]s, <<"herald-test">>), `+
		`ok = rabbit_auth_backend_internal:set_permissions(%[2]s, %[1]s, <<".*">>, <<".*">>, <<".*">>, <<"herald-test">>).`,
		erlBinary(name), erlBinary(user))
}

func deleteExpr(names []string) string {
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "rabbit_vhost:delete(%s, <<\"herald-test\">>), ", erlBinary(n))
	}
	return b.String()
}

// erlBinary quotes s as an Erlang binary literal.
func erlBinary(s string) string {
	return `<<"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `">>`
}

// VHostOf returns the vhost named in an amqp URL.
func VHostOf(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Path == "" || u.Path == "/" {
		return "/"
	}
	return strings.TrimPrefix(u.Path, "/")
}

// Channel dials rawURL and returns a channel on that connection, which is
// closed when the test ends.
func Channel(t testing.TB, rawURL string) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(rawURL)
	if err != nil {
		t.Fatalf("testmq: dial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("testmq: open a channel: %v", err)
	}
	return ch
}

// CloseConnections force-closes every client connection to the vhost of
// rawURL, as a broker restart or a network cut would, and leaves the other
// vhosts (other tests) alone.
func CloseConnections(t testing.TB, rawURL string) {
	t.Helper()
	Ctl(t, "close_all_connections", "-p", VHostOf(rawURL), "herald test: simulated broker restart")
}

// Ctl runs rabbitmqctl with args and fails the test on error.
func Ctl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := ctl(args...)
	if err != nil {
		t.Fatalf("testmq: rabbitmqctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func ctl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", append([]string{"-q"}, args...)...).CombinedOutput()
	return string(out), err
}

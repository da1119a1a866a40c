// Package testmq gives tests a RabbitMQ to work in: the machine's broker
// (HERALD_TEST_RABBITMQ_URL, default amqp://guest:guest@127.0.0.1:5672/),
// with a fresh vhost per test, created with rabbitmqctl and deleted when the
// test ends.
//
// When the broker cannot be reached, tests that need it are skipped with a
// one-line reason; with CI=true they fail instead, so a CI job cannot pass by
// skipping everything.
package testmq

import (
	"context"
	"net/url"
	"os/exec"
	"strings"
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
// everything in it) when the test ends.
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
	Ctl(t, "add_vhost", name)
	t.Cleanup(func() {
		if out, err := ctl("delete_vhost", name); err != nil {
			t.Errorf("testmq: cleanup: delete_vhost %s: %v\n%s", name, err, out)
		}
	})
	Ctl(t, "set_permissions", "-p", name, user, ".*", ".*", ".*")
	u.Path = "/" + name
	u.RawPath = ""
	return u.String()
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

package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/config"
)

// TestDevConfigListensOnLoopbackOnly: without a config file herald runs
// the development config, whose API key is public; it refuses a listen
// address other than loopback unless HERALD_DEV_ALLOW_REMOTE=1.
func TestDevConfigListensOnLoopbackOnly(t *testing.T) {
	t.Parallel()
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	for _, c := range []struct {
		name   string
		getenv func(string) string
		ok     bool
	}{
		{"Default", env(), true},
		{"Localhost", env(config.EnvListen, "localhost:9000"), true},
		{"IPv6Loopback", env(config.EnvListen, "[::1]:9000"), true},
		{"EveryInterface", env(config.EnvListen, "0.0.0.0:8080"), false},
		{"EmptyHost", env(config.EnvListen, ":8080"), false},
		{"AnAddress", env(config.EnvListen, "10.1.2.3:8080"), false},
		{"AllowedOnPurpose", env(config.EnvListen, "0.0.0.0:8080", config.EnvDevAllowRemote, "1"), true},
	} {
		_, err := config.Load("", c.getenv)
		if (err == nil) != c.ok {
			t.Errorf("%s: Load = %v, want ok %v", c.name, err, c.ok)
		}
		if err != nil && (strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), config.EnvDevAllowRemote)) {
			t.Errorf("%s: the error is not one line naming %s: %q", c.name, config.EnvDevAllowRemote, err)
		}
	}
	// A config file may listen anywhere.
	path := writeFile(t, "listen: 0.0.0.0:8080\napi_keys: [{key: k, tenant: t}]\n")
	if _, err := config.Load(path, noEnv); err != nil {
		t.Errorf("a config file listening on 0.0.0.0: %v", err)
	}
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"sqlite:./herald.db", "sqlite:./herald.db"},
		{"postgres://herald:s3cret@db:5432/herald?sslmode=require", "postgres://herald:xxxxx@db:5432/herald?sslmode=require"},
		{"postgres://herald@db/herald?password=s3cret&sslmode=disable", "postgres://herald@db/herald?password=xxxxx&sslmode=disable"},
		{"postgres://db/herald?sslpassword=s3cret&sslkey=/k.pem", "postgres://db/herald?sslpassword=xxxxx&sslkey=/k.pem"},
		{"postgress://herald:s3cret@db/herald", "postgress://herald:xxxxx@db/herald"},
		{"herald:s3cret@db/herald", "herald:xxxxx@db/herald"},
		{"host=db user=herald password=s3cret sslpassword='a b'", "host=db user=herald password=xxxxx sslpassword=xxxxx"},
		{"postgres://herald:s3cret@db:bad-port/herald?password=s3cret", "postgres://herald:xxxxx@db:bad-port/herald?password=xxxxx"},
	} {
		got := config.RedactURL(c.in)
		if got != c.want || strings.Contains(got, "s3cret") {
			t.Errorf("RedactURL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	// A mistyped scheme's error does not echo the password either, for
	// the database or the broker.
	for _, yaml := range []string{
		"database: postgress://herald:s3cret@db/herald?password=s3cret\n",
		"transport: rabbitmq\nrabbitmq_url: amqq://herald:s3cret@mq:5672/\n",
	} {
		path := writeFile(t, yaml+"api_keys: [{key: k, tenant: t}]\n")
		if _, err := config.Load(path, noEnv); err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Load of a mistyped scheme = %v, want an error without the password", err)
		}
	}
	// URLSecrets finds each, for hiding them in an error's text.
	got := config.URLSecrets("postgres://herald:pw1@db/herald?password=pw%202&sslpassword=pw3")
	if strings.Join(got, ",") != "pw1,pw%202,pw 2,pw3" {
		t.Errorf("URLSecrets = %q, want pw1, pw%%202 (and unescaped), pw3", got)
	}
}

func TestHardeningSettings(t *testing.T) {
	t.Parallel()
	c, err := config.Load(writeFile(t, minimal), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := config.Server{
		ReadHeaderTimeout: config.Duration(10 * time.Second), ReadTimeout: config.Duration(30 * time.Second),
		WriteTimeout: config.Duration(time.Minute), IdleTimeout: config.Duration(2 * time.Minute),
		MaxHeaderBytes: 64 << 10, MaxConnections: 4096,
	}
	if c.Server != want {
		t.Errorf("server defaults %+v, want %+v", c.Server, want)
	}
	if c.Metrics.Listen != "" || c.Metrics.Token() != "" || c.Metrics.RefreshInterval.D() != 15*time.Second || c.SendAtHorizon.D() != 366*24*time.Hour {
		t.Errorf("metrics %+v, send_at_horizon %s: want the API listener, no token, 15s, 366 days", c.Metrics, c.SendAtHorizon.D())
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "m.token"), []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, yaml, err string
		getenv          func(string) string
	}{
		{"TokenFile", "metrics: {token_file: " + filepath.Join(dir, "m.token") + "}\n", "", noEnv},
		{"TokenEnv", "metrics: {token_env: SCRAPE}\n", "", func(k string) string { return map[string]string{"SCRAPE": "tok"}[k] }},
		{"TokenEnvUnset", "metrics: {token_env: SCRAPE}\n", "metrics: the token file or variable is empty", noEnv},
		{"BothTokens", "metrics: {token_env: A, token_file: b}\n", "at most one of token_file and token_env", noEnv},
		{"MissingTokenFile", "metrics: {token_file: nope}\n", "metrics.token_file", noEnv},
		{"BadMetricsListen", "metrics: {listen: nope}\n", "metrics.listen", noEnv},
		{"TinyHeaders", "server: {max_header_bytes: 100}\n", "server.max_header_bytes", noEnv},
		{"NegativeTimeout", "server: {write_timeout: -1s}\n", "server.write_timeout", noEnv},
		{"NoConnections", "server: {max_connections: -1}\n", "server.max_connections", noEnv},
	} {
		c, err := config.Load(writeFile(t, minimal+tc.yaml), tc.getenv)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.err == "" && c.Metrics.Token() != "tok":
			t.Errorf("%s: token %q, want tok", tc.name, c.Metrics.Token())
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: Load = %v, want an error naming %q", tc.name, err, tc.err)
		}
	}
}

package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// The hardening settings (issue 13; docs/hardening.md for users): the HTTP
// server's timeouts and limits, where /metrics is served and who may read
// it, how far ahead a notification may be scheduled, and the rule that the
// built-in development config, with its well-known API key, listens on
// loopback only.

// EnvDevAllowRemote, set to 1, lets the built-in development config listen
// on an address other than loopback (HERALD_LISTEN=0.0.0.0:8080 without a
// config file), dev-key and all. Not needed with a config file.
const EnvDevAllowRemote = "HERALD_DEV_ALLOW_REMOTE"

// Server sets the HTTP server's timeouts and limits. Zero fields take the
// defaults below; the live stream GET /v1/me/stream is exempt from
// read_timeout and write_timeout (it moves its own write deadline on).
type Server struct {
	// ReadHeaderTimeout bounds reading a request's headers. Defaults to 10 seconds.
	ReadHeaderTimeout Duration `yaml:"read_header_timeout"`
	// ReadTimeout bounds reading a whole request, body included: a client
	// that trickles its body is cut off. Defaults to 30 seconds.
	ReadTimeout Duration `yaml:"read_timeout"`
	// WriteTimeout bounds a request from the end of its headers to the end
	// of its answer. Defaults to 60 seconds.
	WriteTimeout Duration `yaml:"write_timeout"`
	// IdleTimeout closes a keep-alive connection idle this long. Defaults
	// to 120 seconds.
	IdleTimeout Duration `yaml:"idle_timeout"`
	// MaxHeaderBytes bounds the request line and headers. Defaults to 65536
	// (64 KiB).
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// MaxConnections caps the open connections of the API listener (and
	// of the metrics listener, each its own); more wait in the kernel's
	// accept queue. Defaults to 4096.
	MaxConnections int `yaml:"max_connections"`
}

// MetricsConfig says where GET /metrics is served and who may read it.
type MetricsConfig struct {
	// Listen, when set, serves /metrics on this host:port of its own
	// instead of on the API listener (which then has no /metrics). No
	// default: on the API listener.
	Listen string `yaml:"listen"`
	// TokenFile (relative to the config file's directory) or TokenEnv (the
	// name of an environment variable) holds a bearer token that a scrape
	// must send (Authorization: Bearer <token>); at most one of them. No
	// default: no token.
	TokenFile string `yaml:"token_file"`
	TokenEnv  string `yaml:"token_env"`
	// RefreshInterval is how often the leader recomputes the gauges that
	// read the store (the outbox backlog, the last reconciliation); a
	// scrape serves them from memory. Defaults to 15 seconds.
	RefreshInterval Duration `yaml:"refresh_interval"`

	// token is read from TokenFile or TokenEnv by Load.
	token string
}

// Token is the bearer token a scrape of /metrics must send; empty: none.
func (m MetricsConfig) Token() string { return m.token }

// WithToken returns m requiring token (tests and library callers that
// build a Config without Load).
func (m MetricsConfig) WithToken(token string) MetricsConfig {
	m.token = token
	return m
}

func (s *Server) withDefaults() {
	def(&s.ReadHeaderTimeout, 10*time.Second)
	def(&s.ReadTimeout, 30*time.Second)
	def(&s.WriteTimeout, 60*time.Second)
	def(&s.IdleTimeout, 120*time.Second)
	if s.MaxHeaderBytes == 0 {
		s.MaxHeaderBytes = 64 << 10
	}
	if s.MaxConnections == 0 {
		s.MaxConnections = 4096
	}
}

// hardeningDefaults fills the defaults of this file's settings.
func (c *Config) hardeningDefaults() {
	c.Server.withDefaults()
	def(&c.Metrics.RefreshInterval, 15*time.Second)
	def(&c.SendAtHorizon, 366*24*time.Hour)
}

// validateHardening checks this file's settings.
func (c *Config) validateHardening() error {
	if err := positive([]setting{
		{"server.read_header_timeout", c.Server.ReadHeaderTimeout}, {"server.read_timeout", c.Server.ReadTimeout},
		{"server.write_timeout", c.Server.WriteTimeout}, {"server.idle_timeout", c.Server.IdleTimeout},
		{"metrics.refresh_interval", c.Metrics.RefreshInterval}, {"send_at_horizon", c.SendAtHorizon},
	}); err != nil {
		return err
	}
	if c.Server.MaxHeaderBytes < 4<<10 || c.Server.MaxHeaderBytes > 1<<20 {
		return fmt.Errorf("config: server.max_header_bytes: must be 4096..1048576, got %d", c.Server.MaxHeaderBytes)
	}
	if c.Server.MaxConnections < 1 {
		return fmt.Errorf("config: server.max_connections: must be at least 1, got %d", c.Server.MaxConnections)
	}
	if l := c.Metrics.Listen; l != "" {
		if _, _, err := net.SplitHostPort(l); err != nil {
			return fmt.Errorf("config: metrics.listen: %q is not host:port", l)
		}
	}
	if c.Dev && !c.devAllowRemote && !Loopback(c.Listen) {
		return fmt.Errorf("config: listen: %s is not a loopback address, and without a config file herald runs the development config "+
			"whose API key (%s) is public; give a --config file, or set %s=1 to expose it anyway", c.Listen, DevAPIKey, EnvDevAllowRemote)
	}
	return nil
}

// Loopback reports whether the host:port addr listens on loopback only:
// localhost or a loopback IP (an empty host is every interface).
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// readHardening reads the environment and files this file's settings
// name.
func (c *Config) readHardening(dir string, getenv func(string) string) error {
	if getenv == nil {
		getenv = os.Getenv
	}
	c.devAllowRemote = getenv(EnvDevAllowRemote) == "1"
	if err := c.readOperatorKeys(dir, getenv); err != nil {
		return err
	}
	m := &c.Metrics
	switch {
	case m.TokenFile != "" && m.TokenEnv != "":
		return errors.New("config: metrics: at most one of token_file and token_env")
	case m.TokenFile != "":
		raw, err := readBeside(dir, m.TokenFile)
		if err != nil {
			return fmt.Errorf("config: metrics.token_file: %w", err)
		}
		m.token = strings.TrimSpace(string(raw))
	case m.TokenEnv != "":
		m.token = getenv(m.TokenEnv)
	default:
		return nil
	}
	if m.token == "" {
		return errors.New("config: metrics: the token file or variable is empty")
	}
	return nil
}

// URLSecrets returns the passwords a database setting or broker URL holds
// (RedactURL's), for hiding them in text that may quote them: an error.
func URLSecrets(raw string) []string {
	var out []string
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			out = append(out, pw)
		}
	}
	for _, m := range secretParam.FindAllStringSubmatch(raw, -1) {
		v := strings.Trim(m[2], "'")
		if v == "" {
			continue
		}
		out = append(out, v) // as written, and unescaped when that differs
		if uv, err := url.QueryUnescape(v); err == nil && uv != v {
			out = append(out, uv)
		}
	}
	return out
}

var (
	// secretParam finds password=… and sslpassword=… in a key=value
	// connection string or a query.
	secretParam = regexp.MustCompile(`(?i)\b((?:ssl)?password\s*=\s*)('[^']*'|[^\s&]*)`)
	// userinfoPassword finds user:password@ in a URL-like string.
	userinfoPassword = regexp.MustCompile(`^((?:[a-zA-Z][a-zA-Z0-9+.-]*:)?//)?([^:/@\s]*):([^@\s]*)@`)
)

// RedactURL returns a database setting or a broker URL fit to print: a
// URL's userinfo password and every password= or sslpassword= query
// parameter become "xxxxx". A sqlite: path is returned as it is; a string
// that is no URL (a mistyped scheme, a key=value string) is redacted by
// pattern.
func RedactURL(database string) string {
	if strings.HasPrefix(database, "sqlite:") {
		return database
	}
	u, err := url.Parse(database)
	if err != nil || u.Scheme == "" || u.Opaque != "" {
		s := secretParam.ReplaceAllString(database, "${1}xxxxx")
		return userinfoPassword.ReplaceAllString(s, "${1}${2}:xxxxx@")
	}
	// The query keeps its order; only the secrets' values change.
	pairs := strings.Split(u.RawQuery, "&")
	for i, pair := range pairs {
		k, _, _ := strings.Cut(pair, "=")
		if k, err := url.QueryUnescape(k); err == nil && (strings.EqualFold(k, "password") || strings.EqualFold(k, "sslpassword")) {
			pairs[i] = k + "=xxxxx"
		}
	}
	u.RawQuery = strings.Join(pairs, "&")
	return u.Redacted()
}

// readOperatorKeys adds the keys in operator_keys_file and
// operator_keys_env to OperatorKeys. A file or variable named but empty
// is an error: a deployment that meant to give keys would otherwise start
// with none and refuse its operator.
func (c *Config) readOperatorKeys(dir string, getenv func(string) string) error {
	if c.OperatorKeysFile != "" {
		raw, err := readBeside(dir, c.OperatorKeysFile)
		if err != nil {
			return fmt.Errorf("config: operator_keys_file: %w", err)
		}
		keys := strings.Fields(string(raw))
		if len(keys) == 0 {
			return errors.New("config: operator_keys_file: the file holds no key")
		}
		c.OperatorKeys = append(c.OperatorKeys, keys...)
	}
	if c.OperatorKeysEnv != "" {
		keys := strings.Fields(getenv(c.OperatorKeysEnv))
		if len(keys) == 0 {
			return fmt.Errorf("config: operator_keys_env: %s is not set or empty", c.OperatorKeysEnv)
		}
		c.OperatorKeys = append(c.OperatorKeys, keys...)
	}
	return nil
}

// readBeside reads the file at path, relative to dir (the config file's
// directory; "" for the working directory) unless absolute.
func readBeside(dir, path string) ([]byte, error) {
	if !filepath.IsAbs(path) && dir != "" {
		path = filepath.Join(dir, path)
	}
	return os.ReadFile(path)
}

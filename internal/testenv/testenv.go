// Package testenv is what herald's tests share. For the helpers of outside
// servers (testpg, testmq): one probe per test binary, and the rule that a
// test which needs an unreachable server skips with a one-line reason — or
// fails, when the environment has CI=true, so a CI run cannot pass by
// skipping. For every test that waits for background work (wait.go): one
// Patience, and waits that fail with what they waited for instead of
// hanging.
package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
)

// Service is a server that tests need.
type Service struct {
	// Name appears in the skip or failure message ("PostgreSQL").
	Name string
	// EnvURL names the environment variable that overrides DefaultURL.
	EnvURL     string
	DefaultURL string
	// Probe connects to url and reports whether the server answers.
	Probe func(url string) error

	once sync.Once
	err  error
}

// URL returns the server's URL from EnvURL or DefaultURL.
func (s *Service) URL() string {
	if u := os.Getenv(s.EnvURL); u != "" {
		return u
	}
	return s.DefaultURL
}

// Require returns URL if the server answers. Otherwise it ends the test:
// t.Skip, or t.Fatal when CI=true. The server is probed once per binary.
func (s *Service) Require(t testing.TB) string {
	t.Helper()
	s.once.Do(func() { s.err = s.Probe(s.URL()) })
	if s.err != nil {
		msg := fmt.Sprintf("%s unreachable at %s (set %s): %s", s.Name, Redact(s.URL()), s.EnvURL,
			strings.ReplaceAll(s.err.Error(), "\n", " "))
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return s.URL()
}

// RandomSuffix returns 12 random hex characters for names of throwaway
// databases, schemas and vhosts.
func RandomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Redact hides the password of a URL.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

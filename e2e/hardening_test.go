package e2e

// Issue 13's findings that only the real command can show: the database
// URL's passwords never printed (the start lines, `herald migrate`, a
// mistyped scheme), and the development config refusing to listen beyond
// loopback.

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/internal/testpg"
)

const dbSecret = "s3cret-db-pw"

// withPasswords returns the PostgreSQL URL u with dbSecret as the userinfo
// password and in password= and sslpassword= (the server trusts the test
// user, so it asks for none).
func withPasswords(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	p.User = url.UserPassword(p.User.Username(), dbSecret)
	q := p.Query()
	q.Set("password", dbSecret)
	q.Set("sslpassword", dbSecret)
	p.RawQuery = q.Encode()
	return p.String()
}

func TestCLINeverPrintsTheDatabasePassword(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	database := withPasswords(t, testpg.Database(t))
	cfg := filepath.Join(dir, "herald.yaml")
	writeFile(t, cfg, "database: "+database+"\nlisten: 127.0.0.1:0\napi_keys: [{key: k, tenant: t}]\n")
	mistyped := filepath.Join(dir, "mistyped.yaml")
	writeFile(t, mistyped, "database: "+strings.Replace(database, "postgres://", "postgress://", 1)+"\napi_keys: [{key: k, tenant: t}]\n")

	r := runCLI(t, dir, "migrate", "--config", cfg)
	if r.code != 0 || !strings.Contains(r.stdout, "xxxxx") {
		t.Fatalf("herald migrate: want exit 0 and the redacted URL, got\n%s", r)
	}
	if strings.Contains(r.String(), dbSecret) {
		t.Errorf("herald migrate printed the database password:\n%s", r)
	}
	r = runCLI(t, dir, "migrate", "--config", mistyped)
	if r.code == 0 || strings.Contains(r.String(), dbSecret) {
		t.Errorf("herald migrate with a mistyped scheme: want an error without the password, got\n%s", r)
	}

	// serve's start lines.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, heraldBinary(t), "serve", "--config", cfg)
	cmd.Dir = dir
	cmd.Env = cleanEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var printed strings.Builder
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		printed.WriteString(sc.Text() + "\n")
		if strings.HasPrefix(sc.Text(), "database ") {
			break
		}
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_, _ = io.Copy(&printed, out)
	_ = cmd.Wait()
	all := printed.String() + stderr.String()
	if !strings.Contains(all, "database postgres://") {
		t.Fatalf("herald serve did not print its database line:\n%s", all)
	}
	if strings.Contains(all, dbSecret) {
		t.Errorf("herald serve printed the database password:\n%s", all)
	}
}

func TestCLIDevConfigRefusesToListenBeyondLoopback(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	run := func(env ...string) cliResult {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, heraldBinary(t), "serve")
		cmd.Dir = dir
		cmd.Env = append(cleanEnv(), env...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		_ = cmd.Run()
		return cliResult{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
	}
	r := run(config.EnvListen + "=0.0.0.0:0")
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if r.code == 0 || len(lines) != 1 || !strings.Contains(lines[0], config.EnvDevAllowRemote) || strings.Contains(r.stdout, "listening") {
		t.Fatalf("herald serve without a config on 0.0.0.0: want a one-line refusal naming %s, got\n%s", config.EnvDevAllowRemote, r)
	}
	if _, err := os.Stat(filepath.Join(dir, "herald.db")); err == nil {
		t.Error("the refused start created a database")
	}
}

// cleanEnv is the environment without HERALD_* overrides.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HERALD_") {
			env = append(env, kv)
		}
	}
	return append(env, "GORACE=atexit_sleep_ms=0")
}

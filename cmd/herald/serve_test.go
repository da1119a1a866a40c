package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// herald serve on a port already taken stops before it opens the
// database: nothing is created or migrated, and the message names the
// address.
func TestServeOnABusyPortWritesNothing(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "herald.db")
	cfg := filepath.Join(dir, "herald.yaml")
	text := "listen: " + busy.Addr().String() + "\ndatabase: 'sqlite:" + dbPath + "'\n"
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errb := cli("serve", "--config", cfg)
	if code == 0 || !strings.Contains(errb, "listen on "+busy.Addr().String()) {
		t.Fatalf("herald serve on a busy port: exit %d, %q; want a failure naming the address", code, errb)
	}
	if _, err := os.Stat(dbPath); !os.IsNotExist(err) {
		t.Fatalf("the database file exists after a serve that could not bind (stat: %v)", err)
	}
}

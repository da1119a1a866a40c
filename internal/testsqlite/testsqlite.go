// Package testsqlite gives tests a migrated SQLite database file without
// migrating it each time: a test binary migrates one database once, and
// every Path is a copy of that file.
//
// A fresh sqlite.Open runs every migration, about 20 ms, and about 340 ms
// under the race detector, which instruments the SQLite engine (a Go
// translation of C) itself. The conformance suite and its erring-store
// runs open hundreds of stores; copying the migrated file instead cut
// that setup to the open's own statements. The tests that start herald in
// their own process (app, intake, cmd/herald, apikeys, watchdog,
// ratelimit) name a Path as the config's sqlite:PATH for the same reason:
// app's tests had spent 36% of their CPU migrating. Tests of the
// migrations themselves, and of a database herald creates (e2e's CLI),
// open fresh files as before.
package testsqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/heraldhq/herald/store/sqlite"
)

var template struct {
	once  sync.Once
	image []byte
	err   error
}

// Path returns the path of a migrated database file of its own in
// t.TempDir(), for sqlite.Open (or a config's sqlite:PATH).
func Path(t testing.TB) string {
	t.Helper()
	template.once.Do(func() { template.image, template.err = migrated() })
	if template.err != nil {
		t.Fatalf("testsqlite: %v", template.err)
	}
	path := filepath.Join(t.TempDir(), "herald.db")
	if err := os.WriteFile(path, template.image, 0o600); err != nil {
		t.Fatalf("testsqlite: %v", err)
	}
	return path
}

// migrated migrates a database in a directory of its own and returns the
// file's bytes once the store closed it: its write-ahead log checkpointed
// into the file and removed, so the file alone is the database.
func migrated() ([]byte, error) {
	dir, err := os.MkdirTemp("", "herald-testsqlite-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "herald.db")
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		return nil, fmt.Errorf("migrate the template: %w", err)
	}
	s.Close()
	if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() > 0 {
		return nil, fmt.Errorf("the template's write-ahead log was left with %d bytes after close", fi.Size())
	}
	return os.ReadFile(path)
}

package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/heraldhq/herald/store/sqlite"
)

// A database path is a path, whatever it holds: '#', '?' and '%' are not
// read as a URI's fragment, query or escape (a subtest's t.TempDir holds
// '#', "sqlite#01", and its store was opened at the path cut there).
func TestOpenTakesThePathAsItIs(t *testing.T) {
	for _, name := range []string{"herald#2.db", "what?.db", "100%25.db", "a b%.db"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, name)
			s, err := sqlite.Open(context.Background(), path, sqlite.Options{})
			if err != nil {
				t.Fatalf("open %q: %v", path, err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			if !slices.Contains(names, name) {
				t.Fatalf("the folder holds %q, want the database at %q", names, name)
			}
			for _, n := range names {
				if n != name && n != name+"-wal" && n != name+"-shm" {
					t.Errorf("a file %q beside the database %q", n, name)
				}
			}
		})
	}
}

package migration

import (
	"testing"
	"testing/fstest"
)

func TestList(t *testing.T) {
	t.Parallel()
	file := &fstest.MapFile{Data: []byte("SELECT 1;")}
	t.Run("InVersionOrder", func(t *testing.T) {
		t.Parallel()
		got, err := List(fstest.MapFS{"m/0010_b.sql": file, "m/0002_a.sql": file, "m/9_c.sql": file, "m/README": file}, "m")
		want := []File{{2, "0002_a.sql"}, {9, "9_c.sql"}, {10, "0010_b.sql"}}
		if err != nil || len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
			t.Fatalf("List = %v, %v; want %v", got, err, want)
		}
	})
	for name, fsys := range map[string]fstest.MapFS{
		"NoVersionIsAnError":       {"m/init.sql": file},
		"OneVersionTwiceIsAnError": {"m/0005_a.sql": file, "m/05_b.sql": file},
		"NoMigrationsIsAnError":    {"m/README": file},
		"VersionZeroIsAnError":     {"m/0000_a.sql": file},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got, err := List(fsys, "m"); err == nil {
				t.Fatalf("List = %v, want an error", got)
			}
		})
	}
}

// Package migration reads a store driver's embedded, versioned migrations:
// files NNNN_description.sql, applied in the order of their version
// numbers. Each driver applies them with its own SQL.
package migration

import (
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// File is one migration.
type File struct {
	Version int
	Name    string // file name inside the directory: 0001_init.sql
}

// List returns the .sql files of dir in fsys by version. A name that does not
// start with a version number, or two files with one version, is an error.
func List(fsys fs.FS, dir string) ([]File, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	out := make([]File, 0, len(names))
	for _, name := range names {
		base := path.Base(name)
		num, _, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must start with a version number", base)
		}
		out = append(out, File{Version: v, Name: base})
	}
	slices.SortFunc(out, func(a, b File) int { return a.Version - b.Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("migrations %s and %s have the same version", out[i-1].Name, out[i].Name)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no migrations in %s", dir)
	}
	return out, nil
}

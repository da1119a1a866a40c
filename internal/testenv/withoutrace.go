package testenv

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// withoutRaceEnv marks the child WithoutRace runs a test in.
const withoutRaceEnv = "HERALD_TEST_WITHOUT_RACE_CHILD"

var withoutRace struct {
	once sync.Once
	dir  string
	bin  string
	err  error
	out  []byte
}

// WithoutRace runs the calling top-level test in the package's tests built
// without -race, when this binary was built with it, and reports whether it
// did: the caller then returns at once. It is for tests whose cost is work
// the race detector instruments but cannot bear on: SQLite (a C library
// translated to Go) filling a hundred thousand rows for a query plan, or
// two connections racing on the file's locks. Under -race such a test took
// minutes of CI's fifteen. The test's failure is the child's, with its
// output. A package that calls it runs its tests through Main, which
// removes the built binary.
//
// Building only the driver without instrumentation
// (GOFLAGS=-gcflags=modernc.org/...=-race=false) would cut the SQLite
// conformance suite's CPU sixfold, but it breaks the race detector for
// everything: generic code instantiated in the driver's packages (sync.Map's
// trie among it) is compiled there without instrumentation, and the linker
// keeps one copy of each instantiation for the whole binary, so the
// happens-before edges of every sync.Map are lost and encoding/json's caches
// report data races that are not there (tried on 2026-12-06).
func WithoutRace(t *testing.T) bool {
	t.Helper()
	if !RaceEnabled || os.Getenv(withoutRaceEnv) == "1" {
		return false
	}
	if strings.Contains(t.Name(), "/") {
		t.Fatalf("WithoutRace runs top-level tests only, not %s", t.Name())
	}
	withoutRace.once.Do(func() {
		if withoutRace.dir, withoutRace.err = os.MkdirTemp("", "herald-norace-"); withoutRace.err != nil {
			return
		}
		withoutRace.bin = filepath.Join(withoutRace.dir, "pkg.test")
		// The test's working folder is its package's.
		withoutRace.out, withoutRace.err = exec.Command("go", "test", "-c", "-o", withoutRace.bin, ".").CombinedOutput()
	})
	if withoutRace.err != nil {
		t.Fatalf("build the package's tests without -race: %v\n%s", withoutRace.err, withoutRace.out)
	}
	args := []string{"-test.run=^" + regexp.QuoteMeta(t.Name()) + "$", "-test.count=1", "-test.v"}
	if d, ok := t.Deadline(); ok {
		args = append(args, "-test.timeout="+time.Until(d).Round(time.Second).String())
	}
	cmd := exec.Command(withoutRace.bin, args...)
	cmd.Env = append(os.Environ(), withoutRaceEnv+"=1")
	out, err := cmd.CombinedOutput()
	switch {
	case err != nil:
		t.Fatalf("%s, run without -race: %v\n%s", t.Name(), err, out)
	case !bytes.Contains(out, []byte("--- PASS: "+t.Name()+" ")) && !bytes.Contains(out, []byte("--- SKIP: "+t.Name()+" ")):
		t.Fatalf("%s, run without -race, did not pass:\n%s", t.Name(), out)
	case bytes.Contains(out, []byte("--- SKIP: "+t.Name()+" ")):
		t.Skipf("skipped without -race:\n%s", out)
	}
	return true
}

// Main runs m and removes what WithoutRace built. Use it as the package's
// TestMain: func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }.
func Main(m *testing.M) int {
	code := m.Run()
	if withoutRace.dir != "" {
		os.RemoveAll(withoutRace.dir)
	}
	return code
}

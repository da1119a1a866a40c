//go:build linux

package sqlite_test

import (
	"context"
	"database/sql"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/heraldhq/herald/store/sqlite"
)

// diskFullEnv names the database file the child of TestPingFailsWhileDiskFull
// works on; the child is this test binary, run again.
const diskFullEnv = "HERALD_TEST_DISK_FULL_DB"

// TestPingFailsWhileDiskFull holds readiness to what it promises: /readyz
// answers 503 while the store cannot be written. A full disk fails every
// write that must grow the file (intake answers 503), but an empty write
// transaction still commits there, since it writes no page. The child
// process stands for the full disk with a file size limit (RLIMIT_FSIZE,
// its own: the other tests run on), fills the database until a write fails,
// then checks that Ping fails too, and that it passes again once the limit
// is lifted, as after space was freed, without reopening the store.
func TestPingFailsWhileDiskFull(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "herald.db")
	cmd := osexec.Command(os.Args[0], "-test.run=^TestHelperDiskFull$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), diskFullEnv+"="+path)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestHelperDiskFull") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// TestHelperDiskFull is the child of TestPingFailsWhileDiskFull.
func TestHelperDiskFull(t *testing.T) {
	path := os.Getenv(diskFullEnv)
	if path == "" {
		t.Skip("the child of TestPingFailsWhileDiskFull")
	}
	ctx := context.Background()
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("ping before the disk fills: %v", err)
	}
	raw, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.SetMaxOpenConns(1)
	if _, err := raw.Exec(`CREATE TABLE filler (b BLOB)`); err != nil {
		t.Fatal(err)
	}

	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	var largest int64
	for _, f := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(f); err == nil && fi.Size() > largest {
			largest = fi.Size()
		}
	}
	full := old
	full.Cur = uint64(largest) + 256<<10
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &full); err != nil {
		t.Fatal(err)
	}
	// Large rows first, then small ones until not even one page fits.
	for _, size := range []int{65536, 16} {
		filled := false
		for range 1000 {
			if _, err := raw.Exec(`INSERT INTO filler (b) VALUES (randomblob(?))`, size); err != nil {
				t.Logf("the disk is full for %d bytes: %v", size, err)
				filled = true
				break
			}
		}
		if !filled {
			t.Fatalf("no write of %d bytes failed under the file size limit", size)
		}
	}
	if err := s.Ping(ctx); err == nil {
		t.Error("Ping passed while the disk was full: /readyz would say ready while intake answers 503")
	}

	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Errorf("Ping after space was freed: %v", err)
	}
}

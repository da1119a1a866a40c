// Package peakrss reports a benchmark process's own peak resident set to
// benchrun. The peak a parent reads from wait4 is the highest of the
// process and every child it waited for, and the RabbitMQ benchmarks run
// rabbitmqctl (an Erlang VM of some 60 MB) to make their vhosts, which
// would be the figure whatever the benchmark used.
package peakrss

import (
	"os"
	"strconv"
	"syscall"
	"testing"
)

// EnvFile names the file benchrun reads the peak from: the process's own
// peak resident set in bytes, written when its tests end.
const EnvFile = "HERALD_BENCH_RSS_FILE"

// Main runs the tests and benchmarks, then writes the process's own peak
// resident set to EnvFile's file when it is set: a package's TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if path := os.Getenv(EnvFile); path != "" {
		var ru syscall.Rusage
		if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
			_ = os.WriteFile(path, []byte(strconv.FormatInt(ru.Maxrss*1024, 10)), 0o644) // kilobytes on Linux
		}
	}
	os.Exit(code)
}

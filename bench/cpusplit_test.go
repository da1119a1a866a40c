package bench

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// cpuSplit reads, around a run, the CPU time of the benchmark's own
// process, of the PostgreSQL backends connected to its database and of the
// RabbitMQ broker, so a run reports what each costs per row or notification:
// on the shared 2-core machine a figure per second moves with everyone
// else's load, the CPU per item much less. It reads /proc, so it reports
// only on Linux, and only for a server on this machine (localhost in its
// URL); the broker's figure counts whatever else uses the broker meanwhile.
type cpuSplit struct {
	b      *testing.B
	db     string // the run's database URL
	broker int    // the broker's pid; 0 when not found here
	at     [3]float64
}

// startCPUSplit samples now; report samples again and reports the
// differences per item. db is the run's database URL, mq the broker's.
func startCPUSplit(b *testing.B, db, mq string) *cpuSplit {
	c := &cpuSplit{b: b}
	if local(db) {
		c.db = db
	}
	if mq != "" && local(mq) {
		c.broker = brokerPID()
	}
	c.at = c.sample()
	return c
}

// report reports each process's CPU per item as "<who>-µs/<unit>" (herald
// is the benchmark's process, its load generator included).
func (c *cpuSplit) report(items int, unit string) {
	if items <= 0 {
		return
	}
	now := c.sample()
	for i, who := range []string{"herald", "postgres", "rabbitmq"} {
		if now[i] < 0 || c.at[i] < 0 {
			continue
		}
		c.b.ReportMetric(1e6*(now[i]-c.at[i])/float64(items), who+"-µs/"+unit)
	}
}

// sample returns the CPU seconds of the process, the database's backends
// and the broker; -1 for what cannot be read.
func (c *cpuSplit) sample() [3]float64 {
	s := [3]float64{procCPU(os.Getpid()), -1, -1}
	if c.db != "" {
		s[1] = backendsCPU(c.db)
	}
	if c.broker != 0 {
		s[2] = procCPU(c.broker)
	}
	return s
}

// local reports whether a server URL names this machine.
func local(rawURL string) bool {
	u, err := url.Parse(rawURL)
	if err != nil {
		return false
	}
	switch h := u.Hostname(); h {
	case "", "localhost":
		return true
	default:
		ip := net.ParseIP(h)
		return ip != nil && ip.IsLoopback()
	}
}

// procCPU is a process's user and system CPU seconds from /proc, -1 when
// it cannot be read.
func procCPU(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The fields after the command name, which is in parentheses and may
	// hold spaces: state is field 3, utime 14 and stime 15.
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return -1
	}
	user, err1 := strconv.ParseFloat(f[11], 64)
	sys, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return (user + sys) / 100 // USER_HZ is 100 on Linux
}

// backendsCPU is the CPU seconds of the PostgreSQL backends connected to
// db's database (but the one asking), -1 when they cannot be read. A
// backend that ended before the sample is not counted: the pools of the
// runs measured keep theirs.
func backendsCPU(db string) float64 {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		return -1
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	if err != nil {
		return -1
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return -1
	}
	total := 0.0
	for _, pid := range pids {
		if t := procCPU(int(pid)); t >= 0 {
			total += t
		}
	}
	return total
}

// brokerPID finds RabbitMQ's Erlang VM (beam.smp running rabbit) in /proc;
// 0 when there is none.
func brokerPID() int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmd, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		if args := string(cmd); strings.Contains(args, "beam") && strings.Contains(args, "rabbit") {
			pid, _ := strconv.Atoi(filepath.Base(d))
			return pid
		}
	}
	return 0
}

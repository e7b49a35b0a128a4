// Package userprog holds what the two programs of BenchmarkUserProgram
// share: the row type a user would write for the benchmark's table, and the
// report each prints when it holds every row. The programs are built and
// run as processes of their own, as a user runs theirs, so that start-up,
// exit and RSS are the process's, not a test binary's.
package userprog

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// Account is one row of the benchmark's table (bench's scale table:
// int, text, numeric, timestamptz, jsonb, a text TOASTed in 1 row of 50).
type Account struct {
	ID     int64           `db:"id"`
	Org    string          `db:"org"`
	N      int32           `db:"n"`
	Amount pgtype.Numeric  `db:"amount"`
	At     time.Time       `db:"at"`
	Attrs  json.RawMessage `db:"attrs"`
	Body   string          `db:"body"`
}

// Main runs a program's body: run with the exec clock and the two
// arguments every program takes (a connection string and a table), exiting
// 2 on a wrong command line and 1, the error on stderr, if run fails.
func Main(name string, run func(clk Clock, conn, table string) error) {
	clk := NewClock()
	if len(os.Args) != 3 {
		fmt.Fprintf(os.Stderr, "usage: %s <conn string> <table>\n", name)
		os.Exit(2)
	}
	if err := run(clk, os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

// ExecEnv names the environment variable through which the benchmark
// passes the moment it started the process (Unix nanoseconds), so that a
// program can say how long after its exec each of its steps ended.
const ExecEnv = "USERPROG_EXEC_AT"

// Clock reports durations since the process's exec.
type Clock struct{ exec time.Time }

// NewClock reads the exec moment from ExecEnv (the process's own start
// when unset).
func NewClock() Clock {
	ns, err := strconv.ParseInt(os.Getenv(ExecEnv), 10, 64)
	if err != nil {
		return Clock{exec: time.Now()}
	}
	return Clock{exec: time.Unix(0, ns)}
}

// Since is the time since exec, in seconds.
func (c Clock) Since(t time.Time) float64 { return t.Sub(c.exec).Seconds() }

// Report prints "done rows=N rss-MB=R heap-MB=H" followed by the steps
// given (name=seconds since exec): the line the benchmark waits for. RSS
// is the kernel's count at this moment (VmRSS), nothing freed first; the
// heap is the bytes in live and not yet swept spans (HeapInuse).
func Report(w io.Writer, rows int, steps ...any) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	line := fmt.Sprintf("done rows=%d rss-MB=%.1f heap-MB=%.1f", rows, RSSMB(), float64(ms.HeapInuse)/1e6)
	for i := 0; i+1 < len(steps); i += 2 {
		line += fmt.Sprintf(" %v=%.4f", steps[i], steps[i+1])
	}
	fmt.Fprintln(w, line)
}

// RSSMB is the process's resident set (VmRSS) in MB; 0 where there is no
// /proc.
func RSSMB() float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb * 1024 / 1e6
		}
	}
	return 0
}

package servers

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// InCI reports whether the tests run under CI (CI=true), where a server that
// cannot start fails the test instead of skipping it.
func InCI() bool {
	v, _ := strconv.ParseBool(os.Getenv("CI"))
	return v
}

// Unavailable ends a test whose server cannot be had: under CI it fails,
// elsewhere it skips with a message that should say how to get the server.
func Unavailable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		tb.Fatalf("server unavailable (CI=true, so this fails instead of skipping): %s", msg)
	}
	tb.Skipf("server unavailable: %s", msg)
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago, for
// a server the caller starts soon after. It is drawn at random from below
// the kernel's ephemeral range (ip_local_port_range): a port handed out by
// binding port 0 is an ephemeral one, which any outgoing connection of any
// process (a route between two nodes, a client) may take as its local port
// before the server binds it — a 3-node NATS cluster in CI failed with
// "listen tcp 127.0.0.1:41661: bind: address already in use" that way.
// Below that range only another explicit bind can collide: a random draw
// out of ~20,000 ports makes that rare, and claimPort keeps this
// harness's processes from drawing one another's ports.
func FreePort(tb testing.TB) int {
	tb.Helper()
	port, err := freePort()
	if err != nil {
		tb.Fatalf("harness: pick a free port: %v", err)
	}
	return port
}

// freePort is FreePort for callers without a testing.TB.
func freePort() (int, error) {
	lo, hi := 10000, ephemeralLow()-1
	for range 200 {
		if hi <= lo {
			break
		}
		port := lo + rand.IntN(hi-lo+1)
		if !claimPort(port) {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			l.Close()
			return port, nil
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// portHold is how long a port drawn by FreePort stays claimed.
const portHold = 2 * time.Minute

// claimPort claims port for portHold against every process that draws
// ports here (a file per port in a directory under os.TempDir(), created
// exclusively), this one included. A port is free when drawn, but the
// server that will bind it may start a second later (a cluster's last
// node): two test processes running side by side (go test runs packages
// in parallel) drew the same port in that window, and one node failed
// with "bind: address already in use". A claim older than portHold is
// stale and taken over; one rename wins it.
func claimPort(port int) bool {
	dir := filepath.Join(os.TempDir(), "dbinformer-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return true // no registry: the probe alone decides, as before
	}
	path := filepath.Join(dir, strconv.Itoa(port))
	create := func() bool {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
		if err != nil {
			return false
		}
		f.Close()
		return true
	}
	if create() {
		return true
	}
	fi, err := os.Stat(path)
	if err != nil || time.Since(fi.ModTime()) < portHold {
		return false
	}
	stale := fmt.Sprintf("%s.stale.%d.%d", path, os.Getpid(), rand.Int64())
	if os.Rename(path, stale) != nil {
		return false // another process took it over first
	}
	os.Remove(stale)
	return create()
}

// ephemeralLow is the lowest port of the kernel's ephemeral range, 32768
// (Linux's default) where it cannot be read.
func ephemeralLow() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(data)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 10000 {
				return v
			}
		}
	}
	return 32768
}

// LogBuffer collects a server's log lines and prints them through the test's
// log when, and only when, the test failed.
type LogBuffer struct {
	mu   sync.Mutex
	name string
	buf  []byte
}

// NewLogBuffer returns a buffer that dumps itself at cleanup if tb failed.
func NewLogBuffer(tb testing.TB, name string) *LogBuffer {
	lb := &LogBuffer{name: name}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("---- %s log ----\n%s\n---- end of %s log ----", name, lb.String(), name)
		}
	})
	return lb
}

// Write appends to the log; it satisfies io.Writer.
func (lb *LogBuffer) Write(p []byte) (int, error) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	lb.buf = append(lb.buf, p...)
	const max = 4 << 20
	if len(lb.buf) > max {
		lb.buf = append(lb.buf[:0], lb.buf[len(lb.buf)-max/2:]...)
	}
	return len(p), nil
}

func (lb *LogBuffer) String() string {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return string(lb.buf)
}

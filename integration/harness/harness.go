package harness

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
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

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago. The
// caller binds it soon after; a race with another process is possible but
// rare, and the servers started here report a clear error if it happens.
func FreePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("harness: pick a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
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

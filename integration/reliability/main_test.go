package reliability_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Each reliability run checks for leaks itself (goleak.IgnoreCurrent at
// its start); this covers the other tests as well.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// client-go keeps HTTP transports per configuration for the life of
		// the process, with their idle connections; klog starts its flush
		// daemon on first use. Neither belongs to an informer.
		goleak.IgnoreTopFunction("golang.org/x/net/http2.(*ClientConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	)
}

package kubeinformer_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// client-go caches HTTP transports per configuration for the life
		// of the process, with their idle HTTP/2 connections; klog starts
		// its flush daemon on first use. Neither belongs to a watch.
		goleak.IgnoreTopFunction("golang.org/x/net/http2.(*ClientConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	)
}

package leader_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		// This test binary, re-executed as a candidate the test can
		// freeze (frozen_test.go).
		os.Exit(runChild())
	}
	goleak.VerifyTestMain(m,
		// klog's flush daemon, started by client-go's import.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	)
}

package etcdinformer_test

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/dbinformer/dbinformer/integration/harness"
)

// The runnable examples get no testing.TB, so they share one server that
// TestMain starts on first use and stops at the end.
var example struct {
	once sync.Once
	dir  string
	srv  *harness.Etcd
	err  error
}

func exampleEndpoints() []string {
	example.once.Do(func() {
		example.dir, example.err = os.MkdirTemp("", "etcdinformer-example-")
		if example.err == nil {
			example.srv, example.err = harness.StartEtcdMain(example.dir)
		}
	})
	if example.err != nil {
		panic(fmt.Sprintf("start embedded etcd for the examples: %v", example.err))
	}
	return example.srv.Endpoints()
}

func TestMain(m *testing.M) {
	code := m.Run()
	if example.srv != nil {
		example.srv.Close()
	}
	if example.dir != "" {
		_ = os.RemoveAll(example.dir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines left after the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

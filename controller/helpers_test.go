package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/workqueue"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// Item is the object the tests' controllers reconcile.
type Item struct {
	Spec     int `json:"spec"`
	Observed int `json:"observed,omitempty"`
}

const prefix = "/items/"

// deadline bounds every wait; it is not a speed claim.
const deadline = 2 * time.Minute

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	t.Cleanup(cancel)
	return ctx
}

// etcdItems starts etcd (or reuses srv) and returns a client and an
// informer over prefix, not yet running.
func etcdItems(t *testing.T, cli *clientv3.Client) *core.SharedIndexInformer[Item] {
	t.Helper()
	lw, err := etcdinformer.NewPrefix(context.Background(), cli, prefix, etcdinformer.Options[Item]{})
	if err != nil {
		t.Fatal(err)
	}
	return core.NewSharedIndexInformer[Item](lw, core.InformerOptions[Item]{Name: "items"})
}

func startEtcd(t *testing.T) (*harness.Etcd, *clientv3.Client) {
	t.Helper()
	srv := harness.StartEtcd(t)
	return srv, srv.Client(t)
}

// run runs f on its own goroutine until the test ends; stop cancels it
// and waits for it.
func run(t *testing.T, f func(ctx context.Context) error) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(deadline):
				t.Errorf("did not stop within %v", deadline)
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func put(t *testing.T, cli *clientv3.Client, key string, it Item) int64 {
	t.Helper()
	b, _ := json.Marshal(it)
	resp, err := cli.Put(context.Background(), prefix+key, string(b))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// eventually waits for cond, polling; it fails after deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// countingMetrics is a MetricsProvider that counts, for assertions.
type countingMetrics struct {
	mu      sync.Mutex
	results map[string]int
	active  int
	obs     int
}

func newCountingMetrics() *countingMetrics { return &countingMetrics{results: map[string]int{}} }

type counterFunc func()

func (f counterFunc) Inc() { f() }

type gaugeFuncs struct{ inc, dec func() }

func (g gaugeFuncs) Inc() { g.inc() }
func (g gaugeFuncs) Dec() { g.dec() }

type histFunc func(float64)

func (f histFunc) Observe(v float64) { f(v) }

func (m *countingMetrics) NewReconcilesMetric(_, result string) workqueue.CounterMetric {
	return counterFunc(func() { m.mu.Lock(); m.results[result]++; m.mu.Unlock() })
}

func (m *countingMetrics) NewReconcileDurationMetric(string) workqueue.HistogramMetric {
	return histFunc(func(float64) { m.mu.Lock(); m.obs++; m.mu.Unlock() })
}

func (m *countingMetrics) NewActiveWorkersMetric(string) workqueue.GaugeMetric {
	return gaugeFuncs{
		inc: func() { m.mu.Lock(); m.active++; m.mu.Unlock() },
		dec: func() { m.mu.Lock(); m.active--; m.mu.Unlock() },
	}
}

func (m *countingMetrics) get(result string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.results[result]
}

func keyName(i int) string { return fmt.Sprintf("k%03d", i) }

package workqueue

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core/clock"
)

// testMetrics records every metric of one queue. set is signalled on every
// gauge Set so a test can wait for the metrics goroutine without sleeping.
type testMetrics struct {
	mu                   sync.Mutex
	name                 string
	depth, adds, retries float64
	latency, work        []float64
	unfinished, longest  float64
	sets                 chan struct{}
}

type gauge struct {
	m *testMetrics
	v *float64
}

func (g gauge) Inc()              { g.m.mu.Lock(); *g.v++; g.m.mu.Unlock() }
func (g gauge) Dec()              { g.m.mu.Lock(); *g.v--; g.m.mu.Unlock() }
func (g gauge) Observe(_ float64) {}

type hist struct {
	m *testMetrics
	v *[]float64
}

func (h hist) Observe(x float64) { h.m.mu.Lock(); *h.v = append(*h.v, x); h.m.mu.Unlock() }

type settable struct {
	m *testMetrics
	v *float64
}

func (s settable) Set(x float64) {
	s.m.mu.Lock()
	*s.v = x
	s.m.mu.Unlock()
	s.m.sets <- struct{}{}
}

func (m *testMetrics) NewDepthMetric(name string) GaugeMetric {
	m.name = name
	return gauge{m, &m.depth}
}
func (m *testMetrics) NewAddsMetric(string) CounterMetric           { return gauge{m, &m.adds} }
func (m *testMetrics) NewLatencyMetric(string) HistogramMetric      { return hist{m, &m.latency} }
func (m *testMetrics) NewWorkDurationMetric(string) HistogramMetric { return hist{m, &m.work} }
func (m *testMetrics) NewUnfinishedWorkSecondsMetric(string) SettableGaugeMetric {
	return settable{m, &m.unfinished}
}
func (m *testMetrics) NewLongestRunningProcessorSecondsMetric(string) SettableGaugeMetric {
	return settable{m, &m.longest}
}
func (m *testMetrics) NewRetriesMetric(string) CounterMetric { return gauge{m, &m.retries} }

var _ MetricsProvider = (*testMetrics)(nil)

func (m *testMetrics) snapshot() testMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	return testMetrics{name: m.name, depth: m.depth, adds: m.adds, retries: m.retries,
		latency: slices.Clone(m.latency), work: slices.Clone(m.work), unfinished: m.unfinished, longest: m.longest}
}

func TestMetrics(t *testing.T) {
	clk := clock.NewFake(epoch)
	m := &testMetrics{sets: make(chan struct{}, 2)}
	q := New(Options[string]{Name: "jobs", Clock: clk, MetricsProvider: m})
	defer q.ShutDown()

	q.Add("a")
	q.Add("a") // deduplicated: neither an add nor depth
	q.Add("b")
	if s := m.snapshot(); s.name != "jobs" || s.adds != 2 || s.depth != 2 {
		t.Fatalf("after adds: name %q adds %v depth %v", s.name, s.adds, s.depth)
	}

	clk.Step(2 * time.Second) // also fires the unfinished-work ticker with nothing processing
	<-m.sets
	<-m.sets
	a, _ := q.Get()
	if s := m.snapshot(); s.depth != 1 || !slices.Equal(s.latency, []float64{2}) || s.unfinished != 0 {
		t.Fatalf("after Get: depth %v latency %v unfinished %v", s.depth, s.latency, s.unfinished)
	}

	b, _ := q.Get()
	clk.Step(UnfinishedWorkUpdatePeriod) // a and b both 0.5 s into processing
	<-m.sets
	<-m.sets
	if s := m.snapshot(); s.unfinished != 1 || s.longest != 0.5 {
		t.Fatalf("unfinished %v longest %v, want 1 and 0.5", s.unfinished, s.longest)
	}
	q.Done(a)
	clk.Step(UnfinishedWorkUpdatePeriod)
	<-m.sets
	<-m.sets
	if s := m.snapshot(); !slices.Equal(s.work, []float64{0.5}) || s.unfinished != 1 || s.longest != 1 {
		t.Fatalf("work %v unfinished %v longest %v", s.work, s.unfinished, s.longest)
	}
	q.Done(b)

	q.AddAfter("c", time.Second)
	q.AddAfter("c", 0)
	q.AddRateLimited("d")
	if s := m.snapshot(); s.retries != 3 || s.depth != 1 || s.adds != 3 {
		t.Fatalf("after retries: retries %v depth %v adds %v", s.retries, s.depth, s.adds)
	}
	q.ShutDown()
	q.AddAfter("e", time.Second)
	if s := m.snapshot(); s.retries != 3 {
		t.Fatalf("retry counted after shutdown: %v", s.retries)
	}
}

func TestNoMetricsNoGoroutine(t *testing.T) {
	clk := clock.NewFake(epoch)
	q := New(Options[string]{Clock: clk})
	defer q.ShutDown()
	if clk.HasWaiters() {
		t.Fatal("a queue without metrics armed a ticker")
	}
	q.Add("a")
	q.Get()
	q.Done("a")
}

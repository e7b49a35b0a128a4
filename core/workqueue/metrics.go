package workqueue

import (
	"sync"
	"time"

	"github.com/dbinformer/dbinformer/core/clock"
)

// The metric interfaces have client-go's names and method sets so that an
// adapter written for client-go's workqueue.MetricsProvider ports by
// changing the import.

// GaugeMetric is a value that goes up and down (queue depth).
type GaugeMetric interface {
	Inc()
	Dec()
}

// SettableGaugeMetric is a gauge set to an absolute value.
type SettableGaugeMetric interface {
	Set(float64)
}

// CounterMetric only goes up.
type CounterMetric interface {
	Inc()
}

// HistogramMetric records observations, in seconds for the durations here.
type HistogramMetric interface {
	Observe(float64)
}

// MetricsProvider makes the metrics of one queue. Each method is called once
// per queue, at New, with Options.Name.
type MetricsProvider interface {
	// NewDepthMetric: items waiting to be processed (added and not yet taken
	// by Get, including those re-added while being processed).
	NewDepthMetric(name string) GaugeMetric
	// NewAddsMetric: Adds that made an item dirty (not the deduplicated ones).
	NewAddsMetric(name string) CounterMetric
	// NewLatencyMetric: seconds from Add to Get.
	NewLatencyMetric(name string) HistogramMetric
	// NewWorkDurationMetric: seconds from Get to Done.
	NewWorkDurationMetric(name string) HistogramMetric
	// NewUnfinishedWorkSecondsMetric: sum of the ages of the items being
	// processed, refreshed every UnfinishedWorkUpdatePeriod; a stuck worker
	// shows as a line that keeps rising.
	NewUnfinishedWorkSecondsMetric(name string) SettableGaugeMetric
	// NewLongestRunningProcessorSecondsMetric: age of the oldest item being
	// processed, refreshed like unfinished work.
	NewLongestRunningProcessorSecondsMetric(name string) SettableGaugeMetric
	// NewRetriesMetric: AddAfter and AddRateLimited calls.
	NewRetriesMetric(name string) CounterMetric
}

// UnfinishedWorkUpdatePeriod is how often the unfinished-work and
// longest-running gauges are refreshed (client-go's value).
const UnfinishedWorkUpdatePeriod = 500 * time.Millisecond

// queueMetrics is only built when a provider is configured; the queue checks
// for nil so the default costs one predictable branch per call.
// Its methods serialize on its own lock, so a provider's metrics are never
// called concurrently, as under client-go's single queue lock. The queue
// calls add, get and done holding the item's shard lock, so they come in
// that order for any one item.
type queueMetrics[K comparable] struct {
	mu                      sync.Mutex
	clock                   clock.Clock
	depth                   GaugeMetric
	adds                    CounterMetric
	latency                 HistogramMetric
	workDuration            HistogramMetric
	unfinishedWorkSeconds   SettableGaugeMetric
	longestRunningProcessor SettableGaugeMetric
	retries                 CounterMetric

	addTimes   map[K]time.Time
	startTimes map[K]time.Time
}

func newQueueMetrics[K comparable](p MetricsProvider, name string, c clock.Clock) *queueMetrics[K] {
	if p == nil {
		return nil
	}
	return &queueMetrics[K]{
		clock:                   c,
		depth:                   p.NewDepthMetric(name),
		adds:                    p.NewAddsMetric(name),
		latency:                 p.NewLatencyMetric(name),
		workDuration:            p.NewWorkDurationMetric(name),
		unfinishedWorkSeconds:   p.NewUnfinishedWorkSecondsMetric(name),
		longestRunningProcessor: p.NewLongestRunningProcessorSecondsMetric(name),
		retries:                 p.NewRetriesMetric(name),
		addTimes:                map[K]time.Time{},
		startTimes:              map[K]time.Time{},
	}
}

func (m *queueMetrics[K]) add(item K) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.adds.Inc()
	m.depth.Inc()
	if _, ok := m.addTimes[item]; !ok {
		m.addTimes[item] = m.clock.Now()
	}
}

func (m *queueMetrics[K]) get(item K) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	m.depth.Dec()
	m.startTimes[item] = now
	if t, ok := m.addTimes[item]; ok {
		m.latency.Observe(now.Sub(t).Seconds())
		delete(m.addTimes, item)
	}
}

func (m *queueMetrics[K]) done(item K) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, ok := m.startTimes[item]; ok {
		m.workDuration.Observe(m.clock.Since(t).Seconds())
		delete(m.startTimes, item)
	}
}

func (m *queueMetrics[K]) retry() {
	m.mu.Lock()
	m.retries.Inc()
	m.mu.Unlock()
}

func (m *queueMetrics[K]) updateUnfinishedWork() {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	var total, oldest float64
	for _, t := range m.startTimes {
		age := now.Sub(t).Seconds()
		total += age
		if age > oldest {
			oldest = age
		}
	}
	m.unfinishedWorkSeconds.Set(total)
	m.longestRunningProcessor.Set(oldest)
}

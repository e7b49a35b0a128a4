package controller

import "github.com/dbinformer/dbinformer/core/workqueue"

// MetricsProvider makes a controller's own metrics, in the queue's metric
// types so that one adapter serves both. The queue's metrics (depth,
// latency, work duration, retries) come from Options.QueueMetrics; these
// add what only the controller knows. Each method is called once per
// controller (per result for Reconciles), at New.
type MetricsProvider interface {
	// NewReconcilesMetric counts reconciles that ended with result (one
	// of the Result* labels).
	NewReconcilesMetric(controller, result string) workqueue.CounterMetric
	// NewReconcileDurationMetric observes each reconcile's duration in
	// seconds, whatever its result.
	NewReconcileDurationMetric(controller string) workqueue.HistogramMetric
	// NewActiveWorkersMetric is the number of reconciles running.
	NewActiveWorkersMetric(controller string) workqueue.GaugeMetric
}

// metrics is built only with a provider; nil costs one branch.
type metrics struct {
	results  map[string]workqueue.CounterMetric
	duration workqueue.HistogramMetric
	active   workqueue.GaugeMetric
}

func newMetrics(p MetricsProvider, name string) *metrics {
	if p == nil {
		return nil
	}
	m := &metrics{
		results:  make(map[string]workqueue.CounterMetric, len(results)),
		duration: p.NewReconcileDurationMetric(name),
		active:   p.NewActiveWorkersMetric(name),
	}
	for _, r := range results {
		m.results[r] = p.NewReconcilesMetric(name, r)
	}
	return m
}

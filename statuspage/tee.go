package statuspage

import (
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/workqueue"
)

// Tee returns a core.MetricsProvider that reports every informer's
// metrics to each of providers, in order, so that the page and Prometheus
// (metrics/prometheus) both see them. nil providers are skipped; Tee of a
// single provider is that provider, and Tee of none is nil (no metrics).
func Tee(providers ...core.MetricsProvider) core.MetricsProvider {
	ps := nonNil(providers)
	switch len(ps) {
	case 0:
		return nil
	case 1:
		return ps[0]
	}
	return teeProvider(ps)
}

type teeProvider []core.MetricsProvider

func (t teeProvider) InformerMetrics(name string) core.InformerMetrics {
	ms := make(teeMetrics, 0, len(t))
	for _, p := range t {
		if m := p.InformerMetrics(name); m != nil {
			ms = append(ms, m)
		}
	}
	return ms
}

type teeMetrics []core.InformerMetrics

var _ core.InformerMetrics = teeMetrics(nil)

func (t teeMetrics) Listed(relist bool, items int, err error) {
	for _, m := range t {
		m.Listed(relist, items, err)
	}
}

func (t teeMetrics) ListProgress(received, estimated int64) {
	for _, m := range t {
		m.ListProgress(received, estimated)
	}
}

func (t teeMetrics) WatchRestarted(reason error) {
	for _, m := range t {
		m.WatchRestarted(reason)
	}
}

func (t teeMetrics) Applied(rv core.ResourceVersion) {
	for _, m := range t {
		m.Applied(rv)
	}
}

func (t teeMetrics) PendingNotifications(handler string, n int) {
	for _, m := range t {
		m.PendingNotifications(handler, n)
	}
}

func (t teeMetrics) HandlerPanicked(handler string) {
	for _, m := range t {
		m.HandlerPanicked(handler)
	}
}

func (t teeMetrics) DecodeFailed() {
	for _, m := range t {
		m.DecodeFailed()
	}
}

// TeeQueues is Tee for work queues: a workqueue.MetricsProvider reporting
// each queue's metrics to every one of providers (nil ones skipped).
func TeeQueues(providers ...workqueue.MetricsProvider) workqueue.MetricsProvider {
	ps := nonNil(providers)
	switch len(ps) {
	case 0:
		return nil
	case 1:
		return ps[0]
	}
	return teeQueues(ps)
}

type teeQueues []workqueue.MetricsProvider

var _ workqueue.MetricsProvider = teeQueues(nil)

type (
	teeGauge    []workqueue.GaugeMetric
	teeCounter  []workqueue.CounterMetric
	teeHist     []workqueue.HistogramMetric
	teeSettable []workqueue.SettableGaugeMetric
)

func (t teeGauge) Inc() {
	for _, m := range t {
		m.Inc()
	}
}

func (t teeGauge) Dec() {
	for _, m := range t {
		m.Dec()
	}
}

func (t teeCounter) Inc() {
	for _, m := range t {
		m.Inc()
	}
}

func (t teeHist) Observe(v float64) {
	for _, m := range t {
		m.Observe(v)
	}
}

func (t teeSettable) Set(v float64) {
	for _, m := range t {
		m.Set(v)
	}
}

func (t teeQueues) NewDepthMetric(name string) workqueue.GaugeMetric {
	return teeGauge(fanOut(t, func(p workqueue.MetricsProvider) workqueue.GaugeMetric { return p.NewDepthMetric(name) }))
}

func (t teeQueues) NewAddsMetric(name string) workqueue.CounterMetric {
	return teeCounter(fanOut(t, func(p workqueue.MetricsProvider) workqueue.CounterMetric { return p.NewAddsMetric(name) }))
}

func (t teeQueues) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return teeHist(fanOut(t, func(p workqueue.MetricsProvider) workqueue.HistogramMetric { return p.NewLatencyMetric(name) }))
}

func (t teeQueues) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return teeHist(fanOut(t, func(p workqueue.MetricsProvider) workqueue.HistogramMetric { return p.NewWorkDurationMetric(name) }))
}

func (t teeQueues) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return teeSettable(fanOut(t, func(p workqueue.MetricsProvider) workqueue.SettableGaugeMetric {
		return p.NewUnfinishedWorkSecondsMetric(name)
	}))
}

func (t teeQueues) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return teeSettable(fanOut(t, func(p workqueue.MetricsProvider) workqueue.SettableGaugeMetric {
		return p.NewLongestRunningProcessorSecondsMetric(name)
	}))
}

func (t teeQueues) NewRetriesMetric(name string) workqueue.CounterMetric {
	return teeCounter(fanOut(t, func(p workqueue.MetricsProvider) workqueue.CounterMetric { return p.NewRetriesMetric(name) }))
}

// nonNil returns providers without the nil ones.
func nonNil[P comparable](providers []P) []P {
	var zero P
	var ps []P
	for _, p := range providers {
		if p != zero {
			ps = append(ps, p)
		}
	}
	return ps
}

// fanOut asks every provider for its metric of one kind.
func fanOut[M any](t teeQueues, metric func(workqueue.MetricsProvider) M) []M {
	out := make([]M, len(t))
	for i, p := range t {
		out[i] = metric(p)
	}
	return out
}

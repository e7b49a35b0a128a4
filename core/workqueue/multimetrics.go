package workqueue

// MultiMetrics returns a MetricsProvider reporting each queue's metrics to
// every one of providers, in order (nil ones skipped), so that a status
// page and Prometheus both see them; core.MultiMetrics is its informer
// twin. Of a single provider it is that provider, of none nil.
func MultiMetrics(providers ...MetricsProvider) MetricsProvider {
	ps := nonNil(providers)
	switch len(ps) {
	case 0:
		return nil
	case 1:
		return ps[0]
	}
	return teeQueues(ps)
}

type teeQueues []MetricsProvider

var _ MetricsProvider = teeQueues(nil)

type (
	teeGauge    []GaugeMetric
	teeCounter  []CounterMetric
	teeHist     []HistogramMetric
	teeSettable []SettableGaugeMetric
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

func (t teeQueues) NewDepthMetric(name string) GaugeMetric {
	return teeGauge(fanOut(t, func(p MetricsProvider) GaugeMetric { return p.NewDepthMetric(name) }))
}

func (t teeQueues) NewAddsMetric(name string) CounterMetric {
	return teeCounter(fanOut(t, func(p MetricsProvider) CounterMetric { return p.NewAddsMetric(name) }))
}

func (t teeQueues) NewLatencyMetric(name string) HistogramMetric {
	return teeHist(fanOut(t, func(p MetricsProvider) HistogramMetric { return p.NewLatencyMetric(name) }))
}

func (t teeQueues) NewWorkDurationMetric(name string) HistogramMetric {
	return teeHist(fanOut(t, func(p MetricsProvider) HistogramMetric { return p.NewWorkDurationMetric(name) }))
}

func (t teeQueues) NewUnfinishedWorkSecondsMetric(name string) SettableGaugeMetric {
	return teeSettable(fanOut(t, func(p MetricsProvider) SettableGaugeMetric {
		return p.NewUnfinishedWorkSecondsMetric(name)
	}))
}

func (t teeQueues) NewLongestRunningProcessorSecondsMetric(name string) SettableGaugeMetric {
	return teeSettable(fanOut(t, func(p MetricsProvider) SettableGaugeMetric {
		return p.NewLongestRunningProcessorSecondsMetric(name)
	}))
}

func (t teeQueues) NewRetriesMetric(name string) CounterMetric {
	return teeCounter(fanOut(t, func(p MetricsProvider) CounterMetric { return p.NewRetriesMetric(name) }))
}

// nonNil returns providers without the nil ones.
func nonNil(providers []MetricsProvider) []MetricsProvider {
	var ps []MetricsProvider
	for _, p := range providers {
		if p != nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// fanOut asks every provider for its metric of one kind.
func fanOut[M any](t teeQueues, metric func(MetricsProvider) M) []M {
	out := make([]M, len(t))
	for i, p := range t {
		out[i] = metric(p)
	}
	return out
}

package core

// MetricsProvider creates the metrics of one informer. It is injected
// (InformerOptions.Metrics), never global, so two informers of one process
// can report to different registries. A nil provider means no metrics.
type MetricsProvider interface {
	// InformerMetrics is called once per informer with its name (the
	// source name given to the factory, or InformerOptions.Name).
	InformerMetrics(name string) InformerMetrics
}

// InformerMetrics receives an informer's measurements. Methods are called
// from the informer's goroutines, concurrently with each other, and must not
// block. Embed NoopMetrics to stay compatible when methods are added.
type InformerMetrics interface {
	// Listed reports the end of a list: relist is false for the first
	// list of a Run, items counts the objects, err is nil on success.
	Listed(relist bool, items int, err error)
	// ListProgress reports an ongoing list: objects received so far and
	// the source's estimate of the total (0 when unknown).
	ListProgress(received, estimated int64)
	// WatchRestarted reports that a watch ended and a new one will start:
	// reason is nil for a planned timeout, driver.ErrExpired for a relist, or the
	// failure.
	WatchRestarted(reason error)
	// Applied reports the version up to which the cache is applied.
	Applied(rv ResourceVersion)
	// PendingNotifications reports how many notifications wait for one
	// handler (a slow handler shows here).
	PendingNotifications(handler string, n int)
	// HandlerPanicked reports a recovered handler panic.
	HandlerPanicked(handler string)
	// DecodeFailed reports an event the adapter could not decode (or the
	// transform rejected); the error went to the error handler.
	DecodeFailed()
}

// NoopMetrics implements InformerMetrics by doing nothing.
type NoopMetrics struct{}

var (
	_ InformerMetrics = NoopMetrics{}
	_ MetricsProvider = NoopMetrics{}
)

func (NoopMetrics) InformerMetrics(string) InformerMetrics { return NoopMetrics{} }
func (NoopMetrics) Listed(bool, int, error)                {}
func (NoopMetrics) ListProgress(int64, int64)              {}
func (NoopMetrics) WatchRestarted(error)                   {}
func (NoopMetrics) Applied(ResourceVersion)                {}
func (NoopMetrics) PendingNotifications(string, int)       {}
func (NoopMetrics) HandlerPanicked(string)                 {}
func (NoopMetrics) DecodeFailed()                          {}

// MultiMetrics returns a MetricsProvider that reports every informer's
// metrics to each of providers, in order, so that a status page and
// Prometheus (metrics/prometheus) both see them, as slog.NewMultiHandler
// does for handlers. nil providers are skipped; MultiMetrics of a single
// provider is that provider, and of none is nil (no metrics).
func MultiMetrics(providers ...MetricsProvider) MetricsProvider {
	ps := nonNilProviders(providers)
	switch len(ps) {
	case 0:
		return nil
	case 1:
		return ps[0]
	}
	return teeProvider(ps)
}

type teeProvider []MetricsProvider

func (t teeProvider) InformerMetrics(name string) InformerMetrics {
	ms := make(teeMetrics, 0, len(t))
	for _, p := range t {
		if m := p.InformerMetrics(name); m != nil {
			ms = append(ms, m)
		}
	}
	return ms
}

type teeMetrics []InformerMetrics

var _ InformerMetrics = teeMetrics(nil)

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

func (t teeMetrics) Applied(rv ResourceVersion) {
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

// nonNilProviders returns providers without the nil ones.
func nonNilProviders(providers []MetricsProvider) []MetricsProvider {
	var ps []MetricsProvider
	for _, p := range providers {
		if p != nil {
			ps = append(ps, p)
		}
	}
	return ps
}

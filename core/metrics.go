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
	// reason is nil for a planned timeout, ErrExpired for a relist, or the
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

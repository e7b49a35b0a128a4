package relay

import "github.com/dbinformer/dbinformer/core"

// Metrics receives a relay's counters and transitions, for a status page
// or Prometheus, as core.InformerMetrics receives an informer's (and a
// Downstream's informer reports through that one). Calls come from the
// relay's goroutines: they must be cheap and must not block.
type Metrics interface {
	// Leading reports that the relay started (true) or stopped leading,
	// with the term's epoch.
	Leading(leading bool, epoch uint64)
	// Stored reports the source version up to which JetStream has stored
	// everything the relay published (what the source may discard).
	Stored(v core.ResourceVersion)
	// Relisted reports a relist of the source, published: changed keys of
	// listed. A takeover that resumed from the source's slot has none.
	Relisted(changed, listed int)
	// TermRestarted reports a term that failed and starts again from the
	// stream (err says why).
	TermRestarted(err error)
}

// DownstreamMetrics receives a Downstream's own counters; its informer's
// go through core.InformerMetrics.
type DownstreamMetrics interface {
	// CaughtUp reports a catch-up over superseded messages (see
	// Downstream): the holes it mended and the keys it delivered.
	CaughtUp(holes, keys int)
}

// NoopMetrics implements Metrics and DownstreamMetrics by doing nothing.
type NoopMetrics struct{}

var (
	_ Metrics           = NoopMetrics{}
	_ DownstreamMetrics = NoopMetrics{}
)

func (NoopMetrics) Leading(bool, uint64)        {}
func (NoopMetrics) Stored(core.ResourceVersion) {}
func (NoopMetrics) Relisted(int, int)           {}
func (NoopMetrics) TermRestarted(error)         {}
func (NoopMetrics) CaughtUp(int, int)           {}

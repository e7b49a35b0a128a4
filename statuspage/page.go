package statuspage

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/clock"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/workqueue"
)

// Options configures a Page. The zero value of every field means its
// default; a negative duration means "off".
type Options struct {
	// Title heads the HTML page; "" means "dbinformer".
	Title string
	// Refresh is how often the HTML page reloads itself (a meta refresh, no
	// JavaScript); 0 means 5s, negative means never.
	Refresh time.Duration
	// HeadTimeout bounds each source head read made while rendering the
	// page, the JSON or a probe; 0 means 2s. Heads are read in parallel.
	HeadTimeout time.Duration
	// HeadInterval is the least time between two head reads of one source,
	// however many pages and probes are served; 0 means 1s.
	HeadInterval time.Duration
	// StallTimeout is how long an informer may hold versions it received
	// but has not applied, without its applied version moving, before the
	// liveness check fails (a handler blocking the informer through
	// HandlerOptions.MaxPending, a deadlock); 0 means 2 minutes, negative
	// turns the check off.
	StallTimeout time.Duration
	// Clock is the page's clock (ages, rates, ETA, stalls); nil means the
	// wall clock.
	Clock clock.Clock
}

// Page records the state of informers and work queues and serves it as an
// HTML status page, as JSON and as health checks. It is a
// core.MetricsProvider and a workqueue.MetricsProvider: pass it (or
// core.MultiMetrics / workqueue.MultiMetrics of it and another provider,
// such as Prometheus) as InformerOptions.Metrics and
// workqueue.Options.MetricsProvider, and Add each informer. Create it with
// New; it is safe for concurrent use.
type Page struct {
	opts Options
	clk  clock.Clock

	mu        sync.Mutex
	informers map[string]*informerEntry
	order     []string
	queues    map[string]*queueRecord
	qorder    []string
	relays    map[string]Relay
	rorder    []string
}

// informerEntry joins what the metrics tell (rec) with what the informer
// answers (inf), both found by the informer's name.
type informerEntry struct {
	name string
	rec  *informerRecord
	inf  Informer

	headMu   sync.Mutex
	headAt   time.Time
	head     core.ResourceVersion
	headErr  string
	headRead bool      // a read was started
	headOK   bool      // the last read succeeded: head is meaningful
	noHead   bool      // the source cannot tell its head (errors.ErrUnsupported)
	failedAt time.Time // the first failed read since the last good one
}

var (
	_ core.MetricsProvider      = (*Page)(nil)
	_ workqueue.MetricsProvider = (*Page)(nil)
	_ Informer                  = (*core.SharedIndexInformer[int])(nil)
)

// New returns an empty page.
func New(opts Options) *Page {
	if opts.Title == "" {
		opts.Title = "dbinformer"
	}
	if opts.Refresh == 0 {
		opts.Refresh = 5 * time.Second
	}
	if opts.HeadTimeout <= 0 {
		opts.HeadTimeout = 2 * time.Second
	}
	if opts.HeadInterval == 0 {
		opts.HeadInterval = time.Second
	}
	if opts.StallTimeout == 0 {
		opts.StallTimeout = 2 * time.Minute
	}
	return &Page{
		opts:      opts,
		clk:       clock.Or(opts.Clock),
		informers: map[string]*informerEntry{},
		queues:    map[string]*queueRecord{},
	}
}

// Informer is what the page reads of an informer: every
// *core.SharedIndexInformer[T] is one, whatever T. Its SyncStatus says
// where it stands (its source's kind, its checkpoints, a permanent
// failure) and Head reads its source's head through the informer, so that
// the page and Prometheus share one read. The page never reads the cache's
// objects.
type Informer interface {
	Name() string
	SyncStatus() core.SyncStatus
	Head(ctx context.Context) (core.ResourceVersion, error)
}

// Add shows inf on the page under its name. An informer whose metrics go
// to the page shows up without Add too, but then only what its metrics
// tell: whether its first list succeeded stands in for HasSynced, and there
// is no head and no lag. Adding a second informer of the same name
// replaces the first.
func (p *Page) Add(inf Informer) {
	e := p.entry(inf.Name())
	p.mu.Lock()
	e.inf = inf
	p.mu.Unlock()
}

// Remove takes the informer called name off the page (and its readiness).
func (p *Page) Remove(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.informers, name)
	p.order = slices.DeleteFunc(p.order, func(n string) bool { return n == name })
}

func (p *Page) entry(name string) *informerEntry {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.informers[name]; ok {
		return e
	}
	e := &informerEntry{name: name, rec: newInformerRecord(p.clk)}
	p.informers[name] = e
	p.order = append(p.order, name)
	return e
}

// InformerMetrics implements core.MetricsProvider: the informer called
// name reports to the page.
func (p *Page) InformerMetrics(name string) core.InformerMetrics {
	e := p.entry(name)
	e.rec.mu.Lock()
	e.rec.metrics = true
	e.rec.mu.Unlock()
	return e.rec
}

// ErrorHandler returns an InformerOptions.ErrorHandler for the informer
// called name that remembers the last decode error (its source, key,
// version and reason, never the value) and then calls next. A nil next
// logs the error as an informer without an ErrorHandler does, on
// slog.Default (an expired version at Info, the rest at Error), with the
// name and message redacted (see Redact); use ErrorHandlerLogger for
// another logger. The page needs none of it for an informer it was given
// with Add (it reads the last decode error from the informer's
// SyncStatus): use it for the redacted log.
func (p *Page) ErrorHandler(name string, next func(error)) func(error) {
	return p.errorHandler(name, next, nil)
}

// ErrorHandlerLogger is ErrorHandler logging to logger (the informer's
// InformerOptions.Logger) when next is nil.
func (p *Page) ErrorHandlerLogger(name string, next func(error), logger *slog.Logger) func(error) {
	return p.errorHandler(name, next, logger)
}

func (p *Page) errorHandler(name string, next func(error), logger *slog.Logger) func(error) {
	e := p.entry(name)
	if next == nil {
		if logger == nil {
			logger = slog.Default()
		}
		next = func(err error) {
			level := slog.LevelError
			if errors.Is(err, driver.ErrExpired) {
				level = slog.LevelInfo
			}
			// As core logs it, but redacted: a name or message holding a
			// connection string must not reach the log either.
			logger.Log(context.Background(), level, "dbinformer", "source", Redact(name), "err", Redact(err.Error()))
		}
	}
	return func(err error) {
		var de *driver.DecodeError
		if errors.As(err, &de) {
			e.rec.decodeError(describeDecodeError(de))
		}
		next(err)
	}
}

// InformerFor is core.InformerFor with the informer on the page: its
// metrics go to p (and to opts.Metrics, through core.MultiMetrics) and it
// is added. Like core.InformerFor, a second call for the same (source, T)
// returns the first informer and ignores lw and opts.
func InformerFor[T any](p *Page, f *core.Factory, source string, lw driver.ListerWatcher[T], opts core.InformerOptions[T]) *core.SharedIndexInformer[T] {
	opts.Metrics = core.MultiMetrics(p, opts.Metrics)
	if opts.Name == "" {
		opts.Name = source
	}
	opts.ErrorHandler = p.errorHandler(opts.Name, opts.ErrorHandler, opts.Logger)
	inf := core.InformerFor(f, source, lw, opts)
	p.mu.Lock()
	e, ok := p.informers[inf.Name()]
	known := ok && e.inf != nil
	p.mu.Unlock()
	if !known {
		p.Add(inf)
	}
	return inf
}

func (p *Page) queue(name string) *queueRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	if q, ok := p.queues[name]; ok {
		return q
	}
	q := &queueRecord{}
	p.queues[name] = q
	p.qorder = append(p.qorder, name)
	return q
}

// NewDepthMetric implements workqueue.MetricsProvider.
func (p *Page) NewDepthMetric(name string) workqueue.GaugeMetric {
	return queueGauge{p.queue(name), func(q *queueRecord, d float64) { q.depth += int64(d) }}
}

// NewAddsMetric implements workqueue.MetricsProvider.
func (p *Page) NewAddsMetric(name string) workqueue.CounterMetric {
	return queueGauge{p.queue(name), func(q *queueRecord, _ float64) { q.adds++ }}
}

// NewLatencyMetric implements workqueue.MetricsProvider.
func (p *Page) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return queueGauge{p.queue(name), func(q *queueRecord, v float64) {
		q.waitCount++
		q.waitSum += v
		q.waitMax = max(q.waitMax, v)
	}}
}

// NewWorkDurationMetric implements workqueue.MetricsProvider.
func (p *Page) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return queueGauge{p.queue(name), func(q *queueRecord, v float64) {
		q.workCount++
		q.workSum += v
		q.workMax = max(q.workMax, v)
	}}
}

// NewUnfinishedWorkSecondsMetric implements workqueue.MetricsProvider.
func (p *Page) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return queueGauge{p.queue(name), func(q *queueRecord, v float64) { q.unfinished = v }}
}

// NewLongestRunningProcessorSecondsMetric implements workqueue.MetricsProvider.
func (p *Page) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return queueGauge{p.queue(name), func(q *queueRecord, v float64) { q.longestRun = v }}
}

// NewRetriesMetric implements workqueue.MetricsProvider.
func (p *Page) NewRetriesMetric(name string) workqueue.CounterMetric {
	return queueGauge{p.queue(name), func(q *queueRecord, _ float64) { q.retries++ }}
}

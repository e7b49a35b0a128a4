package prommetrics

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/workqueue"
)

// Options configures a Provider. The zero value means the defaults.
type Options struct {
	// Namespace prefixes every metric name; "" means "dbinformer".
	Namespace string
	// ConstLabels are added to every metric (for example the process's
	// role when several report to one Prometheus).
	ConstLabels prometheus.Labels
	// HeadTimeout bounds each Head call made by a scrape for TrackLag;
	// 0 means 2s.
	HeadTimeout time.Duration
}

// Provider implements core.MetricsProvider and workqueue.MetricsProvider on
// one Prometheus registry. It is safe for concurrent use.
type Provider struct {
	headTimeout time.Duration

	lists          *prometheus.CounterVec
	listed         *prometheus.GaugeVec
	listReceived   *prometheus.GaugeVec
	listEstimated  *prometheus.GaugeVec
	listRate       *prometheus.GaugeVec
	listETA        *prometheus.GaugeVec
	watchRestarts  *prometheus.CounterVec
	applied        *prometheus.GaugeVec
	pending        *prometheus.GaugeVec
	panics         *prometheus.CounterVec
	decodeErrors   *prometheus.CounterVec
	schemaChanges  *prometheus.CounterVec
	headErrors     *prometheus.CounterVec
	headDesc, lagD *prometheus.Desc
	audit          *auditVecs

	depth          *prometheus.GaugeVec
	adds           *prometheus.CounterVec
	latency        *prometheus.HistogramVec
	workDuration   *prometheus.HistogramVec
	unfinished     *prometheus.GaugeVec
	longestRunning *prometheus.GaugeVec
	retries        *prometheus.CounterVec

	mu        sync.Mutex
	informers map[string]*informerMetrics // by informer name
	heads     map[string]Informer         // TrackLag
	relays    map[string]Relay            // TrackRelay
	relayErrs map[string]*relayErrors
}

var (
	_ core.MetricsProvider      = (*Provider)(nil)
	_ workqueue.MetricsProvider = (*Provider)(nil)
	_ core.InformerMetrics      = (*informerMetrics)(nil)
	_ prometheus.Collector      = (*lagCollector)(nil)
)

// New creates the metrics and registers them on reg. reg is required: pass
// prometheus.NewRegistry() for a registry of your own, or
// prometheus.DefaultRegisterer if the global one is what you want. It fails
// when a metric of the same name is already registered on reg (a second
// Provider on one registry needs another Namespace or ConstLabels).
func New(reg prometheus.Registerer, opts Options) (*Provider, error) {
	if reg == nil {
		return nil, errors.New("prommetrics: nil Registerer (pass prometheus.NewRegistry() or, deliberately, prometheus.DefaultRegisterer)")
	}
	ns := opts.Namespace
	if ns == "" {
		ns = "dbinformer"
	}
	p := &Provider{
		headTimeout: opts.HeadTimeout,
		informers:   map[string]*informerMetrics{},
		heads:       map[string]Informer{},
		relays:      map[string]Relay{},
		relayErrs:   map[string]*relayErrors{},
	}
	if p.headTimeout <= 0 {
		p.headTimeout = 2 * time.Second
	}
	cl := opts.ConstLabels
	inf := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: ns, Subsystem: "informer", Name: name, Help: help, ConstLabels: cl}
	}
	wq := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: ns, Subsystem: "workqueue", Name: name, Help: help, ConstLabels: cl}
	}
	counter := func(o prometheus.Opts, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts(o), labels)
	}
	gauge := func(o prometheus.Opts, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts(o), labels)
	}
	// client-go's (component-base's) buckets: 10ns up to ~3h, so that both
	// a fast in-memory reconcile and a stuck one land in a real bucket.
	buckets := prometheus.ExponentialBuckets(10e-9, 10, 12)
	hist := func(o prometheus.Opts) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: o.Namespace, Subsystem: o.Subsystem, Name: o.Name, Help: o.Help,
			ConstLabels: o.ConstLabels, Buckets: buckets,
		}, []string{"name"})
	}

	p.lists = counter(inf("lists_total", "Lists of the source that ended; kind is list (first of a run) or relist, result success or error."), "informer", "kind", "result")
	p.listed = gauge(inf("listed_objects", "Objects in the last successful list."), "informer")
	p.listReceived = gauge(inf("list_received_objects", "Objects received so far by the list in progress, or by the last list."), "informer")
	p.listEstimated = gauge(inf("list_estimated_objects", "The source's estimate of the objects in the list in progress; 0 when unknown."), "informer")
	p.listRate = gauge(inf("list_objects_per_second", "Objects per second received by the list in progress, or by the last list, since it started."), "informer")
	p.listETA = gauge(inf("list_remaining_seconds", "Time left for the list in progress at its rate to reach the source's estimate; 0 when done or unknown."), "informer")
	p.watchRestarts = counter(inf("watch_restarts_total", "Watches that ended and were reopened; reason is timeout (planned), expired (relist), stuck (no progress for several progress intervals: reopened) or error (backoff, resume)."), "informer", "reason")
	p.applied = gauge(inf("applied_resource_version", "The source version up to which the cache is applied."), "informer")
	p.pending = gauge(inf("pending_notifications", "Notifications waiting for a handler; a slow handler shows here."), "informer", "handler")
	p.panics = counter(inf("handler_panics_total", "Recovered handler panics."), "informer", "handler")
	p.decodeErrors = counter(inf("decode_errors_total", "Changes the adapter could not decode or the transform rejected."), "informer")
	p.schemaChanges = counter(inf("schema_changes_total", "Changes of the source's schema that reached the informer (a Postgres column dropped, renamed or retyped, a table dropped); action is relist (listed again) or fail (the informer stopped)."), "informer", "action")
	p.headErrors = counter(inf("head_errors_total", "Failed reads of the source's head version during a scrape."), "informer")
	p.headDesc = prometheus.NewDesc(prometheus.BuildFQName(ns, "informer", "head_resource_version"),
		"The source's newest version, read at scrape time.", []string{"informer"}, cl)
	p.lagD = prometheus.NewDesc(prometheus.BuildFQName(ns, "informer", "lag"),
		"Source head version minus applied version, read at scrape time, in the source's units (etcd revisions, Postgres WAL bytes, JetStream sequences).", []string{"informer"}, cl)

	p.audit = newAuditVecs(inf)

	p.depth = gauge(wq("depth", "Items waiting in the queue."), "name")
	p.adds = counter(wq("adds_total", "Adds that queued an item (deduplicated adds are not counted)."), "name")
	p.latency = hist(wq("queue_duration_seconds", "Seconds an item waits in the queue before a worker takes it."))
	p.workDuration = hist(wq("work_duration_seconds", "Seconds from a worker taking an item to Done."))
	p.unfinished = gauge(wq("unfinished_work_seconds", "Sum of the ages of the items being processed; a stuck worker shows as a rising line."), "name")
	p.longestRunning = gauge(wq("longest_running_processor_seconds", "Age of the oldest item being processed."), "name")
	p.retries = counter(wq("retries_total", "Rate-limited and delayed re-adds."), "name")

	for _, c := range append([]prometheus.Collector{
		p.lists, p.listed, p.listReceived, p.listEstimated, p.listRate, p.listETA, p.watchRestarts, p.applied,
		p.pending, p.panics, p.decodeErrors, p.schemaChanges, p.headErrors, &lagCollector{p}, newRelayCollector(p, ns, cl),
		p.depth, p.adds, p.latency, p.workDuration, p.unfinished, p.longestRunning, p.retries,
	}, p.audit.collectors()...) {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("prommetrics: register: %w", err)
		}
	}
	return p, nil
}

// InformerMetrics implements core.MetricsProvider. Informers with the same
// name share their series.
func (p *Provider) InformerMetrics(name string) core.InformerMetrics {
	return p.informer(name)
}

func (p *Provider) informer(name string) *informerMetrics {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m, ok := p.informers[name]; ok {
		return m
	}
	m := &informerMetrics{
		p:             p,
		name:          name,
		listOK:        p.lists.WithLabelValues(name, "list", "success"),
		listErr:       p.lists.WithLabelValues(name, "list", "error"),
		relistOK:      p.lists.WithLabelValues(name, "relist", "success"),
		relistErr:     p.lists.WithLabelValues(name, "relist", "error"),
		listed:        p.listed.WithLabelValues(name),
		received:      p.listReceived.WithLabelValues(name),
		estimated:     p.listEstimated.WithLabelValues(name),
		rate:          p.listRate.WithLabelValues(name),
		eta:           p.listETA.WithLabelValues(name),
		restartTimout: p.watchRestarts.WithLabelValues(name, "timeout"),
		restartExpire: p.watchRestarts.WithLabelValues(name, "expired"),
		restartError:  p.watchRestarts.WithLabelValues(name, "error"),
		restartStuck:  p.watchRestarts.WithLabelValues(name, "stuck"),
		appliedG:      p.applied.WithLabelValues(name),
		decode:        p.decodeErrors.WithLabelValues(name),
	}
	p.informers[name] = m
	return m
}

// Informer is what TrackLag reads of an informer: every
// *core.SharedIndexInformer[T] is one.
type Informer interface {
	Name() string
	// Head reads the source's head through the informer, which shares one
	// read among its observers (a status page, this provider).
	Head(ctx context.Context) (core.ResourceVersion, error)
}

// TrackLag makes every scrape read inf's source head (through inf.Head)
// and report the head and the lag of inf, under its name. A later call for
// an informer of the same name replaces it; UntrackLag stops tracking. A
// source that cannot tell its head (an error matching errors.ErrUnsupported) has no head or lag
// series; a failed read has none either (the lag is unknown, not 0) and
// counts in dbinformer_informer_head_errors_total.
func (p *Provider) TrackLag(inf Informer) {
	name := inf.Name()
	p.informer(name) // the applied version has somewhere to go even before the informer reports
	p.mu.Lock()
	defer p.mu.Unlock()
	p.heads[name] = inf
}

// UntrackLag stops reading the head of the informer called name.
func (p *Provider) UntrackLag(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.heads, name)
}

type informerMetrics struct {
	p                                          *Provider
	name                                       string
	listOK, listErr, relistOK, relistErr       prometheus.Counter
	listed, received, estimated                prometheus.Gauge
	rate, eta                                  prometheus.Gauge
	listMu                                     sync.Mutex
	listStart                                  time.Time // the list in progress started; zero between lists
	restartTimout, restartExpire, restartError prometheus.Counter
	restartStuck                               prometheus.Counter
	appliedG                                   prometheus.Gauge
	appliedRV                                  atomic.Uint64
	decode                                     prometheus.Counter
}

func (m *informerMetrics) Listed(relist bool, items int, err error) {
	switch {
	case !relist && err == nil:
		m.listOK.Inc()
	case !relist:
		m.listErr.Inc()
	case err == nil:
		m.relistOK.Inc()
	default:
		m.relistErr.Inc()
	}
	if err == nil {
		m.listed.Set(float64(items))
	}
	m.listMu.Lock()
	m.listStart = time.Time{}
	m.listMu.Unlock()
	m.eta.Set(0)
}

func (m *informerMetrics) ListProgress(received, estimated int64) {
	m.received.Set(float64(received))
	m.estimated.Set(float64(estimated))
	now := time.Now()
	m.listMu.Lock()
	if m.listStart.IsZero() {
		m.listStart = now
	}
	elapsed := now.Sub(m.listStart).Seconds()
	m.listMu.Unlock()
	if elapsed <= 0 || received == 0 {
		return
	}
	rate := float64(received) / elapsed
	m.rate.Set(rate)
	if estimated > received {
		m.eta.Set(float64(estimated-received) / rate)
	} else {
		m.eta.Set(0)
	}
}

func (m *informerMetrics) WatchRestarted(reason error) {
	switch {
	case reason == nil:
		m.restartTimout.Inc()
	case errors.Is(reason, driver.ErrExpired):
		m.restartExpire.Inc()
	case errors.Is(reason, driver.ErrWatchStuck):
		m.restartStuck.Inc()
	default:
		m.restartError.Inc()
	}
}

func (m *informerMetrics) Applied(rv core.ResourceVersion) {
	m.appliedRV.Store(uint64(rv))
	m.appliedG.Set(float64(rv))
}

func (m *informerMetrics) PendingNotifications(handler string, n int) {
	m.p.pending.WithLabelValues(m.name, handler).Set(float64(n))
}

func (m *informerMetrics) HandlerPanicked(handler string) {
	m.p.panics.WithLabelValues(m.name, handler).Inc()
}

func (m *informerMetrics) DecodeFailed() { m.decode.Inc() }

// SchemaChanged implements core.SchemaMetrics.
func (m *informerMetrics) SchemaChanged(action string) {
	m.p.schemaChanges.WithLabelValues(m.name, action).Inc()
}

var _ core.SchemaMetrics = (*informerMetrics)(nil)

// lagCollector reads heads at scrape time, so lag is as fresh as the scrape
// and costs nothing between scrapes.
type lagCollector struct{ p *Provider }

func (c *lagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.p.headDesc
	ch <- c.p.lagD
}

func (c *lagCollector) Collect(ch chan<- prometheus.Metric) {
	p := c.p
	type tracked struct {
		name string
		h    Informer
		m    *informerMetrics
	}
	p.mu.Lock()
	list := make([]tracked, 0, len(p.heads))
	for name, h := range p.heads {
		list = append(list, tracked{name, h, p.informers[name]})
	}
	p.mu.Unlock()
	// Heads are read in parallel so that one slow source costs a scrape
	// one HeadTimeout, not one per source.
	var wg sync.WaitGroup
	for _, t := range list {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), p.headTimeout)
			head, err := t.h.Head(ctx)
			cancel()
			if errors.Is(err, errors.ErrUnsupported) {
				return
			}
			if err != nil {
				p.headErrors.WithLabelValues(t.name).Inc()
				return
			}
			applied := t.m.appliedRV.Load()
			lag := 0.0
			if uint64(head) > applied {
				lag = float64(uint64(head) - applied)
			}
			ch <- prometheus.MustNewConstMetric(p.headDesc, prometheus.GaugeValue, float64(head), t.name)
			ch <- prometheus.MustNewConstMetric(p.lagD, prometheus.GaugeValue, lag, t.name)
		}()
	}
	wg.Wait()
}

// NewDepthMetric implements workqueue.MetricsProvider.
func (p *Provider) NewDepthMetric(name string) workqueue.GaugeMetric {
	return p.depth.WithLabelValues(name)
}

// NewAddsMetric implements workqueue.MetricsProvider.
func (p *Provider) NewAddsMetric(name string) workqueue.CounterMetric {
	return p.adds.WithLabelValues(name)
}

// NewLatencyMetric implements workqueue.MetricsProvider.
func (p *Provider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return p.latency.WithLabelValues(name)
}

// NewWorkDurationMetric implements workqueue.MetricsProvider.
func (p *Provider) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return p.workDuration.WithLabelValues(name)
}

// NewUnfinishedWorkSecondsMetric implements workqueue.MetricsProvider.
func (p *Provider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.unfinished.WithLabelValues(name)
}

// NewLongestRunningProcessorSecondsMetric implements workqueue.MetricsProvider.
func (p *Provider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.longestRunning.WithLabelValues(name)
}

// NewRetriesMetric implements workqueue.MetricsProvider.
func (p *Provider) NewRetriesMetric(name string) workqueue.CounterMetric {
	return p.retries.WithLabelValues(name)
}

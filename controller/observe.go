package controller

// This file is the only one that knows the status page and Prometheus:
// the rest of the package sees the metric interfaces of core, workqueue
// and this package.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/workqueue"
	prommetrics "github.com/dbinformer/dbinformer/metrics/prometheus"
	"github.com/dbinformer/dbinformer/statuspage"
)

type observability struct {
	m      *Manager
	audits sync.Map // informer name → func() (core.AuditResult, bool)
	reg    *prometheus.Registry
	prom   *prommetrics.Provider
	page   *statuspage.Page
	ctrl   *promControllerMetrics
	leader prometheus.Gauge
}

// newObservability registers on a registry of its own, where nothing can
// collide: an error is a bug in this file, hence the panic.
func newObservability(m *Manager) *observability {
	o := &observability{m: m, reg: prometheus.NewRegistry(), page: statuspage.New(statuspage.Options{Title: m.opts.Name})}
	var err error
	if o.prom, err = prommetrics.New(o.reg, prommetrics.Options{}); err != nil {
		panic("controller: register the informer and queue metrics: " + err.Error())
	}
	if o.ctrl, err = newPromControllerMetrics(o.reg); err != nil {
		panic("controller: register the controller metrics: " + err.Error())
	}
	o.leader = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "dbinformer", Subsystem: "controller", Name: "leader",
		Help: "1 while this replica leads and runs its controllers, 0 while it stands by.",
	})
	o.reg.MustRegister(o.leader)
	return o
}

// Informer returns the manager's informer for (source, T), created on
// first use with the manager's metrics (Prometheus and the status page),
// an error handler that records on the page (and logs), and lag tracking
// (a source without a head gets none). opts.Name defaults to source.
func Informer[T any](m *Manager, source string, lw driver.ListerWatcher[T], opts core.InformerOptions[T]) *core.SharedIndexInformer[T] {
	o := m.obs
	if opts.Name == "" {
		opts.Name = source
	}
	if opts.Metrics == nil {
		opts.Metrics = core.MultiMetrics(o.page, o.prom)
	}
	if opts.Logger == nil {
		opts.Logger = m.log
	}
	opts.ErrorHandler = o.page.ErrorHandlerLogger(opts.Name, opts.ErrorHandler, opts.Logger)
	inf := core.InformerFor(m.factory, source, lw, opts)
	o.page.Add(inf) // name, kind, head and checkpoints come from the informer
	o.audits.Store(inf.Name(), inf.LastAudit)
	o.prom.TrackLag(inf)
	return inf
}

// Registry is the manager's Prometheus registry, for the program's own
// metrics; /metrics serves it.
func (m *Manager) Registry() *prometheus.Registry { return m.obs.reg }

// Handler serves /healthz, /readyz, /metrics and the status page under
// /debug/informers/.
func (m *Manager) Handler() http.Handler {
	o := m.obs
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(o.reg, promhttp.HandlerOpts{}))
	mux.Handle("/debug/informers/", o.page)
	mux.Handle("GET /readyz", probe(m.Ready, func() string {
		if m.IsLeader() {
			return "ok: leading\n"
		}
		return "ok: standing by, caches synced\n"
	}))
	mux.Handle("GET /healthz", probe(o.page.Live, nil))
	return mux
}

// probe answers 200 with ok (or what says tells) when check passes, else
// 503 with the check's error, redacted.
func probe(check func(context.Context) error, says func() string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := check(r.Context()); err != nil {
			http.Error(w, statuspage.Redact(err.Error()), http.StatusServiceUnavailable)
			return
		}
		msg := "ok\n"
		if says != nil {
			msg = says()
		}
		_, _ = w.Write([]byte(msg))
	})
}

// ready is the page's readiness (every informer synced), and then the
// audits': a cache whose last audit (InformerOptions.Audit) found keys
// that differ from its source and did not heal them all (HealReportOnly)
// is known to be wrong, so the replica should not serve. A healed
// divergence, a failed run (it proved nothing either way) and an informer
// without audits keep it ready.
func (o *observability) ready(ctx context.Context) error {
	if err := o.page.Ready(ctx); err != nil {
		return err
	}
	var errs []error
	o.audits.Range(func(name, last any) bool {
		if r, ok := last.(func() (core.AuditResult, bool))(); ok && r.Outcome == core.AuditDivergent && r.Healed < r.Divergent() {
			errs = append(errs, fmt.Errorf("informer %q: cache differs from its source, not healed: %s", name, r))
		}
		return true
	})
	return errors.Join(errs...)
}

func (o *observability) setLeader(on bool) {
	if on {
		o.leader.Set(1)
	} else {
		o.leader.Set(0)
	}
}

// serve serves Handler on ln until the returned function is called.
func (o *observability) serve(ln net.Listener) (stop func()) {
	if ln == nil {
		return func() {}
	}
	srv := &http.Server{Handler: o.m.Handler(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			o.m.log.Error("health and metrics server stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}
}

func (o *observability) wireController(name string, q *workqueue.MetricsProvider, c *MetricsProvider) {
	if *q == nil {
		*q = workqueue.MultiMetrics(o.page, o.prom)
	}
	if *c == nil {
		*c = o.ctrl
	}
}

// promControllerMetrics is MetricsProvider on Prometheus:
//
//	dbinformer_controller_reconciles_total{controller,result}
//	dbinformer_controller_reconcile_duration_seconds{controller}
//	dbinformer_controller_active_workers{controller}
type promControllerMetrics struct {
	reconciles *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	active     *prometheus.GaugeVec
}

var _ MetricsProvider = (*promControllerMetrics)(nil)

func newPromControllerMetrics(reg prometheus.Registerer) (*promControllerMetrics, error) {
	p := &promControllerMetrics{
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "dbinformer", Subsystem: "controller", Name: "reconciles_total",
			Help: "Reconciles by result: success, requeue, error, terminal, panic, dropped.",
		}, []string{"controller", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "dbinformer", Subsystem: "controller", Name: "reconcile_duration_seconds",
			Help: "Duration of each reconcile, whatever its result.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"controller"}),
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "dbinformer", Subsystem: "controller", Name: "active_workers",
			Help: "Reconciles running now.",
		}, []string{"controller"}),
	}
	for _, c := range []prometheus.Collector{p.reconciles, p.duration, p.active} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func (p *promControllerMetrics) NewReconcilesMetric(controller, result string) workqueue.CounterMetric {
	return p.reconciles.WithLabelValues(controller, result)
}

func (p *promControllerMetrics) NewReconcileDurationMetric(controller string) workqueue.HistogramMetric {
	return p.duration.WithLabelValues(controller)
}

func (p *promControllerMetrics) NewActiveWorkersMetric(controller string) workqueue.GaugeMetric {
	return p.active.WithLabelValues(controller)
}

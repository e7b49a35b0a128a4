package prommetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dbinformer/dbinformer/core"
)

// auditVecs are the consistency audit's series (core.InformerOptions.Audit).
// The gauges hold the last run's figures: a divergence stays visible
// (and alertable) until a run finds the cache equal again.
type auditVecs struct {
	runs      *prometheus.CounterVec // informer, result
	divergent *prometheus.GaugeVec   // informer, kind
	inFlight  *prometheus.GaugeVec
	healed    *prometheus.CounterVec
	duration  *prometheus.GaugeVec
	rows      *prometheus.GaugeVec
	version   *prometheus.GaugeVec
}

func newAuditVecs(inf func(name, help string) prometheus.Opts) *auditVecs {
	gauge := func(o prometheus.Opts, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts(o), labels)
	}
	return &auditVecs{
		runs:      prometheus.NewCounterVec(prometheus.CounterOpts(inf("audit_runs_total", "Consistency audits of the cache against the source; result is equal, divergent or failed (the audit could not compare).")), []string{"informer", "result"}),
		divergent: gauge(inf("audit_divergent_keys", "Keys the last audit found differing from the source at its version; kind is missing (in the source, not the cache), extra (in the cache, not the source) or differing."), "informer", "kind"),
		inFlight:  gauge(inf("audit_in_flight_keys", "Keys the last audit left out because a change after its version reached the cache while it read."), "informer"),
		healed:    prometheus.NewCounterVec(prometheus.CounterOpts(inf("audit_healed_keys_total", "Keys audits repaired by applying the source's state.")), []string{"informer"}),
		duration:  gauge(inf("audit_duration_seconds", "Duration of the last audit, pacing included."), "informer"),
		rows:      gauge(inf("audit_rows", "Objects the last audit read from the source."), "informer"),
		version:   gauge(inf("audit_resource_version", "The source version the last audit compared the cache at."), "informer"),
	}
}

func (a *auditVecs) collectors() []prometheus.Collector {
	return []prometheus.Collector{a.runs, a.divergent, a.inFlight, a.healed, a.duration, a.rows, a.version}
}

var _ core.AuditMetrics = (*informerMetrics)(nil)

// Audited implements core.AuditMetrics. A failed run changes only the
// counter: it says nothing about the cache, so the last comparison's
// figures stand.
func (m *informerMetrics) Audited(r core.AuditResult) {
	a := m.p.audit
	a.runs.WithLabelValues(m.name, string(r.Outcome)).Inc()
	if r.Outcome == core.AuditFailed {
		return
	}
	a.divergent.WithLabelValues(m.name, "missing").Set(float64(r.Missing))
	a.divergent.WithLabelValues(m.name, "extra").Set(float64(r.Extra))
	a.divergent.WithLabelValues(m.name, "differing").Set(float64(r.Differing))
	a.inFlight.WithLabelValues(m.name).Set(float64(r.InFlight))
	a.healed.WithLabelValues(m.name).Add(float64(r.Healed))
	a.duration.WithLabelValues(m.name).Set(r.Duration.Seconds())
	a.rows.WithLabelValues(m.name).Set(float64(r.Rows))
	a.version.WithLabelValues(m.name).Set(float64(r.Version))
}

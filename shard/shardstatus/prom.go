package shardstatus

// The only file that knows Prometheus.

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type histogram interface {
	observe(in bool, d time.Duration)
}

type promHist struct{ h *prometheus.HistogramVec }

func (p promHist) observe(in bool, d time.Duration) {
	dir := "out"
	if in {
		dir = "in"
	}
	p.h.WithLabelValues(dir).Observe(d.Seconds())
}

// Register exports r on reg: dbinformer_shard_members (live members as
// this replica sees them), dbinformer_shard_owned (shards owned and
// loaded here), dbinformer_shard_handoffs_in_progress{direction} and the
// histogram dbinformer_shard_handoff_seconds{direction} ("in": from the
// shard's assignment here to its keys loaded; "out": from the start of
// the drain to the release).
func (r *Recorder) Register(reg prometheus.Registerer) error {
	gauge := func(name, help string, f func(Status) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "dbinformer", Subsystem: "shard", Name: name, Help: help},
			func() float64 { return f(r.Status()) })
	}
	inProgress := func(in bool) func(Status) float64 {
		return func(st Status) float64 {
			n := 0
			for _, h := range st.InProgress {
				if h.In == in {
					n++
				}
			}
			return float64(n)
		}
	}
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "dbinformer", Subsystem: "shard", Name: "handoff_seconds",
		Help:    "Duration of finished shard handoffs: in, from assignment to loaded; out, from drain to release.",
		Buckets: []float64{.01, .05, .1, .25, .5, 1, 2, 5, 10, 30, 60},
	}, []string{"direction"})
	inGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "dbinformer", Subsystem: "shard", Name: "handoffs_in_progress",
		Help: "Shard handoffs in progress.", ConstLabels: prometheus.Labels{"direction": "in"}}, func() float64 { return inProgress(true)(r.Status()) })
	outGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "dbinformer", Subsystem: "shard", Name: "handoffs_in_progress",
		Help: "Shard handoffs in progress.", ConstLabels: prometheus.Labels{"direction": "out"}}, func() float64 { return inProgress(false)(r.Status()) })
	for _, c := range []prometheus.Collector{
		gauge("members", "Live members of the sharding, as this replica last read them.", func(st Status) float64 { return float64(len(st.Members)) }),
		gauge("owned", "Shards owned and loaded by this replica.", func(st Status) float64 { return float64(len(st.Owned)) }),
		inGauge, outGauge, h,
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	r.mu.Lock()
	r.hist = promHist{h}
	r.mu.Unlock()
	return nil
}

package bench_test

import (
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"testing"
	"time"
)

// size picks the full size, or the small one under -short (the smoke run
// of make test) or when DBINFORMER_BENCH_SMALL is set.
func size(full, small int) int {
	if testing.Short() || os.Getenv("DBINFORMER_BENCH_SMALL") != "" {
		return small
	}
	return full
}

// peakHeap samples the live heap every few milliseconds until stopped and
// returns the highest value above the starting one: what the pipeline held
// on top of its input.
type peakHeap struct {
	done chan struct{}
	res  chan uint64
}

// heapObjects reads the live heap into s, allocating nothing, so that the
// sampler does not show up in the allocation counts it runs beside.
func heapObjects(s []metrics.Sample) uint64 {
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func startPeakHeap() *peakHeap {
	runtime.GC()
	p := &peakHeap{done: make(chan struct{}), res: make(chan uint64, 1)}
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	base := heapObjects(s)
	go func() {
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		var peak uint64
		for {
			if h := heapObjects(s); h > peak {
				peak = h
			}
			select {
			case <-p.done:
				if peak < base {
					peak = base
				}
				p.res <- peak - base
				return
			case <-t.C:
			}
		}
	}()
	return p
}

func (p *peakHeap) stopValue() uint64 {
	close(p.done)
	return <-p.res
}

// liveHeap is the heap in use after two collections.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// side is one contender of a side-by-side benchmark.
type side struct {
	name string
	// n is the number of units (unit: "event", "item", "row") one run
	// handles; unit "" reports time only.
	n    int
	unit string
	// peak samples the heap during run and reports its peak above the
	// start.
	peak bool
	// prepare (untimed) sets a run up, run is timed, finish (untimed)
	// checks and tears down. prepare and finish may be nil.
	prepare, run, finish func()
}

// alternate runs the sides in turn, rounds times (A B A B …), so that a
// slowdown of the shared machine hits both, and reports for each side the
// median of its rounds as "<side>-s" (seconds per run) and, with a unit,
// "<side>-<unit>s/s", "<side>-allocs/<unit>" and "<side>-B/<unit>"
// (allocations of every goroutine of the process during the run).
func alternate(b *testing.B, rounds int, sides ...side) {
	b.Helper()
	type sample struct{ secs, rate, allocs, bytes, peak float64 }
	got := make([][]sample, len(sides))
	for range b.N {
		for range rounds {
			for i, s := range sides {
				if s.prepare != nil {
					s.prepare()
				}
				var ph *peakHeap
				if s.peak {
					ph = startPeakHeap()
				}
				runtime.GC()
				var m0, m1 runtime.MemStats
				runtime.ReadMemStats(&m0)
				t0 := time.Now()
				s.run()
				d := time.Since(t0)
				runtime.ReadMemStats(&m1)
				smp := sample{secs: d.Seconds()}
				if s.n > 0 {
					smp.rate = float64(s.n) / d.Seconds()
					smp.allocs = float64(m1.Mallocs-m0.Mallocs) / float64(s.n)
					smp.bytes = float64(m1.TotalAlloc-m0.TotalAlloc) / float64(s.n)
				}
				if ph != nil {
					smp.peak = float64(ph.stopValue()) / (1 << 20)
				}
				if s.finish != nil {
					s.finish()
				}
				got[i] = append(got[i], smp)
			}
		}
	}
	med := func(xs []sample, f func(sample) float64) float64 {
		v := make([]float64, len(xs))
		for i, x := range xs {
			v[i] = f(x)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	for i, s := range sides {
		b.ReportMetric(med(got[i], func(x sample) float64 { return x.secs }), s.name+"-s")
		if s.unit != "" {
			b.ReportMetric(med(got[i], func(x sample) float64 { return x.rate }), s.name+"-"+s.unit+"s/s")
			b.ReportMetric(med(got[i], func(x sample) float64 { return x.allocs }), s.name+"-allocs/"+s.unit)
			b.ReportMetric(med(got[i], func(x sample) float64 { return x.bytes }), s.name+"-B/"+s.unit)
		}
		if s.peak {
			b.ReportMetric(med(got[i], func(x sample) float64 { return x.peak }), s.name+"-peak-heap-MB")
		}
	}
}

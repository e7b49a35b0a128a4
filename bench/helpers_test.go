package bench_test

import (
	"os"
	"runtime"
	"runtime/metrics"
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

// allocMeter counts what the whole process allocates between start and
// stop, every goroutine included, which is what an informer's cost is.
type allocMeter struct {
	unit string // what one of n is: "event" unless set
	m0   runtime.MemStats
	t0   time.Time
}

func (a *allocMeter) start() {
	runtime.ReadMemStats(&a.m0)
	a.t0 = time.Now()
}

// stop reports units/s, allocs/unit and B/unit for n units (events).
func (a *allocMeter) stop(b *testing.B, n int) time.Duration {
	d := time.Since(a.t0)
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	u := a.unit
	if u == "" {
		u = "event"
	}
	b.ReportMetric(float64(n)/d.Seconds(), u+"s/s")
	b.ReportMetric(float64(m1.Mallocs-a.m0.Mallocs)/float64(n), "allocs/"+u)
	b.ReportMetric(float64(m1.TotalAlloc-a.m0.TotalAlloc)/float64(n), "B/"+u)
	return d
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

func (p *peakHeap) stop(b *testing.B) {
	close(p.done)
	b.ReportMetric(float64(<-p.res)/(1<<20), "peak-heap-MB")
}

// liveHeap is the heap in use after two collections.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

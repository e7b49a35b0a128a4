package bench_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core"
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

// steadyHeap is the lowest of three liveHeap samples 300 ms apart: the
// heap a process holds steadily, not one a checkpoint being written or a
// batch being applied adds to for a moment.
func steadyHeap() uint64 {
	h := liveHeap()
	for range 2 {
		time.Sleep(300 * time.Millisecond)
		h = min(h, liveHeap())
	}
	return h
}

// writeHeapProfile writes the heap profile name.pprof into the directory
// DBINFORMER_HEAP_PROFILE names, if it names one.
func writeHeapProfile(name string) {
	d := os.Getenv("DBINFORMER_HEAP_PROFILE")
	if d == "" {
		return
	}
	if f, err := os.Create(filepath.Join(d, name+".pprof")); err == nil {
		pprof.WriteHeapProfile(f)
		f.Close()
	}
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

// printRounds (DBINFORMER_BENCH_ROUNDS set) prints each round of
// alternate to stderr, for looking at the spread behind a median.
var printRounds = os.Getenv("DBINFORMER_BENCH_ROUNDS") != ""

// alternate runs the sides in turn, rounds times (A B A B …), so that a
// slowdown of the shared machine hits both, and reports for each side the
// median of its rounds as "<side>-s" (seconds per run) and, with a unit,
// "<side>-<unit>s/s", "<side>-allocs/<unit>" and "<side>-B/<unit>"
// (allocations of every goroutine of the process during the run). It
// returns the sides' median seconds by name, for metrics derived from
// them.
func alternate(b *testing.B, rounds int, sides ...side) (secs map[string]float64) {
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
				if printRounds {
					fmt.Fprintf(os.Stderr, "round %s %s %.4f s\n", b.Name(), s.name, d.Seconds())
				}
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
	med := median[sample]
	secs = make(map[string]float64, len(sides))
	for i, s := range sides {
		secs[s.name] = med(got[i], func(x sample) float64 { return x.secs })
		b.ReportMetric(secs[s.name], s.name+"-s")
		if s.unit != "" {
			b.ReportMetric(med(got[i], func(x sample) float64 { return x.rate }), s.name+"-"+s.unit+"s/s")
			b.ReportMetric(med(got[i], func(x sample) float64 { return x.allocs }), s.name+"-allocs/"+s.unit)
			b.ReportMetric(med(got[i], func(x sample) float64 { return x.bytes }), s.name+"-B/"+s.unit)
		}
		if s.peak {
			b.ReportMetric(med(got[i], func(x sample) float64 { return x.peak }), s.name+"-peak-heap-MB")
		}
	}
	return secs
}

// median returns the median of f over xs (the upper one of an even count).
func median[S any](xs []S, f func(S) float64) float64 {
	v := make([]float64, len(xs))
	for i, x := range xs {
		v[i] = f(x)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// medianOf returns the median of xs, leaving xs as it was.
func medianOf(xs []float64) float64 {
	return median(xs, func(x float64) float64 { return x })
}

// processCPU is the CPU time (user and system) the process has used: the
// in-process servers' as well as the clients'.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuSides records the process CPU time of each run of the sides it
// wraps and reports the median per side as "<side>-cpu-s". On a machine
// shared with other work the wall time of a run counts the time it waited
// for a core: the same watch took 1.2 s to 3.3 s in one process under load
// 10, and neither the median nor the shortest of five runs per side kept
// the ratio of the two sides within 10%. Its CPU time (server and client:
// both run here) counts only the work, and shows what the code costs when
// the wall times straddle a target by more than the code can explain.
type cpuSides map[string][]float64

func (c cpuSides) wrap(b *testing.B, name string, run func()) func() {
	return func() {
		c0 := processCPU(b)
		run()
		c[name] = append(c[name], (processCPU(b) - c0).Seconds())
	}
}

func (c cpuSides) report(b *testing.B) {
	for name, xs := range c {
		b.ReportMetric(medianOf(xs), name+"-cpu-s")
	}
}

// runSynced runs inf until the returned stop, and waits for its cache to
// sync.
func runSynced[T any](b *testing.B, inf *core.SharedIndexInformer[T]) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = inf.Run(ctx) })
	stop = func() { cancel(); wg.Wait() }
	if err := inf.WaitForCacheSync(context.Background()); err != nil {
		stop()
		b.Fatal(err)
	}
	return stop
}

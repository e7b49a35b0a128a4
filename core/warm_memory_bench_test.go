package core_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/dbinformer/dbinformer/core"
	ckpt "github.com/dbinformer/dbinformer/core/checkpoint"
	codecs "github.com/dbinformer/dbinformer/core/codec"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/core/memory"
)

// memRow is a table row with text and numeric columns.
type memRow struct {
	ID     int64
	Org    string
	Team   string
	N      int32
	Amount float64
	Note   string
	Body   string
}

func (r memRow) clone() memRow {
	r.Org, r.Team = strings.Clone(r.Org), strings.Clone(r.Team)
	r.Note, r.Body = strings.Clone(r.Note), strings.Clone(r.Body)
	return r
}

func memRowOf(id, pass int) memRow {
	s := strconv.Itoa(id)
	p := strconv.Itoa(pass)
	return memRow{
		ID: int64(id), Org: "org-" + strconv.Itoa(id%100), Team: "team-" + strconv.Itoa(id%1000),
		N: int32(pass), Amount: float64(id) / 7,
		Note: "note " + p + " of row " + s + " 0123456789abcdef",
		Body: "body of row " + s + " after pass " + p + ": the quick brown fox jumps over the lazy dog",
	}
}

// freshSource hands out objects with strings of their own, as a database
// adapter decoding rows does (a memory.Source hands out the objects it
// stores, which a cache would then share with it). Its capabilities are
// the memory.Source's, through Unwrap.
type freshSource struct{ src *memory.Source[memRow] }

func (f freshSource) Unwrap() driver.ListerWatcher[memRow] { return f.src }

func (f freshSource) List(ctx context.Context, sink driver.ListSink[memRow]) (core.ResourceVersion, error) {
	emit := sink.Emit
	sink.Emit = func(ev driver.Event[memRow]) error {
		ev.Object = ev.Object.clone()
		return emit(ev)
	}
	return f.src.List(ctx, sink)
}

func (f freshSource) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[memRow]) error {
	emit := opts.Emit
	opts.Emit = func(batch []driver.Event[memRow]) error {
		fresh := make([]driver.Event[memRow], len(batch))
		for i, ev := range batch {
			ev.Object = ev.Object.clone()
			fresh[i] = ev
		}
		return emit(fresh)
	}
	return f.src.Watch(ctx, from, opts)
}

// heapAfterGC is the live heap (HeapAlloc) and the heap in use after two
// collections.
func heapAfterGC() (alloc, inuse uint64) {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, ms.HeapInuse
}

// BenchmarkWarmRestartMemory compares the heap an informer holds after a
// warm restart with the heap after a cold start (a list) of the same rows,
// in one process: 200,000 rows (20,000 under -short; DBINFORMER_MEM_ROWS
// sets another number) with text and numeric fields, the Binary codec, a
// checkpoint store on disk. Each start is followed by passes that update
// every row once (a checkpoint saved after each, as a checkpointing
// informer does every Interval); then the informer's heap is measured:
// the live heap after GC while it runs, less the same after it stopped
// (the source's rows are in both). warm-MB and cold-MB are those, after
// the churn; warm/cold their ratio (target ≤ 1.1); loaded-warm/cold the
// same right after the start, before any change. "lazy" has no index (the
// loaded objects are decoded when first read), "indexed" one index.
func BenchmarkWarmRestartMemory(b *testing.B) {
	rows := 200_000
	if testing.Short() {
		rows = 20_000
	}
	if v, _ := strconv.Atoi(os.Getenv("DBINFORMER_MEM_ROWS")); v > 0 {
		rows = v
	}
	passes := 2
	for _, indexed := range []bool{false, true} {
		name := "lazy"
		if indexed {
			name = "indexed"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				warmRestartMemory(b, rows, passes, indexed)
			}
		})
	}
}

func warmRestartMemory(b *testing.B, rows, passes int, indexed bool) {
	ctx := context.Background()
	// The history is trimmed; writes wait for the informer to apply them
	// every 10,000 rows, so that its watch never falls behind it.
	src := memory.New[memRow](memory.Options{HistoryLimit: 50_000})
	ops := make([]memory.Op[memRow], 0, 1000)
	write := func(pass int, inf *core.SharedIndexInformer[memRow]) {
		for id := 1; id <= rows; id++ {
			ops = append(ops, memory.PutOp(strconv.Itoa(id), memRowOf(id, pass)))
			if len(ops) == cap(ops) || id == rows {
				rv, err := src.Apply(ops...)
				if err != nil {
					b.Fatal(err)
				}
				ops = ops[:0]
				if inf != nil && (id%10_000 == 0 || id == rows) {
					if err := inf.WaitFor(ctx, rv); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
	}
	write(0, nil)
	codec, err := codecs.NewBinary[memRow]()
	if err != nil {
		b.Fatal(err)
	}
	dir := filepath.Join(b.TempDir(), "ckpt")
	store, err := ckpt.NewDirStore(dir)
	if err != nil {
		b.Fatal(err)
	}
	options := func(checkpoint bool) core.InformerOptions[memRow] {
		o := core.InformerOptions[memRow]{Name: "rows", ErrorHandler: func(err error) { b.Logf("informer: %v", err) }}
		if checkpoint {
			o.Checkpoint = &core.CheckpointOptions[memRow]{Store: store, Codec: codec, Interval: -1}
		}
		if indexed {
			o.Indexers = core.Indexers[memRow]{"org": func(r memRow) ([]string, error) { return []string{r.Org}, nil }}
		}
		return o
	}
	// run starts an informer, waits for it to sync, measures, churns,
	// measures again, stops it and measures once more.
	pass := 0
	run := func(checkpoint bool, wantLists int) (loaded, churned uint64) {
		spy := informertest.Wrap[memRow](freshSource{src})
		inf := core.NewSharedIndexInformer[memRow](spy, options(checkpoint))
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- inf.Run(rctx) }()
		if err := inf.WaitForCacheSync(ctx); err != nil {
			b.Fatal(err)
		}
		if n := inf.Indexer().Len(); n != rows {
			b.Fatalf("cached %d rows, want %d", n, rows)
		}
		loaded, _ = heapAfterGC()
		for range passes {
			pass++
			write(pass, inf)
			if checkpoint {
				if err := inf.Checkpoint(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
		if r, _ := inf.Lister().Get("1"); r.N != int32(pass) {
			b.Fatalf("row 1 at pass %d, want %d", r.N, pass)
		}
		churned, _ = heapAfterGC()
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		if n := spy.Lists(); n != wantLists {
			b.Fatalf("%d lists, want %d", n, wantLists)
		}
		inf, spy = nil, nil
		after, _ := heapAfterGC()
		if os.Getenv("DBINFORMER_MEM_DEBUG") != "" {
			b.Logf("checkpoint=%v: loaded %d, churned %d, stopped %d", checkpoint, loaded, churned, after)
		}
		return loaded - min(loaded, after), churned - min(churned, after)
	}
	// The first start lists and saves the checkpoint the warm start loads.
	run(true, 1)
	warmLoaded, warm := run(true, 0)
	coldLoaded, cold := run(false, 1)
	runtime.KeepAlive(src) // in the heap of every measurement
	b.ReportMetric(float64(warm)/1e6, "warm-MB")
	b.ReportMetric(float64(cold)/1e6, "cold-MB")
	b.ReportMetric(float64(warm)/float64(cold), "warm/cold")
	b.ReportMetric(float64(warmLoaded)/float64(coldLoaded), "loaded-warm/cold")
}

// BenchmarkCheckpointSave times a checkpoint save (Binary, to a directory)
// of a synced informer over 1,000,000 memRows (100,000 under -short): per
// op, one save after one change.
func BenchmarkCheckpointSave(b *testing.B) {
	rows := 1_000_000
	if testing.Short() {
		rows = 100_000
	}
	ctx := context.Background()
	src := memory.New[memRow](memory.Options{HistoryLimit: 10_000})
	ops := make([]memory.Op[memRow], 0, 1000)
	for id := 1; id <= rows; id++ {
		ops = append(ops, memory.PutOp(strconv.Itoa(id), memRowOf(id, 0)))
		if len(ops) == cap(ops) || id == rows {
			if _, err := src.Apply(ops...); err != nil {
				b.Fatal(err)
			}
			ops = ops[:0]
		}
	}
	codec, err := codecs.NewBinary[memRow]()
	if err != nil {
		b.Fatal(err)
	}
	store, err := ckpt.NewDirStore(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	inf := core.NewSharedIndexInformer[memRow](freshSource{src}, core.InformerOptions[memRow]{
		Name: "rows", Checkpoint: &core.CheckpointOptions[memRow]{Store: store, Codec: codec, Interval: -1},
	})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- inf.Run(rctx) }()
	defer func() { cancel(); <-done }()
	if err := inf.WaitForCacheSync(ctx); err != nil {
		b.Fatal(err)
	}
	pass := 0
	for b.Loop() {
		b.StopTimer()
		pass++
		if err := inf.WaitFor(ctx, src.Put("1", memRowOf(1, pass))); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := inf.Checkpoint(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

package bench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	"github.com/dbinformer/dbinformer/adapters/nats/natstest"
	"github.com/dbinformer/dbinformer/core"
	codecs "github.com/dbinformer/dbinformer/core/codec"
	"github.com/dbinformer/dbinformer/filter"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// filterKeys is the bucket size of BenchmarkPartialSync: 1,000,000, the
// small size under -short, or DBINFORMER_BENCH_KEYS.
func filterKeys() int {
	if s := os.Getenv("DBINFORMER_BENCH_KEYS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n >= 100 {
			return n
		}
	}
	return size(1_000_000, 20_000)
}

// BenchmarkPartialSync (issue 22): a filter matching 1% of a large source,
// pushed down, against the whole source; one sub-benchmark per adapter
// (partialSyncNATS, partialSyncPostgres).
func BenchmarkPartialSync(b *testing.B) {
	b.Run("nats", partialSyncNATS)
	b.Run("postgres", partialSyncPostgres)
}

// partialSyncNATS: a NATS KV bucket of filterKeys() keys
// "t<i%100>.k<i>", synced whole ("all") and through a filter matching 1%
// (filter.Prefix(filter.Key, "t7."), pushed down as the subject filter,
// "filtered"), each in a process of its own, alternating. Reported: each
// side's median initial sync time (List into an informer until HasSynced)
// and steady heap (the live heap with the synced informer held, less the
// process's before it), their ratios filtered/all (target ≤ 0.05), the
// same read by nats.go's own KV watcher, whole and filtered, in processes
// of their own too (the floor: what a 1% read costs the server, whose
// every block holds some of the 1%), and the values the filtered
// informer's codec decoded while 10,000 updates touched only non-matching
// keys (target 0: the server does not send them), after WaitFor reached
// the last of them.
func partialSyncNATS(b *testing.B) {
	keys := filterKeys()
	rounds := size(3, 1)
	srv := harness.StartNATS(b)
	h := natstest.NewKV(b, natstest.Config{Server: srv, History: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	js := h.Writer()
	bucket := h.Bucket().Bucket()
	settle := func() {
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			b.Fatal("async publishes not acknowledged")
		}
	}
	key := func(i int) string { return "t" + strconv.Itoa(i%100) + ".k" + strconv.Itoa(i) }
	put := func(i, version int) {
		_, o := newItem(i)
		o.N = version
		v, _ := json.Marshal(o)
		if _, err := js.PublishAsync("$KV."+bucket+"."+key(i), v); err != nil {
			b.Fatal(err)
		}
		if i%1000 == 999 {
			settle()
		}
	}
	for i := range keys {
		put(i, 1)
	}
	settle()
	matching := 0
	for i := range keys {
		if i%100 == 7 {
			matching++
		}
	}
	f := partialNATSFilter()
	var decoded atomic.Int64
	codec := codecs.Funcs[item]{DecodeFunc: func(d []byte) (item, error) {
		decoded.Add(1)
		var it item
		err := json.Unmarshal(d, &it)
		return it, err
	}}
	newLW := func(where *filter.Filter[item]) *natsinformer.KV[item] {
		lw, err := natsinformer.NewKV(ctx, h.ListenJetStream(), bucket, natsinformer.KVOptions[item]{Where: where, Codec: codec, BatchSize: 4096})
		if err != nil {
			b.Fatal(err)
		}
		return lw
	}
	// sync runs one informer to HasSynced and returns it running, with
	// its stop function.
	sync := func(lw *natsinformer.KV[item], want int) (*core.SharedIndexInformer[item], func()) {
		inf := core.NewSharedIndexInformer[item](lw, core.InformerOptions[item]{Name: "bench", MinWatchTimeout: time.Hour})
		rctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = inf.Run(rctx) }()
		if err := inf.WaitForCacheSync(ctx); err != nil {
			b.Fatal(err)
		}
		if n := inf.Lister().Len(); n != want {
			b.Fatalf("synced %d keys, want %d", n, want)
		}
		return inf, func() { stop(); <-done }
	}
	// Each side runs in a process of its own (partialNATSChild): the
	// server runs in this one, and its filtered reads of the 1M-message
	// stream take 8 MB block buffers from its pools (41 of the 42 MB a
	// filtered informer seemed to hold, measured here in session 22).
	spec := func(filtered bool) partialNATSSpec {
		if filtered {
			return partialNATSSpec{URL: srv.URL(), Bucket: bucket, Filtered: true, Want: matching}
		}
		return partialNATSSpec{URL: srv.URL(), Bucket: bucket, Want: keys}
	}
	raw := func(filtered bool) float64 {
		s := spec(filtered)
		s.Raw = true
		return measurePartialNATS(b, s).secs
	}
	for range b.N {
		reportPartialSync(b, rounds,
			func() syncSample { return measurePartialNATS(b, spec(false)) },
			func() syncSample { return measurePartialNATS(b, spec(true)) }, raw)
	}

	// Writes that touch only non-matching keys: nothing reaches the codec.
	inf, stop := sync(newLW(f), matching)
	defer stop()
	decoded.Store(0)
	const writes = 10_000
	for i := range writes {
		j := i % keys
		if j%100 == 7 {
			j++ // a matching key: skip to its neighbour
		}
		put(j, 2)
	}
	settle()
	head, err := h.Head(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if err := inf.WaitFor(ctx, head); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(decoded.Load()), "decoded-nonmatching")
	b.ReportMetric(writes, "writes-nonmatching")
}

// syncSample is one partial-sync run: time to synced and steady heap.
type syncSample struct{ secs, heapMB float64 }

// reportPartialSync runs the whole and the filtered sync rounds times each,
// alternating, and reports each side's median time and heap and their
// ratios filtered/whole. With raw (the source's own client reading the same
// rows, whole and filtered, no informer: its time in seconds), each round
// runs it too, and the rows say what a 1% read costs the source itself:
// raw-time-ratio is the floor under time-ratio, and filtered-vs-raw what
// the filtered informer adds to it.
func reportPartialSync(b *testing.B, rounds int, whole, filtered func() syncSample, raw func(filtered bool) float64) {
	var all, part []syncSample
	var rawAll, rawPart []float64
	for range rounds {
		all = append(all, whole())
		part = append(part, filtered())
		if raw != nil {
			rawAll = append(rawAll, raw(false))
			rawPart = append(rawPart, raw(true))
		}
	}
	med := median[syncSample]
	secs := func(s syncSample) float64 { return s.secs }
	mb := func(s syncSample) float64 { return s.heapMB }
	b.ReportMetric(med(all, secs), "all-s")
	b.ReportMetric(med(part, secs), "filtered-s")
	b.ReportMetric(med(part, secs)/med(all, secs), "time-ratio")
	b.ReportMetric(med(all, mb), "all-MB")
	b.ReportMetric(med(part, mb), "filtered-MB")
	b.ReportMetric(med(part, mb)/med(all, mb), "heap-ratio")
	if raw != nil {
		b.ReportMetric(medianOf(rawAll), "raw-all-s")
		b.ReportMetric(medianOf(rawPart), "raw-filtered-s")
		b.ReportMetric(medianOf(rawPart)/medianOf(rawAll), "raw-time-ratio")
		b.ReportMetric(med(part, secs)/medianOf(rawPart), "filtered-vs-raw")
	}
}

// partialNATSFilter is the filter of partialSyncNATS: 1% of its keys.
func partialNATSFilter() *filter.Filter[item] {
	return filter.MustNew[item](filter.Prefix(filter.Key, "t7."))
}

// partialNATSEnv names the spec of one side of partialSyncNATS run in a
// process of its own, so that the heap it reports is the informer's, not
// the in-process nats-server's.
const partialNATSEnv = "DBINFORMER_PARTIAL_NATS_CHILD"

// partialNATSSpec is one side to measure: the whole bucket or the filter,
// through an informer or (Raw) nats.go's KV watcher.
type partialNATSSpec struct {
	URL, Bucket   string
	Filtered, Raw bool
	Want          int // keys the synced informer holds
}

// measurePartialNATS runs one side in its own process and returns its
// report.
func measurePartialNATS(b *testing.B, spec partialNATSSpec) syncSample {
	b.Helper()
	cmd, out := startChild(b, partialNATSEnv, spec)
	var r struct{ Secs, HeapMB float64 }
	if err := json.NewDecoder(out).Decode(&r); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		b.Fatalf("partial sync process: no report: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		b.Fatalf("partial sync process: %v", err)
	}
	return syncSample{secs: r.Secs, heapMB: r.HeapMB}
}

// partialNATSChild is one side's process (TestMain runs it through
// runChild): it syncs an informer over the bucket (through the filter, or
// whole) and prints as JSON the time from the ListerWatcher made to
// HasSynced and the live heap the synced informer holds (the lowest of
// three samples less the heap before it); for Raw, the time nats.go's KV
// watcher takes to read the same values.
func partialNATSChild(s partialNATSSpec) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base := liveHeap()
	nc, js, err := dialJetStream(s.URL)
	if err != nil {
		return err
	}
	defer nc.Close()
	if s.Raw {
		kv, err := js.KeyValue(ctx, s.Bucket)
		if err != nil {
			return err
		}
		keys := ">"
		if s.Filtered {
			keys = "t7.>"
		}
		t0 := time.Now()
		if err := rawKVRead(kv, keys, s.Want); err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(struct{ Secs, HeapMB float64 }{Secs: time.Since(t0).Seconds()})
	}
	opts := natsinformer.KVOptions[item]{BatchSize: 4096}
	if s.Filtered {
		opts.Where = partialNATSFilter()
	}
	lw, err := natsinformer.NewKV(ctx, js, s.Bucket, opts)
	if err != nil {
		return err
	}
	t0 := time.Now()
	inf := core.NewSharedIndexInformer[item](lw, core.InformerOptions[item]{Name: "bench", MinWatchTimeout: time.Hour})
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	if err := inf.WaitForCacheSync(ctx); err != nil {
		return err
	}
	secs := time.Since(t0).Seconds()
	if n := inf.Lister().Len(); n != s.Want {
		return fmt.Errorf("synced %d keys, want %d", n, s.Want)
	}
	held := steadyHeap()
	writeHeapProfile(map[bool]string{true: "partial-filtered", false: "partial-whole"}[s.Filtered])
	runtime.KeepAlive(inf)
	cancel()
	<-done
	return json.NewEncoder(os.Stdout).Encode(struct{ Secs, HeapMB float64 }{secs, float64(held-min(held, base)) / (1 << 20)})
}

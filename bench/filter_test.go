package bench_test

import (
	"context"
	"encoding/json"
	"os"
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
// "filtered"), in the same process, alternating. Reported: each side's
// median initial sync time (List into an informer until HasSynced) and
// steady heap (live heap after GC with the synced informer held, less the
// live heap once it is stopped and dropped: the nats-server runs in this
// process, and its block caches are in the same heap), their ratios filtered/all (target ≤ 0.05), and the
// values the filtered informer's codec decoded while 10,000 updates
// touched only non-matching keys (target 0: the server does not send
// them), after WaitFor reached the last of them.
func partialSyncNATS(b *testing.B) {
	keys := filterKeys()
	rounds := size(3, 1)
	h := natstest.NewKV(b, natstest.Config{Server: harness.StartNATS(b), History: 1})
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
	f := filter.MustNew[item](filter.Prefix(filter.Key, "t7."))
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
	// The server runs in this process: its caches of the stream's blocks
	// are in the heap too. What the informer holds is the heap with the
	// synced informer less the heap once it is stopped and dropped.
	run := func(where *filter.Filter[item], want int) syncSample {
		lw := newLW(where)
		t0 := time.Now()
		inf, stop := sync(lw, want)
		d := time.Since(t0)
		heap := liveHeap()
		_ = inf.Lister().Len() // the informer is live while the heap is read
		stop()
		inf, lw = nil, nil
		after := liveHeap()
		return syncSample{secs: d.Seconds(), heapMB: (float64(heap) - float64(after)) / (1 << 20)}
	}
	for range b.N {
		reportPartialSync(b, rounds, func() syncSample { return run(nil, keys) }, func() syncSample { return run(f, matching) })
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
// ratios filtered/whole.
func reportPartialSync(b *testing.B, rounds int, whole, filtered func() syncSample) {
	var all, part []syncSample
	for range rounds {
		all = append(all, whole())
		part = append(part, filtered())
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
}

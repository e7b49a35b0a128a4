package natsinformer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/integration/harness"
)

const benchKeys = 10000

func benchBucket(b *testing.B) (jetstream.JetStream, jetstream.KeyValue) {
	srv := harness.StartNATS(b)
	js := srv.JetStream(b)
	kv := newBucket(b, js, jetstream.KeyValueConfig{History: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for i := range benchKeys {
		if _, err := put(ctx, kv, fmt.Sprintf("k%05d", i), i); err != nil {
			b.Fatal(err)
		}
	}
	return js, kv
}

// BenchmarkKVList lists a 10k-key bucket through the adapter.
func BenchmarkKVList(b *testing.B) {
	js, kv := benchBucket(b)
	ctx := context.Background()
	lw, err := natsinformer.NewKV(ctx, js, kv.Bucket(), natsinformer.KVOptions[item]{})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		oursList(b, lw, benchKeys)
	}
}

// oursList lists lw and fails unless it emitted want keys.
func oursList[V any](b *testing.B, lw *natsinformer.KV[V], want int) {
	n := 0
	if _, err := lw.List(context.Background(), driver.ListSink[V]{Emit: func(driver.Event[V]) error { n++; return nil }}); err != nil {
		b.Fatal(err)
	}
	if n != want {
		b.Fatalf("listed %d keys, want %d", n, want)
	}
}

// BenchmarkKVListRaw reads the same bucket with nats.go's own KV watcher
// (initial values up to the nil marker) and decodes each value: the floor
// the adapter is measured against.
func BenchmarkKVListRaw(b *testing.B) {
	_, kv := benchBucket(b)
	b.ResetTimer()
	for b.Loop() {
		if n := rawRead[item](b, kv, benchKeys, true); n != benchKeys {
			b.Fatalf("read %d keys", n)
		}
	}
}

// rawRead reads values of every key with nats.go's KV watcher, decoding
// each as a V, until it has read want or, with toMarker, until the end of
// the initial values; it returns how many it read.
func rawRead[V any](b *testing.B, kv jetstream.KeyValue, want int, toMarker bool, opts ...jetstream.WatchOpt) int {
	w, err := kv.Watch(context.Background(), ">", opts...)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	n := 0
	for e := range w.Updates() {
		if e == nil {
			if toMarker {
				break
			}
			continue
		}
		var v V
		if err := json.Unmarshal(e.Value(), &v); err != nil {
			b.Fatal(err)
		}
		if n++; n == want {
			break
		}
	}
	return n
}

// BenchmarkKVWatchSkips measures what the check for purged values costs a
// watch: with "skips", each watched write follows a write outside the
// watch's prefix, so every message it receives skips a stream sequence and
// is checked (one stream-info request); "contiguous" writes only watched
// keys. Each iteration is one watched write (and its acknowledgement) up to
// its event; compare the two as a ratio.
func BenchmarkKVWatchSkips(b *testing.B) {
	for _, other := range []bool{false, true} {
		name := "contiguous"
		if other {
			name = "skips"
		}
		b.Run(name, func(b *testing.B) { benchWatch(b, other) })
	}
}

func benchWatch(b *testing.B, other bool) {
	srv := harness.StartNATS(b)
	js := srv.JetStream(b)
	kv := newBucket(b, js, jetstream.KeyValueConfig{History: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	lw, err := natsinformer.NewKV(ctx, js, kv.Bucket(), natsinformer.KVOptions[item]{Prefix: "a."})
	if err != nil {
		b.Fatal(err)
	}
	rv, err := lw.List(ctx, driver.ListSink[item]{Emit: func(driver.Event[item]) error { return nil }})
	if err != nil {
		b.Fatal(err)
	}
	got := make(chan struct{}, 1)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- lw.Watch(wctx, rv, driver.WatchOptions[item]{Emit: func(evs []driver.Event[item]) error {
			for _, ev := range evs {
				if ev.Type != driver.Bookmark {
					got <- struct{}{}
				}
			}
			return nil
		}})
	}()
	defer func() { stop(); <-done }()
	n := 0
	for b.Loop() {
		n++
		if other {
			if _, err := put(ctx, kv, "b.x", n); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := put(ctx, kv, "a.k", n); err != nil {
			b.Fatal(err)
		}
		select {
		case <-got:
		case err := <-done:
			b.Fatal(err)
		}
	}
}

// syncItem has bench.item's shape (bench.BenchmarkNATSKV's values).
type syncItem struct {
	Name, Org, Team string
	N               int
}

// BenchmarkKVSync is bench.BenchmarkNATSKV's two reads: a History 1
// bucket of 100k keys below "w.", then one update of each; "list" reads
// the bucket whole, "watch" the updates from the revision before them;
// "ours" with the adapter, "raw" with nats.go's KV watcher, both decoding
// the same JSON. Each side has a sub-benchmark of its own, so that a CPU
// profile can be taken of one side alone (the in-process server's share
// included), and "both" runs the two in turn for their ratio.
func BenchmarkKVSync(b *testing.B) {
	const keys = 100_000
	srv := harness.StartNATS(b)
	js := srv.JetStream(b)
	kv := newBucket(b, js, jetstream.KeyValueConfig{History: 1})
	ctx := context.Background()
	write := func(version int) {
		for i := range keys {
			k := fmt.Sprintf("namespace/object-%d", i)
			v, _ := json.Marshal(syncItem{Name: k, Org: fmt.Sprintf("org-%d", i%100), Team: fmt.Sprintf("team-%d", i%1000), N: version})
			if _, err := js.PublishAsync(fmt.Sprintf("$KV.%s.w.k%d", kv.Bucket(), i), v); err != nil {
				b.Fatal(err)
			}
			if i%1000 == 999 {
				<-js.PublishAsyncComplete()
			}
		}
		<-js.PublishAsyncComplete()
	}
	write(1)
	st, err := kv.Status(ctx)
	if err != nil {
		b.Fatal(err)
	}
	mid := st.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq
	write(2)
	lw, err := natsinformer.NewKV(ctx, js, kv.Bucket(), natsinformer.KVOptions[syncItem]{Prefix: "w."})
	if err != nil {
		b.Fatal(err)
	}
	oursWatch := func(b *testing.B) {
		n := 0
		err := lw.Watch(ctx, core.ResourceVersion(mid), driver.WatchOptions[syncItem]{Emit: func(batch []driver.Event[syncItem]) error {
			for _, ev := range batch {
				if ev.Type != driver.Bookmark {
					n++
				}
			}
			if n >= keys {
				return context.Canceled
			}
			return nil
		}})
		if err != context.Canceled {
			b.Fatal(err)
		}
	}
	sides := map[string][2]func(*testing.B){
		"list":  {func(b *testing.B) { oursList(b, lw, keys) }, func(b *testing.B) { rawRead[syncItem](b, kv, keys, false) }},
		"watch": {oursWatch, func(b *testing.B) { rawRead[syncItem](b, kv, keys, false, jetstream.ResumeFromRevision(mid+1)) }},
	}
	for _, read := range []string{"list", "watch"} {
		ours, raw := sides[read][0], sides[read][1]
		b.Run(read+"/ours", func(b *testing.B) {
			for b.Loop() {
				ours(b)
			}
		})
		b.Run(read+"/raw", func(b *testing.B) {
			for b.Loop() {
				raw(b)
			}
		})
		// both: the two sides one after the other in each iteration, on a
		// machine whose load changes by the second; ratio is the median
		// of the iterations' ours/raw in wall time, cpu-ratio in process
		// CPU time (server included).
		b.Run(read+"/both", func(b *testing.B) {
			var wall, cpu []float64
			for b.Loop() {
				w0, c0 := time.Now(), processCPU(b)
				ours(b)
				w1, c1 := time.Now(), processCPU(b)
				raw(b)
				w2, c2 := time.Now(), processCPU(b)
				wall = append(wall, w1.Sub(w0).Seconds()/w2.Sub(w1).Seconds())
				cpu = append(cpu, float64(c1-c0)/float64(c2-c1))
			}
			slices.Sort(wall)
			slices.Sort(cpu)
			b.ReportMetric(wall[len(wall)/2], "ratio")
			b.ReportMetric(cpu[len(cpu)/2], "cpu-ratio")
		})
	}
}

// processCPU is the CPU time (user and system) the process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

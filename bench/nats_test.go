package bench_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// natsFill puts keys JSON items into the bucket (the initial state), then
// updates every key once (the changes), publishing asynchronously to the
// bucket's subjects, and returns the revision between the two.
func natsFill(b *testing.B, js jetstream.JetStream, bucket string, keys int) (mid uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	write := func(version int) {
		for i := range keys {
			_, o := newItem(i)
			o.N = version
			v, _ := json.Marshal(o)
			if _, err := js.PublishAsync("$KV."+bucket+".k"+strconv.Itoa(i), v); err != nil {
				b.Fatal(err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			b.Fatal("async publishes not acknowledged")
		}
	}
	write(1)
	s, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		b.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		b.Fatal(err)
	}
	write(2)
	return info.State.LastSeq
}

func rawNATSWatch(b *testing.B, kv jetstream.KeyValue, want int, opts ...jetstream.WatchOpt) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := kv.WatchAll(ctx, opts...)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	n := 0
	for e := range w.Updates() {
		if e == nil { // end of the initial values
			if n == want {
				return
			}
			continue
		}
		var it item
		if err := json.Unmarshal(e.Value(), &it); err != nil {
			b.Fatal(err)
		}
		if n++; n == want {
			return
		}
	}
	b.Fatalf("watch ended after %d of %d", n, want)
}

func oursNATSList(b *testing.B, lw *natsinformer.KV[item]) int {
	n := 0
	if _, err := lw.List(context.Background(), core.ListOptions[item]{Emit: func(ev core.Event[item]) error {
		if ev.Err != nil {
			return ev.Err
		}
		n++
		return nil
	}}); err != nil {
		b.Fatal(err)
	}
	return n
}

func oursNATSWatch(b *testing.B, lw *natsinformer.KV[item], mid uint64, want int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := lw.Watch(ctx, core.ResourceVersion(mid))
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	for n := 0; n < want; {
		batch, err := w.Next(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for _, ev := range batch {
			if ev.Err != nil {
				b.Fatal(ev.Err)
			}
			if ev.Type != core.Bookmark {
				n++
			}
		}
	}
}

// BenchmarkNATSKV: a bucket of 100,000 keys (History 1) read whole
// (List: our List against nats.go's KV watcher up to its end-of-initial
// marker) and its 100,000 later changes, one update per key, read from the
// revision before them (Watch: our Watch against a KV watcher with
// ResumeFromRevision). Both sides decode the same JSON. The sides
// alternate, after one untimed run each.
func BenchmarkNATSKV(b *testing.B) {
	keys := size(100_000, 2_000)
	rounds := size(3, 1)
	srv := harness.StartNATS(b)
	js := srv.JetStream(b)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "bench", History: 1})
	if err != nil {
		b.Fatal(err)
	}
	mid := natsFill(b, js, kv.Bucket(), keys)
	lw, err := natsinformer.NewKV(ctx, js, kv.Bucket(), natsinformer.KVOptions[item]{})
	if err != nil {
		b.Fatal(err)
	}
	oursList := func() {
		if n := oursNATSList(b, lw); n != keys {
			b.Fatalf("listed %d keys, want %d", n, keys)
		}
	}
	rawList := func() { rawNATSWatch(b, kv, keys) }
	oursWatch := func() { oursNATSWatch(b, lw, mid, keys) }
	rawWatch := func() { rawNATSWatch(b, kv, keys, jetstream.ResumeFromRevision(mid+1)) }
	b.Run("List", func(b *testing.B) {
		oursList()
		rawList()
		alternate(b, rounds, side{name: "ours", n: keys, unit: "key", run: oursList}, side{name: "raw", n: keys, unit: "key", run: rawList})
	})
	b.Run("Watch", func(b *testing.B) {
		oursWatch()
		rawWatch()
		alternate(b, rounds, side{name: "ours", n: keys, unit: "change", run: oursWatch}, side{name: "raw", n: keys, unit: "change", run: rawWatch})
	})
}

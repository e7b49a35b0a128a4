package natsinformer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
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
		n := 0
		if _, err := lw.List(ctx, driver.ListSink[item]{Emit: func(driver.Event[item]) error { n++; return nil }}); err != nil {
			b.Fatal(err)
		}
		if n != benchKeys {
			b.Fatalf("listed %d keys", n)
		}
	}
}

// BenchmarkKVListRaw reads the same bucket with nats.go's own KV watcher
// (initial values up to the nil marker) and decodes each value: the floor
// the adapter is measured against.
func BenchmarkKVListRaw(b *testing.B) {
	_, kv := benchBucket(b)
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		w, err := kv.WatchAll(ctx)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for e := range w.Updates() {
			if e == nil {
				break
			}
			var it item
			if err := json.Unmarshal(e.Value(), &it); err != nil {
				b.Fatal(err)
			}
			n++
		}
		w.Stop()
		if n != benchKeys {
			b.Fatalf("read %d keys", n)
		}
	}
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

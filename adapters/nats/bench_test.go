package natsinformer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	"github.com/dbinformer/dbinformer/core"
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
		if _, err := lw.List(ctx, core.ListOptions[item]{Emit: func(core.Event[item]) error { n++; return nil }}); err != nil {
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

package shard_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/shard"
)

type wide struct {
	V       int    `json:"v"`
	Payload string `json:"payload"`
}

var discard = slog.New(slog.DiscardHandler)

func heapNow() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// BenchmarkHeapPerReplica measures the heap of one replica's informer out
// of 4 sharing 64 shards over an etcd prefix of 100,000 keys, against the
// heap of an unsharded informer over the same prefix: the target
// is a ratio of at most 1.3 × 1/4 (here at the scale of an etcd test, not
// the 1M-row Postgres table through the relay). heap-vs-quarter is the
// replica's heap / (unsharded / 4), the target's measure (at most 1.3);
// heap-vs-share divides instead by the share of keys the replica really
// owns (4 members' shares of 64 shards are not exactly 1/4 each), which
// tells the cost of sharding itself from the luck of the draw.
func BenchmarkHeapPerReplica(b *testing.B) {
	e := harness.StartEtcd(b)
	client := e.Client(b)
	ctx := context.Background()
	const keys = 100000
	payload := strings.Repeat("x", 200)
	for i := 0; i < keys; i += 100 {
		ops := make([]clientv3.Op, 0, 100)
		for j := i; j < i+100; j++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("/data/k%06d", j), fmt.Sprintf(`{"v":%d,"payload":"%s"}`, j, payload)))
		}
		if _, err := client.Txn(ctx).Then(ops...).Commit(); err != nil {
			b.Fatal(err)
		}
	}
	lw := func() driver.ListerWatcher[wide] {
		p, err := etcdinformer.NewPrefix(ctx, client, "/data", etcdinformer.Options[wide]{})
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	runInformer := func(inf *core.SharedIndexInformer[wide]) func() {
		ictx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { _ = inf.Run(ictx); close(done) }()
		if err := inf.WaitForCacheSync(ctx); err != nil {
			b.Fatal(err)
		}
		return func() { cancel(); <-done }
	}
	for b.Loop() {
		base := heapNow()
		plain := core.NewSharedIndexInformer[wide](lw(), core.InformerOptions[wide]{Name: "plain"})
		stop := runInformer(plain)
		unsharded := heapNow() - base
		if plain.Indexer().Len() != keys {
			b.Fatalf("unsharded informer holds %d keys, want %d", plain.Indexer().Len(), keys)
		}
		stop()
		runtime.KeepAlive(plain)

		backend := etcdBackend(b, client, "/bench/shards")
		var others []*shard.Sharder
		sctx, cancel := context.WithCancel(ctx)
		var dones []chan struct{}
		startSharder := func(s *shard.Sharder) {
			d := make(chan struct{})
			dones = append(dones, d)
			go func() { _ = s.Run(sctx); close(d) }()
		}
		for i := 2; i <= 4; i++ {
			s, err := shard.New(backend, shard.Options{ID: fmt.Sprintf("r%d", i), Shards: 64, Lease: 3 * time.Second, Logger: discard})
			if err != nil {
				b.Fatal(err)
			}
			others = append(others, s)
			startSharder(s)
		}
		base = heapNow()
		r1, err := shard.New(backend, shard.Options{ID: "r1", Shards: 64, Lease: 3 * time.Second, Logger: discard})
		if err != nil {
			b.Fatal(err)
		}
		src, err := shard.NewSource[wide](r1, lw())
		if err != nil {
			b.Fatal(err)
		}
		inf := core.NewSharedIndexInformer[wide](src, core.InformerOptions[wide]{Name: "r1"})
		src.Bind(inf)
		stopInf := runInformer(inf)
		startSharder(r1)
		assigned, err := shard.Assign(64, []shard.Member{{ID: "r1"}, {ID: "r2"}, {ID: "r3"}, {ID: "r4"}})
		if err != nil {
			b.Fatal(err)
		}
		for len(r1.Owned()) != len(shard.Owned(assigned, "r1")) {
			time.Sleep(10 * time.Millisecond)
		}
		want := 0
		owned := r1.Owned()
		for i := range keys {
			if _, ok := owned[shard.Of(fmt.Sprintf("k%06d", i), 64)]; ok {
				want++
			}
		}
		for inf.Indexer().Len() != want {
			time.Sleep(10 * time.Millisecond)
		}
		sharded := heapNow() - base
		share := float64(want) / keys
		b.ReportMetric(float64(unsharded)/(1<<20), "unsharded-MiB")
		b.ReportMetric(float64(sharded)/(1<<20), "replica-MiB")
		b.ReportMetric(share, "key-share")
		b.ReportMetric(float64(sharded)/(float64(unsharded)/4), "ratio-vs-quarter")
		b.ReportMetric(float64(sharded)/(float64(unsharded)*share), "heap-vs-share")
		cancel()
		for _, d := range dones {
			<-d
		}
		stopInf()
	}
}

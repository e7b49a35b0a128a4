package bench_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/leader"
	"github.com/dbinformer/dbinformer/relay/relaytest"
	"github.com/dbinformer/dbinformer/shard"
)

// BenchmarkShardRelayHeap (#41): 4 replicas over a Postgres table of 1M
// rows (20k under -short or DBINFORMER_BENCH_SMALL) through a relay with
// per-shard subjects (relay.Options.Shards 64): the live heap of one
// replica's informer and Downstream, which consumes only the subjects of
// the shards rendezvous hashing gives it among 4 members, against that of
// an unsharded downstream informer over the same stream. The issue's
// target: ratio-vs-quarter, the replica's heap / (unsharded / 4), at most
// 1.3. heap-vs-share divides instead by the share of keys the replica
// really owns (4 members' shares of 64 shards are not exactly 1/4), the
// cost of sharding itself. read-share is the share of the stream's
// messages the replica's Downstream read.
func BenchmarkShardRelayHeap(b *testing.B) {
	rows := size(1_000_000, 20_000)
	const shards, members = 64, 4
	nsrv := harness.StartNATS(b)
	pg := harness.StartPostgres(b)
	src := pgtest.New(b, pg, pgtest.Options{})
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.ConnString())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	for lo := 1; lo <= rows; lo += 100_000 {
		hi := min(lo+100_000-1, rows)
		if _, err := conn.Exec(ctx, "INSERT INTO "+pgx.Identifier{src.TableName()}.Sanitize()+
			" (k, v) SELECT 'row-' || g, g FROM generate_series("+strconv.Itoa(lo)+", "+strconv.Itoa(hi)+") g"); err != nil {
			b.Fatal(err)
		}
	}
	h := relaytest.New(b, src, nsrv.JetStream(b), relaytest.Options{Shards: shards, NoWait: true, StartTimeout: 20 * time.Minute, NewElector: func(int) leader.Elector {
		el, err := leader.NewPostgres(pg.ConnString(), "bench-shards-"+src.TableName(), leader.PostgresOptions{})
		if err != nil {
			b.Fatal(err)
		}
		return el
	}})
	assigned, err := shard.Assign(shards, []shard.Member{{ID: "r1"}, {ID: "r2"}, {ID: "r3"}, {ID: "r4"}})
	if err != nil {
		b.Fatal(err)
	}
	owned := shard.Owned(assigned, "r1")
	mine := map[int]bool{}
	for _, s := range owned {
		mine[s] = true
	}
	want := 0
	for g := 1; g <= rows; g++ {
		if mine[shard.Of("row-"+strconv.Itoa(g), shards)] {
			want++
		}
	}
	for b.Loop() {
		base := liveHeap()
		down, err := h.NewDownstream(ctx, nsrv.JetStream(b))
		if err != nil {
			b.Fatal(err)
		}
		plain := core.NewSharedIndexInformer[pgtest.Row](down, core.InformerOptions[pgtest.Row]{Name: "unsharded"})
		stop := runSynced(b, plain)
		informersFill(b, plain, rows)
		unsharded := float64(liveHeap() - base)
		stop()
		runtime.KeepAlive(plain)
		runtime.KeepAlive(down)

		base = liveHeap()
		sd, err := h.NewShardDownstream(ctx, nsrv.JetStream(b), owned)
		if err != nil {
			b.Fatal(err)
		}
		replica := core.NewSharedIndexInformer[pgtest.Row](sd, core.InformerOptions[pgtest.Row]{Name: "r1"})
		stop = runSynced(b, replica)
		informersFill(b, replica, want)
		sharded := float64(liveHeap() - base)
		read := sd.MessagesRead()
		stop()
		runtime.KeepAlive(replica)
		runtime.KeepAlive(sd)

		share := float64(want) / float64(rows)
		b.ReportMetric(unsharded/(1<<20), "unsharded-MiB")
		b.ReportMetric(sharded/(1<<20), "replica-MiB")
		b.ReportMetric(share, "key-share")
		b.ReportMetric(float64(read)/float64(rows), "read-share")
		b.ReportMetric(sharded/(unsharded/members), "ratio-vs-quarter")
		b.ReportMetric(sharded/(unsharded*share), "heap-vs-share")
	}
}

// informersFill waits until inf holds n keys (the relay publishes the
// table's rows while the first informer lists).
func informersFill(b *testing.B, inf *core.SharedIndexInformer[pgtest.Row], n int) {
	b.Helper()
	deadline := time.Now().Add(10 * time.Minute)
	for inf.Indexer().Len() < n && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := inf.Indexer().Len(); got != n {
		b.Fatalf("informer %s holds %d keys, want %d", inf.Name(), got, n)
	}
}

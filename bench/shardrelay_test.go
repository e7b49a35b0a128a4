package bench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/leader"
	"github.com/dbinformer/dbinformer/relay"
	"github.com/dbinformer/dbinformer/relay/relaytest"
	"github.com/dbinformer/dbinformer/shard"
)

// BenchmarkShardRelayHeap (#41): 4 replicas over a Postgres table of 1M
// rows (20k under -short or DBINFORMER_BENCH_SMALL) through a relay with
// per-shard subjects (relay.Options.Shards 64): the live heap of one
// replica's informer and Downstream, which consumes only the subjects of
// the shards rendezvous hashing gives it among 4 members, against that of
// an unsharded downstream informer over the same stream; each in a
// process of its own (the test binary re-executed), its heap measured
// there, apart from the nats-server, Postgres and the relays. The issue's
// target: ratio-vs-quarter, the replica's heap / (unsharded / 4), at most
// 1.3. heap-vs-share divides instead by the share of keys the replica
// really owns (4 members' shares of 64 shards are not exactly 1/4), the
// cost of sharding itself. read-share is the share of the stream's
// messages the replica's Downstream read. DBINFORMER_SHARD_ROWS sets
// another row count; DBINFORMER_HEAP_PROFILE=dir writes each side's heap
// profile there (unsharded.pprof, replica.pprof) when it is measured.
func BenchmarkShardRelayHeap(b *testing.B) {
	rows := size(1_000_000, 20_000)
	if v, _ := strconv.Atoi(os.Getenv("DBINFORMER_SHARD_ROWS")); v > 0 {
		rows = v
	}
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
	url := nsrv.URL()
	for b.Loop() {
		unsharded := measureDownstreamHeap(b, shardHeapSpec{URL: url, Stream: h.Stream(), Prefix: h.Prefix(), Want: rows})
		replica := measureDownstreamHeap(b, shardHeapSpec{URL: url, Stream: h.Stream(), Prefix: h.Prefix(), Shards: shards, Owned: owned, Want: want})
		share := float64(want) / float64(rows)
		b.ReportMetric(unsharded.Heap/(1<<20), "unsharded-MiB")
		b.ReportMetric(replica.Heap/(1<<20), "replica-MiB")
		b.ReportMetric(share, "key-share")
		b.ReportMetric(float64(replica.Read)/float64(rows), "read-share")
		b.ReportMetric(replica.Heap/(unsharded.Heap/members), "ratio-vs-quarter")
		b.ReportMetric(replica.Heap/(unsharded.Heap*share), "heap-vs-share")
	}
}

// shardHeapEnv carries a shardHeapSpec to this test binary re-executed as
// one downstream of BenchmarkShardRelayHeap: its own process, so that its
// heap is its own, not the in-process nats-server's or the relays' (the
// server's filtered reads of a 1M-message stream took 8 MB buffers from
// its pools while the replica was measured in the same process).
const shardHeapEnv = "DBINFORMER_SHARD_HEAP_CHILD"

// shardHeapSpec is one downstream to measure: the whole stream, or the
// owned shards' subjects (Shards > 0).
type shardHeapSpec struct {
	URL, Stream, Prefix string
	Shards              int
	Owned               []int
	Want                int // keys the informer holds once synced
}

// shardHeapResult is what a downstream's process reports: its live heap
// held by the Downstream and its informer, and the messages it read.
type shardHeapResult struct {
	Heap float64
	Read uint64
}

// measureDownstreamHeap runs one downstream in its own process and returns
// its report.
func measureDownstreamHeap(b *testing.B, spec shardHeapSpec) shardHeapResult {
	b.Helper()
	cmd, out := startChild(b, shardHeapEnv, spec)
	var r shardHeapResult
	if err := json.NewDecoder(out).Decode(&r); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		b.Fatalf("downstream process: no report: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		b.Fatalf("downstream process: %v", err)
	}
	return r
}

// shardHeapChild is the downstream's process (TestMain runs it through
// runChild): it measures the live heap before and after a Downstream and
// its informer hold every key they should (the lowest of three samples
// after), prints the result as JSON and stops.
func shardHeapChild(s shardHeapSpec) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base := liveHeap()
	nc, js, err := dialJetStream(s.URL)
	if err != nil {
		return err
	}
	defer nc.Close()
	down, err := relay.NewDownstream[pgtest.Row](ctx, js, s.Stream, s.Prefix, relay.DownstreamOptions[pgtest.Row]{IdleCheck: time.Second, Shards: s.Shards, Owned: s.Owned})
	if err != nil {
		return err
	}
	inf := core.NewSharedIndexInformer[pgtest.Row](down, core.InformerOptions[pgtest.Row]{Name: "downstream"})
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Minute)
	for inf.Indexer().Len() < s.Want && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := inf.Indexer().Len(); got != s.Want {
		return fmt.Errorf("informer holds %d keys, want %d", got, s.Want)
	}
	held := steadyHeap()
	writeHeapProfile(map[bool]string{true: "replica", false: "unsharded"}[s.Shards > 0])
	r := shardHeapResult{Heap: float64(held - min(held, base)), Read: down.MessagesRead()}
	runtime.KeepAlive(inf)
	cancel()
	<-done
	return json.NewEncoder(os.Stdout).Encode(r)
}

package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/leader"
	"github.com/dbinformer/dbinformer/relay/relaytest"
)

// Three relays (etcd election) over a Postgres table into an R3 stream on
// a 3-node JetStream cluster, three downstream informers on the three
// nodes, a writer all along, and faults: the relay leader stopped twice,
// the stream leader's node killed and restarted, the relay's replication
// connection cut, Postgres restarted as after a crash. At the end every
// downstream cache equals the table at the same LSN; the Recorders fail
// the test if any key's version goes backwards.
func TestFaults(t *testing.T) {
	c := harness.StartNATSCluster(t, 3)
	c.WaitReady(t)
	pg := harness.StartPostgres(t)
	etcd := harness.StartEtcd(t)
	client := etcd.Client(t)
	src := pgtest.New(t, pg, pgtest.Options{})
	logs := slog.New(slog.NewTextHandler(harness.NewLogBuffer(t, "relays"), &slog.HandlerOptions{Level: slog.LevelDebug}))
	// The harness (writes, Head) is on node 2, which is never killed; the
	// relays know every node, as a deployment's clients do.
	h := relaytest.New(t, src, c.JetStream(t, 2), relaytest.Options{
		Replicas: 3,
		Relays:   3,
		Logger:   logs,
		RelayJS: func(i int) jetstream.JetStream {
			nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nc.Close)
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			return js
		},
		NewElector: func(i int) leader.Elector {
			el, err := leader.NewEtcd(client, "/relay-faults", leader.EtcdOptions{Identity: fmt.Sprintf("relay-%d", i), TTL: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			return el
		},
	})
	ctx := context.Background()

	var infs []*core.SharedIndexInformer[pgtest.Row]
	var recs []*informertest.Recorder[pgtest.Row]
	for i := range 3 {
		down, err := h.NewDownstream(ctx, c.JetStream(t, i))
		if err != nil {
			t.Fatal(err)
		}
		rec := informertest.NewRecorder(t, func(r pgtest.Row) int64 { return r.V })
		inf, _ := informertest.Run(t, down, core.InformerOptions[pgtest.Row]{Name: fmt.Sprintf("downstream-%d", i)}, rec)
		infs, recs = append(infs, inf), append(recs, rec)
	}

	// The writer: puts to 40 keys, a delete every 7th write, until told
	// to stop; a write that fails (Postgres restarting) is retried.
	stop := make(chan struct{})
	var writes atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := int64(1); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			key := fmt.Sprintf("k%02d", i%40)
			var err error
			if i%7 == 0 {
				_, err = src.Delete(ctx, key)
			} else {
				_, err = src.Put(ctx, key, i)
			}
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			writes.Add(1)
		}
	})
	// settle: the writer made progress, and a marker write went through the
	// relay to every downstream.
	marker := 0
	down := -1 // a downstream whose node is down, not waited for
	settle := func(what string) {
		t.Helper()
		w := writes.Load()
		informertest.Eventually(t, what+": the writer goes on", func() bool { return writes.Load() > w+20 })
		marker++
		// Bounded, so that a relay that never publishes again fails the
		// test with its logs instead of hanging it.
		mctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		rv, err := h.Put(mctx, "marker", int64(marker))
		cancel()
		if err != nil {
			t.Fatalf("%s: marker write: %v", what, err)
		}
		for i, inf := range infs {
			if i != down {
				informertest.WaitFor(t, inf, rv)
			}
		}
		t.Logf("%s: settled at %d after %d writes", what, rv, writes.Load())
	}
	settle("start")

	for round := range 2 {
		var l int
		informertest.Eventually(t, "a relay leads", func() bool { l = h.Leader(); return l >= 0 })
		h.Restart(l)
		settle(fmt.Sprintf("relay leader %d stopped (round %d)", l, round))
	}

	n := c.WaitStreamLeader(t, h.Stream())
	for n == 2 {
		c.StepDown(h.Stream())
		n = c.WaitStreamLeader(t, h.Stream())
	}
	down = n
	c.Nodes[n].Stop()
	settle(fmt.Sprintf("nats node %d (stream leader) down", n))
	c.Nodes[n].Restart(t)
	down = -1
	settle(fmt.Sprintf("nats node %d back", n))

	conn := pg.Conn(t)
	var cut int
	if err := conn.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE backend_type = 'walsender'").Scan(&cut); err != nil {
		t.Fatal(err)
	}
	if cut == 0 {
		t.Fatal("no walsender to cut")
	}
	settle(fmt.Sprintf("%d replication connections cut", cut))

	pg.Restart(t, "immediate")
	settle("postgres restarted")

	close(stop)
	wg.Wait()
	truth, err := src.Truth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	head, err := src.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, inf := range infs {
		informertest.WaitFor(t, inf, head)
		got := map[string]int64{}
		for _, r := range inf.Indexer().List() {
			got[r.K] = r.V
		}
		if d := informertest.Diff(fmt.Sprintf("downstream %d at %d", i, head), got, truth); len(d) > 0 {
			t.Fatalf("%v", d)
		}
		recs[i].WaitState(truth)
	}
	t.Logf("%d writes; %d keys; relists published: %d %d %d", writes.Load(), len(truth),
		h.Relay(0).Relists(), h.Relay(1).Relists(), h.Relay(2).Relists())
}

package bench_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	"github.com/dbinformer/dbinformer/adapters/etcd/etcdtest"
	"github.com/dbinformer/dbinformer/controller"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/workqueue"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/leader"
)

// BenchmarkController/Throughput: 200,000 distinct keys queued, then
// drained by 4 workers whose reconcile only counts: package controller
// (metrics off, as on the other side) against the worker loop a client-go
// user writes over the same core/workqueue queue (GetContext, reconcile,
// Forget, Done). What is measured is the controller's own cost per key
// (the read-your-writes record, the result switch, panic recovery) less
// what it saves: its workers take keys with Queue.Take, whose Done needs
// no second lookup of the key, where the loop calls Done(key).
func BenchmarkController(b *testing.B) {
	keys := make([]string, size(200_000, 5_000))
	for i := range keys {
		keys[i] = "namespace/object-" + strconv.Itoa(i)
	}
	const workers = 4
	rounds := size(11, 1)
	b.Run("Throughput", func(b *testing.B) {
		var (
			c      *controller.Controller[string]
			q      *workqueue.Queue[string]
			n      atomic.Int64
			done   chan struct{}
			cancel context.CancelFunc
			ran    sync.WaitGroup
		)
		count := func() {
			if n.Add(1) == int64(len(keys)) {
				close(done)
			}
		}
		ours := side{name: "ours", n: len(keys), unit: "reconcile",
			prepare: func() {
				n.Store(0)
				done = make(chan struct{})
				c = controller.New("bench", controller.Func[string](func(context.Context, string) (controller.Result, error) {
					count()
					return controller.Result{}, nil
				}), controller.Options[string]{Workers: workers})
				c.Enqueue(keys...)
			},
			run: func() {
				var ctx context.Context
				ctx, cancel = context.WithCancel(context.Background())
				ran.Go(func() { _ = c.Run(ctx) })
				<-done
			},
			finish: func() { cancel(); ran.Wait(); c.ShutDown() },
		}
		loop := side{name: "loop", n: len(keys), unit: "reconcile",
			prepare: func() {
				n.Store(0)
				done = make(chan struct{})
				q = workqueue.New(workqueue.Options[string]{})
				for _, k := range keys {
					q.Add(k)
				}
			},
			run: func() {
				var ctx context.Context
				ctx, cancel = context.WithCancel(context.Background())
				reconcile := func(context.Context, string) error { count(); return nil }
				for range workers {
					ran.Go(func() {
						for {
							key, err := q.GetContext(ctx)
							if err != nil {
								return
							}
							if err := reconcile(ctx, key); err != nil {
								q.AddRateLimited(key)
							} else {
								q.Forget(key)
							}
							q.Done(key)
						}
					})
				}
				<-done
			},
			finish: func() { cancel(); ran.Wait(); q.ShutDown() },
		}
		// Wall time counts the waits for a core on a shared machine; the
		// process CPU time of a run counts only the work.
		cpu := cpuSides{}
		ours.run, loop.run = cpu.wrap(b, "ours", ours.run), cpu.wrap(b, "loop", loop.run)
		alternate(b, rounds, ours, loop)
		cpu.report(b)
	})
}

// BenchmarkControllerFailover: a leader and a standby replica of one
// controller over an etcd prefix of 20,000 keys. The leader is a bare
// candidate of the same election; it resigns (Resign) or is killed (Kill:
// its client closed without resigning, as kill -9 leaves it, so its key
// goes when its 1 s lease expires). Timed is the span from the deletion of
// its key — when the new leader wins — to the new leader's first
// reconcile. "warm" is a controller.Manager standby: informer synced and
// live, queue full. "cold" is the same informer and controller in a
// Manager created when the replica wins, as a program without warm
// replicas does: it lists the prefix before reconciling. Three rounds,
// alternating, medians.
func BenchmarkControllerFailover(b *testing.B) {
	keys := size(20_000, 1_000)
	rounds := size(3, 1)
	srv := harness.StartEtcd(b)
	h := etcdtest.New(b, srv, etcdtest.Options{Prefix: "/ctrlbench/", Payload: "org-00 team-000"})
	batch := make([]string, 0, 100)
	for i := 0; i < keys; i += 100 {
		batch = batch[:0]
		for j := i; j < min(i+100, keys); j++ {
			batch = append(batch, fmt.Sprintf("k%06d", j))
		}
		if _, err := h.PutAll(context.Background(), batch, 1); err != nil {
			b.Fatal(err)
		}
	}
	cli := h.Client()
	var election atomic.Int64
	for _, kill := range []bool{false, true} {
		name := map[bool]string{false: "Resign", true: "Kill"}[kill]
		b.Run(name, func(b *testing.B) {
			got := map[string][]float64{}
			for range b.N {
				for range rounds {
					for _, warm := range []bool{true, false} {
						prefix := fmt.Sprintf("/ctrlbench-election/%d", election.Add(1))
						s := map[bool]string{true: "warm", false: "cold"}[warm]
						got[s] = append(got[s], failover(b, cli, srv, prefix, warm, kill).Seconds())
					}
				}
			}
			for s, xs := range got {
				b.ReportMetric(medianOf(xs), s+"-s")
			}
		})
	}
}

// failover runs one round and returns the new leader's win (the old
// leader's key deleted) → its first reconcile.
func failover(b *testing.B, cli *clientv3.Client, srv *harness.Etcd, prefix string, warm, kill bool) time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	newElector := func(c *clientv3.Client, id string) leader.Elector {
		el, err := leader.NewEtcd(c, prefix, leader.EtcdOptions{Identity: id, TTL: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		return el
	}
	// The old leader: a bare candidate that holds the leadership until
	// told to resign.
	oldCli := srv.Client(b)
	defer oldCli.Close()
	oldCtx, resign := context.WithCancel(ctx)
	leading := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = newElector(oldCli, "old").Run(oldCtx, func(ctx context.Context, _ leader.Term) error {
			close(leading)
			<-ctx.Done()
			return nil
		})
	})
	<-leading

	first := make(chan time.Time, 1)
	reconcile := controller.Func[string](func(context.Context, string) (controller.Result, error) {
		select {
		case first <- time.Now():
		default:
		}
		return controller.Result{}, nil
	})
	build := func(m *controller.Manager) {
		lw, err := etcdinformer.NewPrefix(ctx, cli, "/ctrlbench/", etcdinformer.Options[etcdtest.Item]{})
		if err != nil {
			b.Fatal(err)
		}
		inf := controller.Informer(m, "items", lw, core.InformerOptions[etcdtest.Item]{})
		if _, err := controller.For(m, inf, reconcile, controller.Options[string]{Workers: 2}); err != nil {
			b.Fatal(err)
		}
	}
	el := newElector(cli, "new")
	var m *controller.Manager
	if warm {
		m = controller.NewManager(controller.ManagerOptions{Elector: el})
		build(m)
		wg.Go(func() { _ = m.Run(ctx) })
	} else {
		wg.Go(func() {
			_ = el.Run(ctx, func(ctx context.Context, _ leader.Term) error {
				cm := controller.NewManager(controller.ManagerOptions{})
				build(cm)
				return cm.Run(ctx)
			})
		})
	}
	// Wait until the new replica campaigns (warm: after its sync), then
	// make the old leader resign.
	for {
		resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			b.Fatal(err)
		}
		if resp.Count == 2 && (m == nil || m.Ready(ctx) == nil) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The new leader wins when the old leader's key is deleted.
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	events := cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithFilterPut())
	if kill {
		_ = oldCli.Close() // no resign: the key stays until its lease expires
	}
	resign()
	var t0 time.Time
	for t0.IsZero() {
		resp, ok := <-events
		if !ok {
			b.Fatal("watch of the election ended")
		}
		if len(resp.Events) > 0 {
			t0 = time.Now()
		}
	}
	t1 := <-first
	cancel()
	wg.Wait()
	return t1.Sub(t0)
}

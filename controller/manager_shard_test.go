package controller_test

import (
	"context"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	"github.com/dbinformer/dbinformer/controller"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/shard"
)

// reconcileLog records every reconcile of the sharded replicas.
type reconcileLog struct {
	mu    sync.Mutex
	calls []reconcileCall
}

type reconcileCall struct {
	key, replica string
	spec         int
	term         uint64
	start, end   time.Time
}

// bySpec returns, per key, the replicas that reconciled it at spec.
func (l *reconcileLog) bySpec(spec int) map[string]map[string]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]map[string]bool{}
	for _, c := range l.calls {
		if c.spec == spec {
			if out[c.key] == nil {
				out[c.key] = map[string]bool{}
			}
			out[c.key][c.replica] = true
		}
	}
	return out
}

func (l *reconcileLog) overlaps() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for i, a := range l.calls {
		for _, b := range l.calls[i+1:] {
			if a.key == b.key && a.replica != b.replica && a.start.Before(b.end) && b.start.Before(a.end) {
				n++
			}
		}
	}
	return n
}

func shardedReplica(t *testing.T, name string, cli *clientv3.Client, log *reconcileLog) (*shard.Sharder, *controller.Manager, func() error) {
	t.Helper()
	b, err := shard.NewEtcd(cli, "/shards")
	if err != nil {
		t.Fatal(err)
	}
	s, err := shard.New(b, shard.Options{ID: name, Shards: 16, Lease: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	m := controller.NewManager(controller.ManagerOptions{Name: name, Sharder: s})
	lw, err := etcdinformer.NewPrefix(context.Background(), cli, prefix, etcdinformer.Options[Item]{})
	if err != nil {
		t.Fatal(err)
	}
	src, err := shard.NewSource[Item](s, lw)
	if err != nil {
		t.Fatal(err)
	}
	inf := controller.Informer(m, "items", src, core.InformerOptions[Item]{})
	src.Bind(inf)
	_, err = controller.For(m, inf, controller.Func[string](func(ctx context.Context, key string) (controller.Result, error) {
		start := time.Now()
		tk, ok := controller.ShardTicketOf(ctx)
		if !ok {
			t.Errorf("reconcile of %s on %s without a shard ticket", key, name)
		}
		it, ok := inf.Indexer().Get(key)
		if !ok {
			t.Errorf("reconcile of %s on %s: not in the cache of its owner", key, name)
		}
		time.Sleep(200 * time.Microsecond)
		log.mu.Lock()
		log.calls = append(log.calls, reconcileCall{key: key, replica: name, spec: it.Spec, term: tk.Term, start: start, end: time.Now()})
		log.mu.Unlock()
		return controller.Result{}, nil
	}), controller.Options[string]{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	return s, m, run(t, m.Run)
}

// Two managers in sharded mode split the keys: each reconciles only its
// shards' keys, a shard that moves is reconciled by its new owner, and
// no key is reconciled by both at overlapping times.
func TestManagerSharded(t *testing.T) {
	_, cli := startEtcd(t)
	const keys = 60
	for i := range keys {
		put(t, cli, keyName(i), Item{Spec: 1})
	}
	var log reconcileLog
	a, ma, stopA := shardedReplica(t, "a", cli, &log)
	defer func() { _ = stopA() }()
	eventually(t, "a to reconcile every key", func() bool { return len(log.bySpec(1)) == keys })

	b, _, stopB := shardedReplica(t, "b", cli, &log)
	eventually(t, "a and b to split the shards", func() bool {
		return len(a.Owned())+len(b.Owned()) == 16 && len(b.Owned()) > 0 && len(a.Owned()) > 0
	})
	for i := range keys {
		put(t, cli, keyName(i), Item{Spec: 2})
	}
	eventually(t, "every key reconciled at spec 2", func() bool { return len(log.bySpec(2)) == keys })
	for key, by := range log.bySpec(2) {
		owner := "a"
		if _, ok := b.Owned()[b.Of(key)]; ok {
			owner = "b"
		}
		if len(by) != 1 || !by[owner] {
			t.Errorf("key %s (owned by %s) reconciled at spec 2 by %v", key, owner, by)
		}
	}
	moved := len(b.Owned())
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a to own every shard again", func() bool { return len(a.Owned()) == 16 })
	for i := range keys {
		put(t, cli, keyName(i), Item{Spec: 3})
	}
	eventually(t, "every key reconciled at spec 3", func() bool { return len(log.bySpec(3)) == keys })
	for key, by := range log.bySpec(3) {
		if len(by) != 1 || !by["a"] {
			t.Errorf("key %s reconciled at spec 3 by %v, want a alone", key, by)
		}
	}
	if n := log.overlaps(); n != 0 {
		t.Errorf("%d pairs of reconciles of one key on two replicas at overlapping times", n)
	}
	t.Logf("b owned %d of 16 shards; %d reconciles, 0 overlapping", moved, len(log.calls))

	// The status shows a's share and the handoffs it went through.
	st := ma.ShardStatus().Status()
	if len(st.Owned) != 16 || st.Replica != "a" || len(st.Members) != 1 {
		t.Errorf("a's shard status: replica %q, %d members, %d shards owned; want a, 1, 16", st.Replica, len(st.Members), len(st.Owned))
	}
	in, out := 0, 0
	for _, h := range st.Recent {
		if h.Err != "" {
			continue
		}
		if h.In {
			in++
		} else {
			out++
		}
	}
	mfs, err := ma.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	owned := -1.0
	for _, mf := range mfs {
		if mf.GetName() == "dbinformer_shard_owned" {
			owned = mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	if owned != 16 {
		t.Errorf("dbinformer_shard_owned on a's registry = %v, want 16", owned)
	}
	if out != moved || in != 16+moved {
		t.Errorf("a's recent handoffs: %d in, %d out; want %d in (16 at start, %d back from b) and %d out", in, out, 16+moved, moved, moved)
	}
}

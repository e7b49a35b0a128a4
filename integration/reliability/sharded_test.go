package reliability_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dbinformer/dbinformer/adapters/etcd/etcdtest"
	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/integration/proxy"
	"github.com/dbinformer/dbinformer/integration/reliability"
	"github.com/dbinformer/dbinformer/shard"
	"github.com/dbinformer/dbinformer/shard/shardtest"
)

// TestShardedReliability is the fault-injection suite's sharded variant
// (issue 41): replicas splitting a source's keys (package shard, membership
// in an etcd of its own) join, leave gracefully and lose their membership
// connection (frozen: the TCP connection open, nothing passing), chosen by
// the seed, while the source's own faults (cut, pause, restart, freeze,
// expire: the adapter's harness) break the replicas' reads, and the keys
// are written and deleted throughout. Every replica's gated handler logs
// its calls with the shard's term; at the end no key was handled by two
// replicas at overlapping times, no replica's cache saw a key's version go
// backwards, and every key of the source is cached by exactly the live
// replica owning its shard, at the source's version (a frozen replica
// holds nothing).
func TestShardedReliability(t *testing.T) {
	members := startMembership(t)
	for _, a := range []struct {
		name  string
		start func(t *testing.T) func(t *testing.T, seed uint64)
	}{
		{"etcd", func(t *testing.T) func(t *testing.T, seed uint64) {
			srv := harness.StartEtcd(t)
			return func(t *testing.T, seed uint64) {
				h := etcdtest.New(t, srv, etcdtest.Options{Prefix: fmt.Sprintf("/sharded-%d/", seed), Faults: true})
				shardedRun[etcdtest.Item](t, h, members, seed)
			}
		}},
		{"postgres", func(t *testing.T) func(t *testing.T, seed uint64) {
			srv := harness.StartPostgres(t)
			return func(t *testing.T, seed uint64) {
				h := pgtest.New(t, srv, pgtest.Options{Proxy: true, Table: fmt.Sprintf("sharded_%d", seed)})
				shardedRun[pgtest.Row](t, h, members, seed)
			}
		}},
	} {
		t.Run(a.name, func(t *testing.T) {
			run := a.start(t)
			for _, seed := range seeds() {
				t.Run(fmt.Sprintf("seed_%d", seed), func(t *testing.T) {
					t.Cleanup(func() {
						if t.Failed() {
							t.Logf("replay: go test ./integration/reliability -run 'TestShardedReliability$/^%s$/^seed_%d$' -seed %d -v", a.name, seed, seed)
						}
					})
					run(t, seed)
				})
			}
		})
	}
}

// membership is the etcd the replicas' Sharders meet in: a client, and a
// client whose connection passes a proxy the test can freeze.
type membership struct {
	client, frozen *clientv3.Client
	px             *proxy.Proxy
}

func startMembership(t *testing.T) *membership {
	e := harness.StartEtcd(t)
	frozen, px := e.ProxiedClient(t)
	// Before the client closes (cleanups run last first).
	t.Cleanup(px.Thaw)
	return &membership{client: e.Client(t), frozen: frozen, px: px}
}

// shardedMember is one replica: a Sharder and an informer over the
// harness's source, filtered to the replica's shards.
type shardedMember[T any] struct {
	id         string
	s          *shard.Sharder
	inf        *core.SharedIndexInformer[T]
	stopShards func()
}

const (
	shardedShards = 16
	shardedLease  = 2 * time.Second
)

func startShardedMember[T any](t *testing.T, h reliability.Harness[T], b shard.Backend, id string, log *shardtest.CallLog) *shardedMember[T] {
	t.Helper()
	s, err := shard.New(b, shard.Options{ID: id, Shards: shardedShards, Lease: shardedLease, Logger: reliability.TestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	src, err := shard.NewSource[T](s, h.ListerWatcher())
	if err != nil {
		t.Fatal(err)
	}
	m := &shardedMember[T]{id: id, s: s}
	m.inf = core.NewSharedIndexInformer[T](src, core.InformerOptions[T]{
		Name: "sharded " + id,
		// The source's faults make errors by the dozen: what counts is
		// the end state, checked by the test.
		ErrorHandler: func(err error) { t.Logf("%s %s: %v", time.Now().Format("15:04:05.000"), id, err) },
		Backoff:      core.Backoff{Initial: 50 * time.Millisecond, Max: time.Second},
		Logger:       reliability.TestLogger(t),
	})
	src.Bind(m.inf)
	// The raw events (enter and leave included): a key's version never
	// goes backwards in one replica's cache.
	if _, err := m.inf.AddEventHandler(informertest.NewRecorder[T](t, h.Version)); err != nil {
		t.Fatal(err)
	}
	work := func(tk shard.Ticket, key string) {
		start := time.Now()
		time.Sleep(100 * time.Microsecond) // widen the window a second owner would overlap
		log.Add(shardtest.Call{Key: key, Replica: id, Term: tk.Term, Start: start, End: time.Now()})
	}
	if _, err := m.inf.AddEventHandler(shard.Handler(s, shard.HandlerFuncs[T]{
		AddFunc:    func(tk shard.Ticket, key string, _ T, _ bool) { work(tk, key) },
		UpdateFunc: func(tk shard.Ticket, key string, _, _ T) { work(tk, key) },
		DeleteFunc: func(tk shard.Ticket, key string, _ T, _ bool) { work(tk, key) },
	})); err != nil {
		t.Fatal(err)
	}
	ictx, stopInformer := context.WithCancel(context.Background())
	informerDone := make(chan struct{})
	go func() { _ = m.inf.Run(ictx); close(informerDone) }()
	// Registered before the Sharder's: the Sharder stops (and drops its
	// shards) first.
	t.Cleanup(func() { stopInformer(); <-informerDone })
	sctx, stopShards := context.WithCancel(context.Background())
	shardsDone := make(chan error, 1)
	go func() { shardsDone <- s.Run(sctx) }()
	stopped := false
	m.stopShards = func() {
		if stopped {
			return
		}
		stopped = true
		stopShards()
		if err := <-shardsDone; err != nil {
			t.Errorf("replica %s: Sharder.Run returned %v, want nil", id, err)
		}
	}
	t.Cleanup(m.stopShards)
	return m
}

func shardedRun[T any](t *testing.T, h reliability.Harness[T], mb *membership, seed uint64) {
	rnd := rand.New(rand.NewPCG(seed, 0x7368617264))
	ctx := context.Background()
	prefix := fmt.Sprintf("/shards-%d", seed)
	backend := func(c *clientv3.Client) shard.Backend {
		b, err := shard.NewEtcd(c, prefix)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b, frozenB := backend(mb.client), backend(mb.frozen)
	const keys = 60
	version := int64(0)
	write := func(n int) {
		for range n {
			key := "k" + strconv.Itoa(rnd.IntN(keys))
			version++
			if rnd.IntN(6) == 0 {
				reliability.Retry(t, ctx, "delete "+key, func(ctx context.Context) error { _, err := h.Delete(ctx, key); return err })
			} else {
				v := version
				reliability.Retry(t, ctx, "put "+key, func(ctx context.Context) error { _, err := h.Put(ctx, key, v); return err })
			}
		}
	}
	write(keys)

	var log shardtest.CallLog
	// c's membership passes the proxy: the seed may freeze it.
	live := []*shardedMember[T]{
		startShardedMember(t, h, b, "a", &log),
		startShardedMember(t, h, b, "b", &log),
		startShardedMember(t, h, frozenB, "c", &log),
	}
	var frozen []*shardedMember[T]
	settle := func() {
		t.Helper()
		ss := make([]*shard.Sharder, len(live))
		for i, m := range live {
			ss[i] = m.s
		}
		shardtest.Settled(t, shardedShards, ss...)
	}
	settle()
	faults := h.Faults()
	var steps []string
	next := 'd'
	for range 6 {
		cAt := slices.IndexFunc(live, func(m *shardedMember[T]) bool { return m.id == "c" })
		switch pick := rnd.IntN(5); {
		case pick == 0 && len(live) < 5:
			id := string(next)
			next++
			live = append(live, startShardedMember(t, h, b, id, &log))
			steps = append(steps, id+" joins")
		case pick == 1 && len(live) > 2:
			k := rnd.IntN(len(live))
			live[k].stopShards()
			steps = append(steps, live[k].id+" leaves")
			live = slices.Delete(live, k, k+1)
		case pick == 2 && len(live) > 2 && cAt >= 0:
			// c goes by its membership connection freezing: its shards
			// wait for its lease, and it ends holding nothing.
			mb.px.Freeze()
			// Before the replicas stop (cleanups run last first); the
			// next seed's c meets through the same proxy.
			t.Cleanup(mb.px.Thaw)
			frozen = append(frozen, live[cAt])
			live = slices.Delete(live, cAt, cAt+1)
			steps = append(steps, "c frozen")
		default:
			f := faults[rnd.IntN(len(faults))]
			end, writable := h.Inject(t, ctx, f)
			if writable {
				write(20)
			}
			time.Sleep(time.Duration(100+rnd.IntN(400)) * time.Millisecond)
			if end != nil {
				end()
			}
			steps = append(steps, "source "+string(f))
		}
		// Writes while the change settles, then settled.
		write(30)
		settle()
	}
	h.Heal(t)
	write(20)
	t.Logf("seed %d: %s; %d writes; live %d", seed, strings.Join(steps, ", "), version, len(live))
	shardedConverged(t, h, live, frozen)
	if _, _, overlaps := log.Check(t); overlaps > 0 {
		t.Errorf("%d keys handled by two replicas at overlapping times", overlaps)
	}
}

// shardedConverged waits until the live replicas' caches, together, hold
// every key of the source once, each in the replica owning its shard, at
// the source's version; gone replicas (frozen) hold nothing.
func shardedConverged[T any](t *testing.T, h reliability.Harness[T], live, gone []*shardedMember[T]) {
	t.Helper()
	ctx := context.Background()
	var truth map[string]int64
	reliability.Retry(t, ctx, "read the source", func(ctx context.Context) (err error) { truth, err = h.Truth(ctx); return err })
	var head core.ResourceVersion
	reliability.Retry(t, ctx, "read the source's head", func(ctx context.Context) (err error) { head, err = h.Head(ctx); return err })
	for _, m := range live {
		wctx, cancel := context.WithTimeout(ctx, informertest.Timeout)
		err := m.inf.WaitFor(wctx, head)
		cancel()
		if err != nil {
			t.Fatalf("replica %s: WaitFor(%d): %v", m.id, head, err)
		}
	}
	var why string
	check := func() bool {
		why = ""
		seen := map[string]string{}
		for _, m := range live {
			owned := m.s.Owned()
			m.inf.Indexer().Range(func(key string, obj T) bool {
				if other, ok := seen[key]; ok {
					why = fmt.Sprintf("key %s cached by %s and %s", key, other, m.id)
				}
				seen[key] = m.id
				if _, mine := owned[m.s.Of(key)]; !mine {
					why = fmt.Sprintf("key %s cached by %s, which does not own shard %d", key, m.id, m.s.Of(key))
				} else if v, ok := truth[key]; !ok || h.Version(obj) != v {
					why = fmt.Sprintf("key %s cached by %s at version %d, the source's is %d (present %v)", key, m.id, h.Version(obj), v, ok)
				}
				return why == ""
			})
			if why != "" {
				return false
			}
		}
		for _, m := range gone {
			if n := m.inf.Indexer().Len(); n != 0 {
				why = fmt.Sprintf("frozen replica %s still caches %d keys", m.id, n)
				return false
			}
		}
		for key := range truth {
			if _, ok := seen[key]; !ok {
				why = fmt.Sprintf("key %s cached by no replica", key)
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(informertest.Timeout); !check(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after %v, not every key is cached by exactly its owner at the source's version: %s", informertest.Timeout, why)
		}
	}
}

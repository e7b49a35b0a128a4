package shard_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/integration/proxy"
	"github.com/dbinformer/dbinformer/shard"
	"github.com/dbinformer/dbinformer/shard/shardtest"
)

type item struct {
	V int `json:"v"`
}

// member is a replica with a sharded informer over /data: its raw cache
// events (enter and leave included) and its gated handler calls, logged.
type member struct {
	*replica
	inf *core.SharedIndexInformer[item]

	mu       sync.Mutex
	entered  map[string]int // raw adds per key
	left     map[string]int // raw deletes per key
	gated    map[string]int // gated handler calls per key
	gatedIn  map[string]int // gated adds per key
	gatedDel map[string]int // gated deletes per key
}

func newMember(t *testing.T, b shard.Backend, source *clientv3.Client, opts shard.Options, log *shardtest.CallLog) *member {
	t.Helper()
	m := &member{replica: newReplica(t, b, opts), entered: map[string]int{}, left: map[string]int{}, gated: map[string]int{}, gatedIn: map[string]int{}, gatedDel: map[string]int{}}
	ctx := context.Background()
	lw, err := etcdinformer.NewPrefix(ctx, source, "/data", etcdinformer.Options[item]{})
	if err != nil {
		t.Fatal(err)
	}
	src, err := shard.NewSource[item](m.s, lw)
	if err != nil {
		t.Fatal(err)
	}
	m.inf = core.NewSharedIndexInformer[item](src, core.InformerOptions[item]{Name: "data@" + opts.ID})
	src.Bind(m.inf)
	_, _ = m.inf.AddEventHandler(core.ResourceEventHandlerFuncs[item]{
		AddFunc:    func(key string, _ item, _ bool) { m.count(m.entered, key) },
		DeleteFunc: func(key string, _ item, _ bool) { m.count(m.left, key) },
	})
	work := func(tk shard.Ticket, key string) {
		start := time.Now()
		m.count(m.gated, key)
		time.Sleep(100 * time.Microsecond) // widen the window a second owner would overlap
		if log != nil {
			log.Add(shardtest.Call{Key: key, Replica: opts.ID, Term: tk.Term, Start: start, End: time.Now()})
		}
	}
	_, _ = m.inf.AddEventHandler(shard.Handler(m.s, shard.HandlerFuncs[item]{
		AddFunc:    func(tk shard.Ticket, key string, _ item, _ bool) { m.count(m.gatedIn, key); work(tk, key) },
		UpdateFunc: func(tk shard.Ticket, key string, _, _ item) { work(tk, key) },
		DeleteFunc: func(tk shard.Ticket, key string, _ item, _ bool) { m.count(m.gatedDel, key); work(tk, key) },
	}))
	ictx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = m.inf.Run(ictx); close(done) }()
	// Registered before run's: the Sharder stops (and drops) first.
	t.Cleanup(func() { cancel(); <-done })
	if err := m.inf.WaitForCacheSync(ctx); err != nil {
		t.Fatal(err)
	}
	m.run(t)
	return m
}

func (m *member) count(in map[string]int, key string) {
	m.mu.Lock()
	in[key]++
	m.mu.Unlock()
}

func (m *member) counts(in map[string]int, key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return in[key]
}

func put(t *testing.T, c *clientv3.Client, key string, v int) int64 {
	resp, err := c.Put(context.Background(), "/data/"+key, fmt.Sprintf(`{"v":%d}`, v))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// converged waits until the live members' caches, together, hold every
// key of the source once, each in the replica owning its shard, with the
// source's value; frozen members must hold nothing.
func converged(t *testing.T, c *clientv3.Client, live []*member, gone ...*member) {
	t.Helper()
	resp, err := c.Get(context.Background(), "/data/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, kv := range resp.Kvs {
		want[string(kv.Key[len("/data/"):])] = string(kv.Value)
	}
	for _, m := range live {
		if err := m.inf.WaitFor(context.Background(), core.ResourceVersion(resp.Header.Revision)); err != nil {
			t.Fatal(err)
		}
	}
	informertest.Eventually(t, "every key cached by exactly its owner, equal to the source", func() bool {
		seen := map[string]int{}
		for _, m := range live {
			owned := m.s.Owned()
			ok := true
			m.inf.Indexer().Range(func(key string, obj item) bool {
				seen[key]++
				if _, mine := owned[m.s.Of(key)]; !mine || fmt.Sprintf(`{"v":%d}`, obj.V) != want[key] {
					ok = false
				}
				return ok
			})
			if !ok {
				return false
			}
		}
		for _, m := range gone {
			if m.inf.Indexer().Len() != 0 {
				return false
			}
		}
		for key := range want {
			if seen[key] != 1 {
				return false
			}
		}
		return len(seen) == len(want)
	})
}

// A shard that moves leaves the old owner's cache as deletes (leave) and
// enters the new owner's as adds (enter); the gated handlers see the
// enter, not the leave.
func TestEtcdHandoffEnterLeave(t *testing.T) {
	e := harness.StartEtcd(t)
	client := e.Client(t)
	b := etcdBackend(t, client, "/test/shards")
	const shards, keys = 16, 100
	opts := func(id string) shard.Options { return shard.Options{ID: id, Shards: shards, Lease: lease} }
	for i := range keys {
		put(t, client, fmt.Sprintf("k%03d", i), i)
	}
	a := newMember(t, b, client, opts("a"), nil)
	settled(t, shards, a.replica)
	converged(t, client, []*member{a})
	bm := newMember(t, b, client, opts("b"), nil)
	settled(t, shards, a.replica, bm.replica)
	converged(t, client, []*member{a, bm})
	var movedKeys []string
	for i := range keys {
		key := fmt.Sprintf("k%03d", i)
		if _, ok := bm.s.Owned()[bm.s.Of(key)]; ok {
			movedKeys = append(movedKeys, key)
		}
	}
	if len(movedKeys) == 0 {
		t.Fatal("no key moved to b")
	}
	// Handlers are called after the cache is applied, from their own
	// goroutines: wait for the calls.
	informertest.Eventually(t, "a leave on a and an enter on b, raw and gated, for each key that moved", func() bool {
		for _, key := range movedKeys {
			if a.counts(a.left, key) == 0 || bm.counts(bm.entered, key) == 0 || bm.counts(bm.gatedIn, key) == 0 {
				return false
			}
		}
		return true
	})
	// A later write on a's side: once a's gated handler has it, it has
	// everything before it, the leaves included.
	var stay string
	for i := range keys {
		if key := fmt.Sprintf("k%03d", i); !slices.Contains(movedKeys, key) {
			stay = key
			break
		}
	}
	put(t, client, stay, -1)
	informertest.Eventually(t, "a's gated handler to see the later write", func() bool { return a.counts(a.gated, stay) >= 2 })
	for _, key := range movedKeys {
		if n, m := a.counts(a.left, key), bm.counts(bm.entered, key); n != 1 || m != 1 {
			t.Errorf("key %s moved to b: a saw %d leave events, b %d enter events; want 1 and 1", key, n, m)
		}
		if n := a.counts(a.gatedDel, key); n != 0 {
			t.Errorf("key %s moved to b: a's gated handler got its leave as %d deletes; a handoff is not a delete", key, n)
		}
	}
	moved := len(movedKeys)
	t.Logf("%d of %d keys moved to b with one leave on a and one enter on b each", moved, keys)
}

// Churn: 3 → 4 → 2 replicas under writes, one of them frozen (its
// membership connection holds, nothing passes). No key is handled by two
// replicas at overlapping times, and at the end every key is cached by
// exactly one replica, equal to the source.
func TestEtcdChurn(t *testing.T) {
	e := harness.StartEtcd(t)
	client := e.Client(t)
	frozenClient, px := e.ProxiedClient(t)
	churn(t, client, etcdBackend(t, client, "/test/shards"), etcdBackend(t, frozenClient, "/test/shards"), px)
}

// The same with the membership and ownership in Postgres (the data still
// in etcd).
func TestPostgresChurn(t *testing.T) {
	e := harness.StartEtcd(t)
	pg := harness.StartPostgres(t)
	px, err := proxy.New("127.0.0.1:" + strconv.Itoa(pg.Port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	frozen := pgPool(t, pg, px)
	// Before the pool closes (cleanups run last first): a pool closing
	// over a frozen connection waits for its timeouts.
	t.Cleanup(px.Thaw)
	churn(t, e.Client(t), pgBackend(t, pgPool(t, pg, nil), "churn"), pgBackend(t, frozen, "churn"), px)
}

// churn runs 3 → 4 → 2 members, c's membership through frozenB, whose
// connection px freezes.
func churn(t *testing.T, client *clientv3.Client, b, frozenB shard.Backend, px *proxy.Proxy) {
	const shards, keys = 32, 300
	loads := &loadTimes{}
	opts := func(id string) shard.Options {
		return shard.Options{ID: id, Shards: shards, Lease: lease, Observer: loads}
	}
	var log shardtest.CallLog
	for i := range keys {
		put(t, client, fmt.Sprintf("k%03d", i), 0)
	}
	ctx, stopWrites := context.WithCancel(context.Background())
	var writes atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		r := rand.New(rand.NewPCG(7, 8))
		for ctx.Err() == nil {
			if _, err := client.Put(ctx, fmt.Sprintf("/data/k%03d", r.IntN(keys)), fmt.Sprintf(`{"v":%d}`, writes.Add(1))); err != nil && ctx.Err() == nil {
				t.Error(err)
				return
			}
			time.Sleep(time.Millisecond)
		}
	})
	defer func() { stopWrites(); wg.Wait() }()

	a := newMember(t, b, client, opts("a"), &log)
	bm := newMember(t, b, client, opts("b"), &log)
	c := newMember(t, frozenB, client, opts("c"), &log)
	settled(t, shards, a.replica, bm.replica, c.replica)
	joined := time.Now()
	d := newMember(t, b, client, opts("d"), &log)
	settled(t, shards, a.replica, bm.replica, c.replica, d.replica)
	loads.report(t, "d joined (graceful: the old owners drain and release)", joined)
	t.Logf("4 members after %d writes", writes.Load())
	frozen := time.Now()
	px.Freeze()
	settled(t, shards, a.replica, bm.replica, d.replica)
	loads.report(t, fmt.Sprintf("c frozen (its shards wait for its lease of %v)", lease), frozen)
	t.Logf("c frozen and out after %d writes", writes.Load())
	left := time.Now()
	d.stop(t)
	settled(t, shards, a.replica, bm.replica)
	loads.report(t, "d left (graceful)", left)
	t.Logf("d left after %d writes", writes.Load())
	time.Sleep(200 * time.Millisecond) // writes on the final owners
	stopWrites()
	wg.Wait()
	converged(t, client, []*member{a, bm}, c)
	if _, shared, _ := log.Check(t); shared == 0 {
		t.Fatal("checker: no key was handled by two replicas in turn: the test moved nothing")
	}
	t.Logf("%d writes", writes.Load())
}

// loadTimes records when each shard finished loading on its new owner, so
// that the churn test can tell how long after a change its shards were
// served again. A measurement, logged; nothing asserts on it.
type loadTimes struct {
	mu   sync.Mutex
	done []time.Time
}

func (l *loadTimes) Members([]shard.Member)   {}
func (l *loadTimes) Owned(map[int]uint64)     {}
func (l *loadTimes) HandoffStarted(int, bool) {}
func (l *loadTimes) HandoffDone(_ int, in bool, _ time.Duration, err error) {
	if in && err == nil {
		l.mu.Lock()
		l.done = append(l.done, time.Now())
		l.mu.Unlock()
	}
}

// report logs how many shards loaded since since, and the longest wait.
func (l *loadTimes) report(t *testing.T, what string, since time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, longest := 0, time.Duration(0)
	for _, d := range l.done {
		if d.After(since) {
			n++
			longest = max(longest, d.Sub(since))
		}
	}
	t.Logf("%s: %d shards moved, the last served again %v after the change", what, n, longest)
}

package natsinformer_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dbinformer/dbinformer/adapters/nats/natstest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// rounds is how many times the cluster tests repeat their check:
// NATS_CLUSTER_ROUNDS overrides it (the default keeps make test short;
// the numbers in the final report were measured with thousands).
func rounds(t *testing.T, def int) int {
	if s := os.Getenv("NATS_CLUSTER_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("NATS_CLUSTER_ROUNDS=%q: %v", s, err)
		}
		return n
	}
	if testing.Short() {
		return def / 10
	}
	return def
}

// stepDownLoop makes the stream's leader step down over and over until
// the test ends, each time a quarter second after a new leader was
// elected (a tighter loop keeps the stream leaderless most of the time:
// measured, every round then waits seconds for an election).
func stepDownLoop(t *testing.T, c *harness.NATSCluster, stream string) *atomic.Int64 {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var n atomic.Int64
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() {
		for ctx.Err() == nil {
			if c.StreamLeader(stream) >= 0 && c.StepDown(stream) >= 0 {
				n.Add(1)
			}
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	})
	return &n
}

// Read-your-writes on an R3 bucket: a put through node 1, then a write
// outside the informer's keys, then WaitFor(that write) through an
// informer connected to node 3, while two writers keep the stream busy. Only a bookmark can satisfy the WaitFor,
// and once it returns the cache must hold the put, whichever node the
// stream leader and the watch's consumer are on, while the leader steps
// down again and again. 0 stale reads.
func TestClusterReadYourWrites(t *testing.T) {
	for _, kind := range []string{"KV", "EventStream"} {
		t.Run(kind, func(t *testing.T) {
			c := harness.StartNATSCluster(t, 3)
			cfg := natstest.Config{Cluster: c, WriteNode: 0, ListenNode: 2, IdleCheck: -1}
			var hh natsHarness
			if kind == "KV" {
				hh = natstest.NewKV(t, cfg)
			} else {
				hh = natstest.NewEventStream(t, cfg)
			}
			readYourWrites(t, c, hh, rounds(t, 100))
		})
	}
}

type natsHarness interface {
	ListerWatcher() driver.ListerWatcher[natstest.Obj]
	Put(ctx context.Context, key string, n int64) (core.ResourceVersion, error)
	PutUnwatched(ctx context.Context) (core.ResourceVersion, error)
	StreamName() string
}

// loadLoop writes outside the watched keys as fast as acknowledgements
// come back until the test ends, so that followers are kept busy applying
// (the load under which the issue saw stale reads); it returns the count.
func loadLoop(t *testing.T, h natsHarness) *atomic.Int64 {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var n atomic.Int64
	t.Cleanup(func() { cancel(); wg.Wait() })
	for range 2 {
		wg.Go(func() {
			for ctx.Err() == nil {
				if _, err := h.PutUnwatched(ctx); err == nil {
					n.Add(1)
				}
			}
		})
	}
	return &n
}

func readYourWrites(t *testing.T, c *harness.NATSCluster, h natsHarness, n int) {
	inf, errs := informertest.Run(t, h.ListerWatcher(), core.InformerOptions[natstest.Obj]{MinWatchTimeout: time.Hour})
	stepdowns := stepDownLoop(t, c, h.StreamName())
	load := loadLoop(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	stale := 0
	for i := 1; i <= n; i++ {
		key := fmt.Sprintf("k%d", i%37)
		if _, err := h.Put(ctx, key, int64(i)); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		rv, err := h.PutUnwatched(ctx)
		if err != nil {
			t.Fatalf("unwatched put %d: %v", i, err)
		}
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
		err = inf.WaitFor(wctx, rv)
		wcancel()
		if err != nil {
			t.Fatalf("round %d: %v; errors reported: %v", i, err, errs.All())
		}
		if o, ok := inf.Indexer().Get(key); !ok || o.V != int64(i) {
			stale++
			t.Errorf("after WaitFor(%d) the cache holds %s=%+v (present %v), want version %d", rv, key, o, ok, i)
		}
	}
	t.Logf("%d puts read back through another node under %d step-downs and %d other writes: %d stale; errors reported: %d (%v)",
		n, stepdowns.Load(), load.Load(), stale, errs.Len(), firstErr(errs.All()))
}

func firstErr(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return errs[0]
}

// A lagging replica: every byte on node 3's routes is held for a while, so
// node 3 stores what the others agreed on later than they do, and the
// ListerWatcher is connected to node 3 while the stream leader is
// elsewhere. Consumers are placed on any replica, node 3's included. Each
// round puts through node 1, then Lists through node 3 and checks that the
// List holds every write up to the version it reports; a watch answering
// progress requests must hold every write up to each bookmark.
func TestClusterLaggingReplica(t *testing.T) {
	for _, kind := range []string{"KV", "EventStream"} {
		t.Run(kind, func(t *testing.T) {
			c := harness.StartNATSCluster(t, 3)
			cfg := natstest.Config{Cluster: c, WriteNode: 0, ListenNode: 2, IdleCheck: -1}
			var h natsHarness
			if kind == "KV" {
				h = natstest.NewKV(t, cfg)
			} else {
				h = natstest.NewEventStream(t, cfg)
			}
			laggingReplica(t, c, h, rounds(t, 50))
		})
	}
}

// lagDelay is how long node 3's routes hold each byte.
const lagDelay = 20 * time.Millisecond

func laggingReplica(t *testing.T, c *harness.NATSCluster, h natsHarness, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	for c.WaitStreamLeader(t, h.StreamName()) == 2 {
		c.StepDown(h.StreamName())
	}
	c.LagLast(lagDelay)
	defer c.LagLast(0)
	type write struct {
		rv  core.ResourceVersion
		key string
		v   int64
	}
	var writes []write
	// stateAt is the bucket as of version rv: the last write of each key
	// at or below it.
	stateAt := func(rv core.ResourceVersion) map[string]int64 {
		m := map[string]int64{}
		for _, w := range writes {
			if w.rv <= rv {
				m[w.key] = w.v
			}
		}
		return m
	}
	lw := h.ListerWatcher()
	_, from := listAll(t, lw)
	w := startWatch(t, lw, from)
	watched := map[string]int64{}
	seen := 0 // events of w already folded into watched
	bad := 0
	for i := 1; i <= n; i++ {
		key := fmt.Sprintf("k%d", i%11)
		rv, err := h.Put(ctx, key, int64(i))
		if err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		writes = append(writes, write{rv, key, int64(i)})
		listed, lrv := listAll(t, lw)
		if lrv < rv {
			bad++
			t.Errorf("round %d: List after the put at %d reports version %d", i, rv, lrv)
		}
		if got, want := objVersions(listed), stateAt(lrv); !equalVersions(got, want) {
			bad++
			t.Errorf("round %d: List at version %d holds %v, want %v", i, lrv, got, want)
		}
		other, err := h.PutUnwatched(ctx)
		if err != nil {
			t.Fatalf("unwatched put %d: %v", i, err)
		}
		w.requestProgress()
		evs := w.wait(t, fmt.Sprintf("a bookmark at %d or later", other), func(evs []driver.Event[natstest.Obj]) bool {
			for _, ev := range evs[seen:] {
				if ev.Type == driver.Bookmark && ev.RV >= other {
					return true
				}
			}
			return false
		})
		for _, ev := range evs[seen:] {
			switch ev.Type {
			case driver.Added, driver.Modified:
				watched[ev.Key] = ev.Object.V
			case driver.Deleted:
				delete(watched, ev.Key)
			case driver.Bookmark:
				if ev.RV >= other {
					if want := stateAt(ev.RV); !equalVersions(watched, want) {
						bad++
						t.Errorf("round %d: at the bookmark %d the watch has delivered %v, want %v", i, ev.RV, watched, want)
					}
				}
			}
		}
		seen = len(evs)
	}
	t.Logf("%d rounds through a lagging node: %d inexact Lists or bookmarks", n, bad)
}

func objVersions(m map[string]natstest.Obj) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, o := range m {
		out[k] = o.V
	}
	return out
}

func equalVersions(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// A List right after the stream was purged (a KV bucket's messages
// removed up to a sequence, as an age limit or `nats stream purge --seq`
// does) holds only what the stream still holds, even when its consumer
// reads a node that has not applied the purge yet: that node would
// deliver removed values, and the List would claim a version at which
// keys the bucket no longer has are present.
func TestClusterListAfterPurgeOnLaggingReplica(t *testing.T) {
	c := harness.StartNATSCluster(t, 3)
	h := natstest.NewKV(t, natstest.Config{Cluster: c, WriteNode: 0, ListenNode: 2, IdleCheck: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for c.WaitStreamLeader(t, h.StreamName()) == 2 {
		c.StepDown(h.StreamName())
	}
	stream, err := c.JetStream(t, 0).Stream(ctx, h.StreamName())
	if err != nil {
		t.Fatal(err)
	}
	c.LagLast(lagDelay)
	defer c.LagLast(0)
	lw := h.ListerWatcher()
	n := rounds(t, 30)
	for i := 1; i <= n; i++ {
		// Keys written before the purge are removed by it; the one
		// written at its sequence stays.
		for j := range 5 {
			if _, err := h.Put(ctx, fmt.Sprintf("old%d-%d", i, j), int64(i)); err != nil {
				t.Fatal(err)
			}
		}
		keep, err := h.Put(ctx, fmt.Sprintf("kept%d", i), int64(i))
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Purge(ctx, jetstream.WithPurgeSequence(uint64(keep))); err != nil {
			t.Fatal(err)
		}
		listed, rv := listAll(t, lw)
		want := map[string]int64{fmt.Sprintf("kept%d", i): int64(i)}
		if got := objVersions(listed); !equalVersions(got, want) {
			t.Fatalf("round %d: the List at version %d after a purge up to %d holds %v, want %v", i, rv, keep, got, want)
		}
	}
}

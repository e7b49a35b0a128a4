package relay_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/leader"
	"github.com/dbinformer/dbinformer/relay"
	"github.com/dbinformer/dbinformer/relay/relaytest"
	"github.com/dbinformer/dbinformer/shard"
)

// A relay with Options.Shards publishes each key on its shard's subject;
// three downstreams, each owning some shards, consume only those subjects:
// each caches exactly its shards' keys, equal to the table, reads only
// their messages, and WaitFor(v) right after a write at v finds the write.
func TestShardedDownstreams(t *testing.T) {
	nsrv := harness.StartNATS(t)
	pg := harness.StartPostgres(t)
	src := pgtest.New(t, pg, pgtest.Options{})
	const shards, keys = 8, 60
	h := relaytest.New(t, src, nsrv.JetStream(t), relaytest.Options{
		Shards: shards,
		NewElector: func(int) leader.Elector {
			el, err := leader.NewPostgres(pg.ConnString(), "sharded-"+t.Name(), leader.PostgresOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return el
		},
	})
	ctx := context.Background()
	want := map[string]int64{}
	var last core.ResourceVersion
	published := map[int]uint64{} // key messages per shard
	pub := func(keys ...string) {
		for _, k := range keys {
			published[shard.Of(k, shards)]++
		}
	}
	for i := range keys {
		k := fmt.Sprintf("k%02d", i)
		v, err := src.Put(ctx, k, 1)
		if err != nil {
			t.Fatal(err)
		}
		want[k], last = 1, v
		pub(k)
	}
	sets := [][]int{{0, 1, 2}, {3, 4, 5}, {6, 7}}
	type rep struct {
		owned map[int]bool
		down  *relay.Downstream[pgtest.Row]
		inf   *core.SharedIndexInformer[pgtest.Row]
		bad   chan string
	}
	var reps []*rep
	for i, set := range sets {
		down, err := h.NewShardDownstream(ctx, nsrv.JetStream(t), set)
		if err != nil {
			t.Fatal(err)
		}
		r := &rep{owned: map[int]bool{}, down: down, bad: make(chan string, 1)}
		for _, s := range set {
			r.owned[s] = true
		}
		// Every event the informer receives is of an owned shard.
		spy := &keyCheck{Downstream: down, ok: func(key string) bool { return r.owned[shard.Of(key, shards)] }, bad: r.bad}
		r.inf, _ = informertest.Run(t, spy, core.InformerOptions[pgtest.Row]{Name: fmt.Sprintf("shard%d", i)})
		reps = append(reps, r)
	}
	exact := func(at core.ResourceVersion) {
		t.Helper()
		for i, r := range reps {
			informertest.WaitFor(t, r.inf, at)
			// Right after WaitFor: the writes up to at are all there.
			got := map[string]int64{}
			for _, row := range r.inf.Indexer().List() {
				got[row.K] = row.V
			}
			mine := map[string]int64{}
			for k, v := range want {
				if r.owned[shard.Of(k, shards)] {
					mine[k] = v
				}
			}
			if d := informertest.Diff(fmt.Sprintf("downstream %d at %v", i, at), got, mine); len(d) > 0 {
				t.Fatalf("%v", d)
			}
			select {
			case k := <-r.bad:
				t.Fatalf("downstream %d received key %q of shard %d, not one of its %v", i, k, shard.Of(k, shards), slices.Sorted(maps.Keys(r.owned)))
			default:
			}
		}
	}
	exact(last)
	// Updates, deletes, a transaction over many shards.
	for round := int64(2); round <= 4; round++ {
		for i := 0; i < keys; i += 3 {
			k := fmt.Sprintf("k%02d", i)
			v, err := src.Put(ctx, k, round)
			if err != nil {
				t.Fatal(err)
			}
			want[k], last = round, v
			pub(k)
		}
		k := fmt.Sprintf("k%02d", round)
		v, err := src.Delete(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		delete(want, k)
		pub(k)
		all := slices.Sorted(maps.Keys(want))[:10]
		if v, err = src.PutAll(ctx, all, 10*round); err != nil {
			t.Fatal(err)
		}
		for _, k := range all {
			want[k] = 10 * round
		}
		pub(all...)
		last = v
		exact(last)
	}
	// Each read only its shards' messages: together about what one
	// unsharded downstream would have read, not three times it.
	var total uint64
	for i, r := range reps {
		n := r.down.MessagesRead()
		var mine uint64
		for s := range r.owned {
			mine += published[s]
		}
		t.Logf("downstream %d (shards %v) read %d messages of the %d published on its shards, caches %d keys", i, sets[i], n, mine, r.inf.Indexer().Len())
		if n > mine {
			t.Errorf("downstream %d read %d messages, more than the %d published on its shards", i, n, mine)
		}
		total += n
	}
	whole, err := h.NewDownstream(ctx, nsrv.JetStream(t))
	if err != nil {
		t.Fatal(err)
	}
	winf, _ := informertest.Run(t, whole, core.InformerOptions[pgtest.Row]{Name: "whole"})
	informertest.WaitFor(t, winf, last)
	t.Logf("an unsharded downstream listing once read %d messages; the three sharded ones, watching all along, %d together", whole.MessagesRead(), total)
	if winf.Indexer().Len() != len(want) {
		t.Fatalf("the unsharded downstream caches %d keys, want %d", winf.Indexer().Len(), len(want))
	}
}

// keyCheck passes on a Downstream (capabilities included: it embeds it)
// and reports the first key of an event that ok refuses.
type keyCheck struct {
	*relay.Downstream[pgtest.Row]
	ok  func(string) bool
	bad chan string
}

func (c *keyCheck) check(ev driver.Event[pgtest.Row]) {
	if ev.Type != driver.Bookmark && !c.ok(ev.Key) {
		select {
		case c.bad <- ev.Key:
		default:
		}
	}
}

func (c *keyCheck) List(ctx context.Context, sink driver.ListSink[pgtest.Row]) (core.ResourceVersion, error) {
	emit := sink.Emit
	sink.Emit = func(ev driver.Event[pgtest.Row]) error { c.check(ev); return emit(ev) }
	return c.Downstream.List(ctx, sink)
}

func (c *keyCheck) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[pgtest.Row]) error {
	emit := opts.Emit
	opts.Emit = func(batch []driver.Event[pgtest.Row]) error {
		for _, ev := range batch {
			c.check(ev)
		}
		return emit(batch)
	}
	return c.Downstream.Watch(ctx, from, opts)
}

// Under writes that never pause, on keys busy enough that a downstream
// often misses a message superseded before it read it: each WaitFor(v)
// right after a write at v finds, for every key of its shards, a value at
// least the last one written up to v (values only grow), and at the end
// the caches equal the table.
func TestShardedDownstreamsUnderWrites(t *testing.T) {
	nsrv := harness.StartNATS(t)
	pg := harness.StartPostgres(t)
	src := pgtest.New(t, pg, pgtest.Options{})
	const shards = 4
	h := relaytest.New(t, src, nsrv.JetStream(t), relaytest.Options{
		Shards: shards,
		NewElector: func(int) leader.Elector {
			el, err := leader.NewPostgres(pg.ConnString(), "sharded-"+t.Name(), leader.PostgresOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return el
		},
	})
	ctx := context.Background()
	// Six busy keys for each downstream.
	var hot []string
	per := map[int]int{}
	for i := 0; len(hot) < 12; i++ {
		k := fmt.Sprintf("h%02d", i)
		if o := shard.Of(k, shards) / 2; per[o] < 6 {
			per[o]++
			hot = append(hot, k)
		}
	}
	type write struct {
		v    core.ResourceVersion
		keys []string
		n    int64
	}
	var (
		mu     sync.Mutex
		writes []write
	)
	record := func(v core.ResourceVersion, keys []string, n int64) {
		mu.Lock()
		writes = append(writes, write{v, keys, n})
		mu.Unlock()
	}
	// ok reports whether n is key's value as of version v or a later one
	// (a cache may run ahead of its version, never behind it). One
	// goroutine writes: commit order is the order of writes.
	ok := func(key string, n int64, v core.ResourceVersion) bool {
		mu.Lock()
		defer mu.Unlock()
		asOf := -1
		for i, w := range writes {
			if w.v <= v && slices.Contains(w.keys, key) {
				asOf = i
			}
		}
		for _, w := range writes[max(asOf, 0):] {
			if w.n == n && slices.Contains(w.keys, key) {
				return true
			}
		}
		// The write in flight (committed, not recorded yet) is after v.
		return !slices.ContainsFunc(writes, func(w write) bool { return w.n == n })
	}
	var counter atomic.Int64 // every write's value is its own
	n0 := counter.Add(1)
	v, err := src.PutAll(ctx, hot, n0)
	if err != nil {
		t.Fatal(err)
	}
	record(v, hot, n0)
	var downs []*relay.Downstream[pgtest.Row]
	var infs []*core.SharedIndexInformer[pgtest.Row]
	for i, set := range [][]int{{0, 1}, {2, 3}} {
		down, err := h.NewShardDownstream(ctx, nsrv.JetStream(t), set)
		if err != nil {
			t.Fatal(err)
		}
		inf, _ := informertest.Run(t, down, core.InformerOptions[pgtest.Row]{Name: fmt.Sprintf("busy%d", i)})
		downs, infs = append(downs, down), append(infs, inf)
	}
	var (
		stopping atomic.Bool
		wg       sync.WaitGroup
		werr     atomic.Pointer[error]
	)
	wg.Go(func() {
		for !stopping.Load() {
			n := counter.Add(1)
			a := n % int64(len(hot))
			keys := []string{hot[a], hot[(a+1+n%int64(len(hot)-1))%int64(len(hot))]} // two keys, never the same
			v, err := src.PutAll(ctx, keys, n)
			if err != nil {
				werr.Store(&err)
				return
			}
			record(v, keys, n)
		}
	})
	defer func() { stopping.Store(true); wg.Wait() }()
	owner := func(k string) int { return shard.Of(k, shards) / 2 }
	began := time.Now()
	for round := range 30 {
		// The last write so far, whichever it is: WaitFor(v) right
		// after it.
		informertest.Eventually(t, "a write after the last round's", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(writes) > round+1
		})
		mu.Lock()
		v := writes[len(writes)-1].v
		mu.Unlock()
		for i, inf := range infs {
			informertest.WaitFor(t, inf, v)
			for _, key := range hot {
				if owner(key) != i {
					continue
				}
				row, present := inf.Indexer().Get(key)
				if !present || !ok(key, row.V, v) {
					mu.Lock()
					for _, w := range writes {
						if slices.Contains(w.keys, key) {
							t.Logf("write %v %v %d", w.v, w.keys, w.n)
						}
					}
					mu.Unlock()
					t.Logf("informer at %v", inf.LastSyncResourceVersion())
					t.Fatalf("round %d: downstream %d after WaitFor(%v) holds %q = %+v (present %v): a value from before v", round, i, v, key, row, present)
				}
			}
		}
	}
	t.Logf("30 rounds of WaitFor on both downstreams under writes: %v", time.Since(began).Round(time.Millisecond))
	stopping.Store(true)
	wg.Wait()
	if p := werr.Load(); p != nil {
		t.Fatal(*p)
	}
	mu.Lock()
	last := writes[len(writes)-1].v
	for _, w := range writes {
		last = max(last, w.v)
	}
	mu.Unlock()
	for i, inf := range infs {
		informertest.WaitFor(t, inf, last)
		mu.Lock()
		final := map[string]int64{}
		var vs = map[string]core.ResourceVersion{}
		for _, w := range writes {
			for _, k := range w.keys {
				if owner(k) == i && w.v >= vs[k] {
					final[k], vs[k] = w.n, w.v
				}
			}
		}
		mu.Unlock()
		got := map[string]int64{}
		for _, row := range inf.Indexer().List() {
			got[row.K] = row.V
		}
		if d := informertest.Diff(fmt.Sprintf("downstream %d", i), got, final); len(d) > 0 {
			t.Fatalf("%v", d)
		}
		t.Logf("downstream %d read %d messages", i, downs[i].MessagesRead())
	}
	mu.Lock()
	t.Logf("%d transactions written", len(writes))
	mu.Unlock()
}

// A stream holds one layout: a relay with another Options.Shards refuses
// to lead over it, and a downstream asked for another count refuses too,
// both naming the fix. A downstream without shards reads a sharded stream
// whole. (One asked for shards over a stream without them reads every key:
// shard's TestRelaySharded/decode.)
func TestShardLayoutMismatch(t *testing.T) {
	nsrv := harness.StartNATS(t)
	pg := harness.StartPostgres(t)
	src := pgtest.New(t, pg, pgtest.Options{})
	ctx := context.Background()
	js := nsrv.JetStream(t)
	if _, err := js.CreateStream(ctx, relay.StreamConfig("L", "l")); err != nil {
		t.Fatal(err)
	}
	elector := func(name string) leader.Elector {
		el, err := leader.NewPostgres(pg.ConnString(), name, leader.PostgresOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return el
	}
	r, err := relay.New(ctx, js, src.ListerWatcher(), relay.Options[pgtest.Row]{Stream: "L", Prefix: "l", Elector: elector("plain"), Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	v, err := src.Put(ctx, "a", 1)
	if err != nil {
		t.Fatal(err)
	}
	down, err := relay.NewDownstream[pgtest.Row](ctx, js, "L", "l", relay.DownstreamOptions[pgtest.Row]{})
	if err != nil {
		t.Fatal(err)
	}
	inf, _ := informertest.Run(t, down, core.InformerOptions[pgtest.Row]{Name: "whole"})
	informertest.WaitFor(t, inf, v)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// Another count: the relay refuses, naming the fix.
	r8, err := relay.New(ctx, js, src.ListerWatcher(), relay.Options[pgtest.Row]{Stream: "L", Prefix: "l", Elector: elector("eight"), Shards: 8})
	if err != nil {
		t.Fatal(err)
	}
	err = r8.Run(ctx)
	if !errors.Is(err, driver.ErrPermanent) || !strings.Contains(err.Error(), "purge") {
		t.Fatalf("a relay with 8 shards over a stream of 4: %v, want a permanent error naming the purge", err)
	}
	t.Log(err)
	// A downstream asked for another count refuses too.
	if _, err := relay.NewDownstream[pgtest.Row](ctx, js, "L", "l", relay.DownstreamOptions[pgtest.Row]{Shards: 8, Owned: []int{1}}); err == nil || !strings.Contains(err.Error(), "Options.Shards") {
		t.Fatalf("a downstream of 8 shards over a stream of 4: %v, want an error naming Options.Shards", err)
	} else {
		t.Log(err)
	}
}

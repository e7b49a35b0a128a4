package relay_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core"
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

func (c *keyCheck) check(ev core.Event[pgtest.Row]) {
	if ev.Type != core.Bookmark && !c.ok(ev.Key) {
		select {
		case c.bad <- ev.Key:
		default:
		}
	}
}

func (c *keyCheck) List(ctx context.Context, sink core.ListSink[pgtest.Row]) (core.ResourceVersion, error) {
	emit := sink.Emit
	sink.Emit = func(ev core.Event[pgtest.Row]) error { c.check(ev); return emit(ev) }
	return c.Downstream.List(ctx, sink)
}

func (c *keyCheck) Watch(ctx context.Context, from core.ResourceVersion, opts core.WatchOptions[pgtest.Row]) error {
	emit := opts.Emit
	opts.Emit = func(batch []core.Event[pgtest.Row]) error {
		for _, ev := range batch {
			c.check(ev)
		}
		return emit(batch)
	}
	return c.Downstream.Watch(ctx, from, opts)
}

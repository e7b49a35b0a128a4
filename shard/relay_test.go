package shard_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/dbinformer/dbinformer/adapters/etcd/etcdtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/leader"
	"github.com/dbinformer/dbinformer/relay"
	"github.com/dbinformer/dbinformer/relay/relaytest"
	"github.com/dbinformer/dbinformer/shard"
)

// Through the relay: one relay reads the source, each replica's Source
// keeps only its shards' keys. Without the relay's Options.Shards each
// downstream reads the whole stream and Source filters at decode; with it,
// Source hands its owned set to the downstream, which consumes only those
// shards' subjects (JetStream filters), and reopens its consumer with the
// new set at each handoff. N partial caches, one source reader.
func TestRelaySharded(t *testing.T) {
	var decode, subjects uint64
	t.Run("decode", func(t *testing.T) { decode = testRelaySharded(t, false) })
	t.Run("subjects", func(t *testing.T) { subjects = testRelaySharded(t, true) })
	// Each handoff round relists; a List reads the whole stream without
	// per-shard subjects, the owned shards' subjects with them.
	t.Logf("messages the three downstreams read: %d filtering at decode, %d consuming their shards' subjects", decode, subjects)
	if decode > 0 && subjects > 0 && 2*subjects > decode {
		t.Errorf("with per-shard subjects the downstreams read %d messages, not well below the %d they read filtering at decode", subjects, decode)
	}
}

// testRelaySharded returns how many messages the downstreams read.
func testRelaySharded(t *testing.T, subjects bool) uint64 {
	nsrv := harness.StartNATS(t)
	esrv := harness.StartEtcd(t)
	client := esrv.Client(t)
	const keys, shards = 60, 16
	relayShards := 0
	if subjects {
		relayShards = shards
	}
	h := relaytest.New(t, etcdtest.New(t, esrv, etcdtest.Options{}), nsrv.JetStream(t), relaytest.Options{
		Shards: relayShards,
		NewElector: func(int) leader.Elector {
			el, err := leader.NewEtcd(client, "/relay-election", leader.EtcdOptions{TTL: 2e9})
			if err != nil {
				t.Fatal(err)
			}
			return el
		},
	})
	ctx := context.Background()
	for i := range keys {
		if _, err := h.Put(ctx, fmt.Sprintf("k%02d", i), 1); err != nil {
			t.Fatal(err)
		}
	}
	b := etcdBackend(t, client, "/relay-shards")
	type rep struct {
		*replica
		inf           *core.SharedIndexInformer[etcdtest.Item]
		down          *relay.Downstream[etcdtest.Item]
		adds, deletes *atomic.Int64 // events handlers saw: enter, leave
	}
	newRep := func(id string) rep {
		r := newReplica(t, b, shard.Options{ID: id, Shards: shards, Lease: lease})
		down, err := h.NewDownstream(ctx, nsrv.JetStream(t))
		if err != nil {
			t.Fatal(err)
		}
		src, err := shard.NewSource(r.s, down)
		if err != nil {
			t.Fatal(err)
		}
		inf := core.NewSharedIndexInformer[etcdtest.Item](src, core.InformerOptions[etcdtest.Item]{Name: "relayed@" + id})
		src.Bind(inf)
		ictx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { _ = inf.Run(ictx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		if err := inf.WaitForCacheSync(ctx); err != nil {
			t.Fatal(err)
		}
		r.run(t)
		adds, deletes := new(atomic.Int64), new(atomic.Int64)
		if _, err := inf.AddEventHandler(core.ResourceEventHandlerFuncs[etcdtest.Item]{
			AddFunc:    func(string, etcdtest.Item, bool) { adds.Add(1) },
			DeleteFunc: func(string, etcdtest.Item, bool) { deletes.Add(1) },
		}); err != nil {
			t.Fatal(err)
		}
		return rep{r, inf, down, adds, deletes}
	}
	check := func(rs ...rep) {
		t.Helper()
		var replicas []*replica
		for _, r := range rs {
			replicas = append(replicas, r.replica)
		}
		settled(t, shards, replicas...)
		informertest.Eventually(t, "each replica to cache exactly its shards' keys, all keys once", func() bool {
			total := 0
			for _, r := range rs {
				owned := r.s.Owned()
				n := 0
				for i := range keys {
					if _, ok := owned[shard.Of(fmt.Sprintf("k%02d", i), shards)]; ok {
						n++
						if _, ok := r.inf.Indexer().Get(fmt.Sprintf("k%02d", i)); !ok {
							return false
						}
					}
				}
				if r.inf.Indexer().Len() != n {
					return false
				}
				total += n
			}
			return total == keys
		})
	}
	a, bb := newRep("a"), newRep("b")
	check(a, bb)
	left := a.deletes.Load() + bb.deletes.Load()
	c := newRep("c")
	check(a, bb, c)
	// c's keys entered its cache as adds and left a's or b's as deletes
	// (a member that joins takes only the shards it wins).
	moved := int64(c.inf.Indexer().Len())
	informertest.Eventually(t, "the moved keys' enter and leave events", func() bool {
		return c.adds.Load() == moved && a.deletes.Load()+bb.deletes.Load()-left == moved
	})
	t.Logf("cached: a %d, b %d, c %d of %d keys", a.inf.Indexer().Len(), bb.inf.Indexer().Len(), c.inf.Indexer().Len(), keys)
	t.Logf("messages read: a %d, b %d, c %d", a.down.MessagesRead(), bb.down.MessagesRead(), c.down.MessagesRead())
	return a.down.MessagesRead() + bb.down.MessagesRead() + c.down.MessagesRead()
}

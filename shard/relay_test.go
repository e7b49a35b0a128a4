package shard_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/dbinformer/dbinformer/adapters/etcd/etcdtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/leader"
	"github.com/dbinformer/dbinformer/relay/relaytest"
	"github.com/dbinformer/dbinformer/shard"
)

// Through the relay as it is today: one relay reads the source, each
// replica's downstream reads the whole stream and its Source keeps only
// its shards' keys (filtering at decode; per-shard subjects would let
// JetStream filter instead). N partial caches, one source reader.
func TestRelaySharded(t *testing.T) {
	nsrv := harness.StartNATS(t)
	esrv := harness.StartEtcd(t)
	client := esrv.Client(t)
	h := relaytest.New(t, etcdtest.New(t, esrv, etcdtest.Options{}), nsrv.JetStream(t), relaytest.Options{
		NewElector: func(int) leader.Elector {
			el, err := leader.NewEtcd(client, "/relay-election", leader.EtcdOptions{TTL: 2e9})
			if err != nil {
				t.Fatal(err)
			}
			return el
		},
	})
	ctx := context.Background()
	const keys, shards = 60, 16
	for i := range keys {
		if _, err := h.Put(ctx, fmt.Sprintf("k%02d", i), 1); err != nil {
			t.Fatal(err)
		}
	}
	b := etcdBackend(t, client, "/relay-shards")
	type rep struct {
		*replica
		inf *core.SharedIndexInformer[etcdtest.Item]
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
		return rep{r, inf}
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
	c := newRep("c")
	check(a, bb, c)
	t.Logf("cached: a %d, b %d, c %d of %d keys", a.inf.Indexer().Len(), bb.inf.Indexer().Len(), c.inf.Indexer().Len(), keys)
}

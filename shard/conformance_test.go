package shard_test

import (
	"testing"

	"github.com/dbinformer/dbinformer/adapters/etcd/etcdtest"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/shard"
)

// sourced is etcdtest's harness with its ListerWatcher behind a Source
// owning every shard: a Source is a ListerWatcher like any other and must
// pass the suite (DESIGN §10: every new ListerWatcher does).
type sourced struct {
	*etcdtest.Harness
	src *shard.Source[etcdtest.Item]
}

func (s sourced) ListerWatcher() driver.ListerWatcher[etcdtest.Item] { return s.src }

func TestSourceConformance(t *testing.T) {
	srv := harness.StartEtcd(t)
	b := etcdBackend(t, srv.Client(t), "/conformance/shards")
	conformance.Run(t, conformance.Capabilities{
		DeletesCarryObject:  true,
		DistinguishesUpdate: true,
		ExactWriteRV:        true,
		StrictGoroutines:    true,
	}, func(t *testing.T) conformance.Harness[etcdtest.Item] {
		h := etcdtest.New(t, srv, etcdtest.Options{})
		sh, err := shard.New(b, shard.Options{ID: "conformance", Shards: 8})
		if err != nil {
			t.Fatal(err)
		}
		src, err := shard.NewSource(sh, h.ListerWatcher())
		if err != nil {
			t.Fatal(err)
		}
		shard.OwnAll(src)
		return sourced{Harness: h, src: src}
	})
}

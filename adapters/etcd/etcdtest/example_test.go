package etcdtest_test

import (
	"context"
	"testing"

	"github.com/dbinformer/dbinformer/adapters/etcd/etcdtest"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/internal/testkit/servers"
)

// The adapter's conformance test: one server, a fresh prefix per case.
// (An Example gets no *testing.T, so this one is compiled, not run; the
// adapter's TestConformance runs exactly this.)
func Example_conformance() {
	_ = func(t *testing.T) {
		srv := servers.StartEtcd(t)
		conformance.Run(t, conformance.Capabilities{
			DeletesCarryObject:  true,
			DistinguishesUpdate: true,
			ExactWriteRV:        true,
		}, func(t *testing.T) conformance.Harness[etcdtest.Item] {
			return etcdtest.New(t, srv, etcdtest.Options{})
		})
	}
}

// A Harness with faults: writes and the truth go to the server directly,
// the Prefix's client through a proxy that Inject cuts.
func Example_faults() {
	_ = func(t *testing.T) {
		h := etcdtest.New(t, servers.StartEtcd(t), etcdtest.Options{Faults: true})
		ctx := context.Background()
		end, _ := h.Inject(t, ctx, conformance.Pause)
		if _, err := h.Put(ctx, "a", 1); err != nil { // the Prefix cannot see it yet
			t.Fatal(err)
		}
		end() // the Prefix's client reconnects
		truth, err := h.Truth(ctx)
		if err != nil || truth["a"] != 1 {
			t.Fatalf("truth %v, %v", truth, err)
		}
	}
}

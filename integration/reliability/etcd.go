package reliability

import (
	"math/rand/v2"
	"testing"

	"github.com/dbinformer/dbinformer/adapters/etcd/etcdtest"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// etcd: an embedded server of the run's own (the Restart fault stops it),
// and the adapter's harness with its client behind a proxy. Expire compacts
// the history past the informer's position while it is cut off.
func init() {
	Register("etcd", func(t testing.TB, _ *rand.Rand) (conformance.Harness[etcdtest.Item], string) {
		srv := harness.StartEtcd(t)
		return etcdtest.New(t, srv, etcdtest.Options{Prefix: "/reliability/", Faults: true}), "embedded etcd"
	})
}

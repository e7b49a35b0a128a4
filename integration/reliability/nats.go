package reliability

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/dbinformer/dbinformer/adapters/nats/natstest"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// nats: an embedded nats-server with a KV bucket, the informer behind a
// proxy. Expire purges the bucket's stream below its head while the
// informer is cut off, so keys whose last value was older vanish from the
// source as well. History 1 (the default) and 5 take different paths in
// the adapter on resume: with 1, rewritten keys leave gaps below the head.
//
// nats-cluster: the same on an R3 bucket of a 3-node cluster, the informer
// on one node (behind the proxy), the writer on another; beside the proxy
// faults, Restart kills the stream leader's node (and restarts it when the
// fault ends) and StepDown moves the leadership while the watch runs.
func init() {
	Register("nats", func(t testing.TB, rnd *rand.Rand) (conformance.Harness[natstest.Obj], string) {
		history := uint8(1 + 4*rnd.IntN(2))
		h := natstest.NewKV(t, natstest.Config{Server: harness.StartNATS(t), History: history, Proxy: true})
		return h, fmt.Sprintf("KV history %d", history)
	})
	Register("nats-cluster", func(t testing.TB, rnd *rand.Rand) (conformance.Harness[natstest.Obj], string) {
		history := uint8(1 + 4*rnd.IntN(2))
		listen := rnd.IntN(3)
		c := harness.StartNATSCluster(t, 3)
		h := natstest.NewKV(t, natstest.Config{Cluster: c, ListenNode: listen, WriteNode: (listen + 1) % 3, History: history, Proxy: true})
		return h, fmt.Sprintf("R3 KV history %d, informer on node %d", history, listen+1)
	})
}

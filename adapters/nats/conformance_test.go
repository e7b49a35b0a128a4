package natsinformer_test

import (
	"testing"

	"github.com/dbinformer/dbinformer/adapters/nats/natstest"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// The embedded server's goroutines are not the adapter's.
var natsCaps = conformance.Capabilities{
	ExactWriteRV:     true,
	StrictGoroutines: true,
	IgnoreGoroutines: []string{"github.com/nats-io/nats-server/v2", "integration/harness.(*DelayProxy)"},
}

func TestKVConformance(t *testing.T) {
	srv := harness.StartNATS(t)
	conformance.Run(t, natsCaps, func(t *testing.T) conformance.Harness[natstest.Obj] {
		return natstest.NewKV(t, natstest.Config{Server: srv})
	})
}

func TestEventStreamConformance(t *testing.T) {
	srv := harness.StartNATS(t)
	caps := natsCaps
	caps.DeletesCarryObject, caps.DistinguishesUpdate = true, true
	conformance.Run(t, caps, func(t *testing.T) conformance.Harness[natstest.Obj] {
		return natstest.NewEventStream(t, natstest.Config{Server: srv})
	})
}

// The same suites on an R3 bucket and stream of a 3-node cluster, the
// ListerWatcher on one node and the writer on another.
func TestClusterKVConformance(t *testing.T) {
	c := harness.StartNATSCluster(t, 3)
	conformance.Run(t, natsCaps, func(t *testing.T) conformance.Harness[natstest.Obj] {
		return natstest.NewKV(t, natstest.Config{Cluster: c, ListenNode: 2, WriteNode: 0})
	})
}

func TestClusterEventStreamConformance(t *testing.T) {
	c := harness.StartNATSCluster(t, 3)
	caps := natsCaps
	caps.DeletesCarryObject, caps.DistinguishesUpdate = true, true
	conformance.Run(t, caps, func(t *testing.T) conformance.Harness[natstest.Obj] {
		return natstest.NewEventStream(t, natstest.Config{Cluster: c, ListenNode: 1, WriteNode: 2})
	})
}

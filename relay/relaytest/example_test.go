package relaytest_test

import (
	"testing"

	"github.com/dbinformer/dbinformer/adapters/etcd/etcdtest"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/leader"
	"github.com/dbinformer/dbinformer/relay/relaytest"
)

// The conformance suite on a Downstream: an etcd prefix relayed over a
// JetStream stream. (An Example gets no *testing.T, so this one is
// compiled, not run; relay's TestEtcdConformance runs exactly this.)
func Example_conformance() {
	_ = func(t *testing.T) {
		nsrv := harness.StartNATS(t)
		esrv := harness.StartEtcd(t)
		client := esrv.Client(t)
		conformance.Run(t, conformance.Capabilities{ExactWriteRV: true}, func(t *testing.T) conformance.Harness[etcdtest.Item] {
			return relaytest.New(t, etcdtest.New(t, esrv, etcdtest.Options{}), nsrv.JetStream(t), relaytest.Options{
				History: -1, // the suite watches from old versions
				NewElector: func(int) leader.Elector {
					el, err := leader.NewEtcd(client, "/relay/"+t.Name(), leader.EtcdOptions{})
					if err != nil {
						t.Fatal(err)
					}
					return el
				},
			})
		})
	}
}

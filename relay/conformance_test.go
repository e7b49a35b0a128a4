package relay_test

import (
	"fmt"
	"testing"

	"github.com/dbinformer/dbinformer/adapters/etcd/etcdtest"
	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/leader"
	"github.com/dbinformer/dbinformer/relay/relaytest"
)

var caps = conformance.Capabilities{
	ExactWriteRV:     true,
	StrictGoroutines: true,
	IgnoreGoroutines: []string{"github.com/nats-io/nats-server/v2", "go.etcd.io/etcd/server", "integration/harness"},
}

// The downstream of a relay over an etcd prefix passes the suite: its
// versions are etcd revisions.
func TestEtcdConformance(t *testing.T) {
	nsrv := harness.StartNATS(t)
	esrv := harness.StartEtcd(t)
	client := esrv.Client(t)
	n := 0
	conformance.Run(t, caps, func(t *testing.T) conformance.Harness[etcdtest.Item] {
		n++
		src := etcdtest.New(t, esrv, etcdtest.Options{})
		prefix := fmt.Sprintf("/relay-election/%d", n)
		return relaytest.New(t, src, nsrv.JetStream(t), relaytest.Options{
			History: -1,
			NewElector: func(i int) leader.Elector {
				el, err := leader.NewEtcd(client, prefix, leader.EtcdOptions{TTL: 2e9})
				if err != nil {
					t.Fatal(err)
				}
				return el
			},
		})
	})
}

// The same over a Postgres table: versions are commit LSNs.
func TestPostgresConformance(t *testing.T) {
	nsrv := harness.StartNATS(t)
	pg := harness.StartPostgres(t)
	n := 0
	conformance.Run(t, caps, func(t *testing.T) conformance.Harness[pgtest.Row] {
		n++
		src := pgtest.New(t, pg, pgtest.Options{})
		name := fmt.Sprintf("relay-%d", n)
		return relaytest.New(t, src, nsrv.JetStream(t), relaytest.Options{
			History: -1,
			NewElector: func(i int) leader.Elector {
				el, err := leader.NewPostgres(pg.ConnString(), name, leader.PostgresOptions{Check: 2e8})
				if err != nil {
					t.Fatal(err)
				}
				return el
			},
		})
	})
}

// A downstream that owns shards (here all of them, of a relay with
// per-shard subjects) passes the suite too: it reads the shards' subjects
// and confirms versions by its own proof (see Downstream's Shards). It
// delivers changes right after the last version it confirmed, not at
// their own: the suite's read-your-writes rule, not ExactWriteRV.
func TestShardedConformance(t *testing.T) {
	nsrv := harness.StartNATS(t)
	pg := harness.StartPostgres(t)
	n := 0
	sharded := caps
	sharded.ExactWriteRV = false
	sharded.BatchStartRV = true
	conformance.Run(t, sharded, func(t *testing.T) conformance.Harness[pgtest.Row] {
		n++
		src := pgtest.New(t, pg, pgtest.Options{})
		name := fmt.Sprintf("relay-sharded-%d", n)
		return relaytest.New(t, src, nsrv.JetStream(t), relaytest.Options{
			History:      -1,
			Shards:       4,
			OwnAllShards: true,
			NewElector: func(i int) leader.Elector {
				el, err := leader.NewPostgres(pg.ConnString(), name, leader.PostgresOptions{Check: 2e8})
				if err != nil {
					t.Fatal(err)
				}
				return el
			},
		})
	})
}

package reliability

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/leader"
	"github.com/dbinformer/dbinformer/relay/relaytest"
)

// relay: a Postgres table (behind a proxy, as in the postgres runs) read
// by two relays (a Postgres advisory-lock election) into a JetStream
// stream; the informer under test is a relay.Downstream. The faults are
// the source's (cut, pause, freeze and expire break the relay's
// replication connection or slot; restart restarts Postgres and also
// kills the relay leader). The seed picks a single server or an R3 stream
// on a 3-node cluster, and whether the stream keeps one message per key
// (downstream watches that fall behind a rewritten key expire and relist
// from the stream) or all of them.
func init() {
	Register("relay", func(t testing.TB, rnd *rand.Rand) (conformance.Harness[pgtest.Row], string) {
		pg := harness.StartPostgres(t)
		src := pgtest.New(t, pg, pgtest.Options{Proxy: true, Table: "reliability"})
		opts := relaytest.Options{
			Relays: 2,
			NoWait: true,
			NewElector: func(i int) leader.Elector {
				el, err := leader.NewPostgres(pg.ConnString(), "reliability-relay", leader.PostgresOptions{Check: 200e6})
				if err != nil {
					t.Fatal(err)
				}
				return el
			},
		}
		variant := "single nats-server"
		if rnd.IntN(2) == 0 {
			c := harness.StartNATSCluster(t, 3)
			opts.Replicas = 3
			variant = "R3 stream on 3 nodes"
			history := "one message per key"
			if rnd.IntN(2) == 0 {
				opts.History, history = -1, "every message"
			}
			return relaytest.New(t, src, c.JetStream(t, rnd.IntN(3)), opts), fmt.Sprintf("%s, %s", variant, history)
		}
		history := "one message per key"
		if rnd.IntN(2) == 0 {
			opts.History, history = -1, "every message"
		}
		return relaytest.New(t, src, harness.StartNATS(t).JetStream(t), opts), fmt.Sprintf("%s, %s", variant, history)
	})
}

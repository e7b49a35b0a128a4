package reliability

import (
	"math/rand/v2"
	"testing"

	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// The Postgres runs: a throwaway server, one table behind a proxy
// (adapters/postgres/pgtest). The seed picks a permanent or a temporary
// slot. Expire drops a permanent slot while the informer is cut off (a
// temporary one vanishes with its connection, which the same outage ends).
func init() {
	Register("postgres", func(t testing.TB, rnd *rand.Rand) (conformance.Harness[pgtest.Row], string) {
		srv := harness.StartPostgres(t)
		opts := pgtest.Options{Proxy: true, Table: "reliability"}
		variant := "temporary slot"
		if rnd.IntN(2) == 0 {
			opts.Slot, variant = "reliability_slot", "permanent slot"
		}
		return pgtest.New(t, srv, opts), variant
	})
}

package pginformer_test

import (
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/integration/harness"
)

func TestConformance(t *testing.T) {
	pg := harness.StartPostgres(t)
	t.Run("IdentityDefault", func(t *testing.T) { runConformance(t, pg, false) })
	t.Run("IdentityFull", func(t *testing.T) { runConformance(t, pg, true) })
}

func runConformance(t *testing.T, pg *harness.Postgres, full bool) {
	conformance.Run(t, conformance.Capabilities{DistinguishesUpdate: true, DeletesCarryObject: full, Timeout: time.Minute},
		func(t *testing.T) conformance.Harness[pgtest.Row] {
			return pgtest.New(t, pg, pgtest.Options{Full: full})
		})
}

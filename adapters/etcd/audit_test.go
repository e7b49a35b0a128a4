package etcdinformer_test

import (
	"testing"

	"github.com/dbinformer/dbinformer/adapters/etcd/etcdtest"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/filter"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// The audit finds and heals every lie an informertest.Lossy tells, and
// reports no difference while writers race it, on a real etcd, with List
// pages of three keys so that the audit crosses pages pinned to one
// revision.
func TestAuditConformance(t *testing.T) {
	srv := harness.StartEtcd(t)
	conformance.RunAudit(t, etcdCaps, func(t *testing.T) conformance.Harness[etcdtest.Item] {
		return etcdtest.New(t, srv, etcdtest.Options{PageSize: 3})
	})
}

// A partial sync (a key range pushed down, a condition evaluated here)
// audits only what its filter selects.
func TestAuditFiltered(t *testing.T) {
	srv := harness.StartEtcd(t)
	conformance.RunAudit(t, etcdCaps, func(t *testing.T) conformance.Harness[etcdtest.Item] {
		f := filter.MustNew[etcdtest.Item](filter.And(
			filter.Prefix(filter.Key, "in."),
			filter.Where("even version", func(it etcdtest.Item) bool { return it.Version%2 == 0 }),
		))
		return filteredPrefix{etcdtest.New(t, srv, etcdtest.Options{Where: f, PageSize: 3})}
	})
}

package natsinformer_test

import (
	"context"
	"testing"

	"github.com/dbinformer/dbinformer/adapters/nats/natstest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/filter"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// The audit finds and heals every lie an informertest.Lossy tells, and
// reports no difference while writers race it, on a real nats-server.
func TestKVAuditConformance(t *testing.T) {
	srv := harness.StartNATS(t)
	conformance.RunAudit(t, natsCaps, func(t *testing.T) conformance.Harness[natstest.Obj] {
		return natstest.NewKV(t, natstest.Config{Server: srv})
	})
}

// A partial sync (the key prefix as the subject filter, a condition
// evaluated here) audits only what its filter selects.
func TestKVAuditFiltered(t *testing.T) {
	srv := harness.StartNATS(t)
	conformance.RunAudit(t, natsCaps, func(t *testing.T) conformance.Harness[natstest.Obj] {
		f := filter.MustNew[natstest.Obj](filter.And(
			filter.Prefix(filter.Key, "in."),
			filter.Where("even version", func(o natstest.Obj) bool { return o.V%2 == 0 }),
		))
		return filteredKV{natstest.NewKV(t, natstest.Config{Server: srv, KVWhere: f})}
	})
}

// On a 3-node cluster, listening on a node other than the one written to:
// the audit's consumer may sit on a replica that lags, and a key it
// delivers twice must not count.
func TestClusterKVAuditConformance(t *testing.T) {
	c := harness.StartNATSCluster(t, 3)
	conformance.RunAudit(t, natsCaps, func(t *testing.T) conformance.Harness[natstest.Obj] {
		return natstest.NewKV(t, natstest.Config{Cluster: c, ListenNode: 2, WriteNode: 0})
	})
}

// An event stream's fold is audited against a fold of its own, on a
// single server and on a 3-node cluster; a stateless stream's audit
// streams each message as it comes.
func TestEventStreamAuditConformance(t *testing.T) {
	srv := harness.StartNATS(t)
	caps := natsCaps
	caps.DeletesCarryObject, caps.DistinguishesUpdate = true, true
	conformance.RunAudit(t, caps, func(t *testing.T) conformance.Harness[natstest.Obj] {
		return natstest.NewEventStream(t, natstest.Config{Server: srv})
	})
	t.Run("stateless", func(t *testing.T) {
		conformance.RunAudit(t, natsCaps, func(t *testing.T) conformance.Harness[natstest.Obj] {
			return natstest.NewEventStream(t, natstest.Config{Server: srv, Stateless: true})
		})
	})
}

func TestClusterEventStreamAuditConformance(t *testing.T) {
	c := harness.StartNATSCluster(t, 3)
	caps := natsCaps
	caps.DeletesCarryObject, caps.DistinguishesUpdate = true, true
	conformance.RunAudit(t, caps, func(t *testing.T) conformance.Harness[natstest.Obj] {
		return natstest.NewEventStream(t, natstest.Config{Cluster: c, ListenNode: 2, WriteNode: 0})
	})
}

// A bucket's MaxAge or a purge drops a key's value without a message the
// watch delivers: the audit asks, before it reports a key, whether the
// bucket still holds the value it read (driver.AuditRechecker), and the
// answer is found through a filter's wrapper too.
func TestKVAuditRecheck(t *testing.T) {
	h := natstest.NewKV(t, natstest.Config{Server: harness.StartNATS(t)})
	ctx := context.Background()
	wrapped := filter.Wrap[natstest.Obj](h.ListerWatcher(), filter.MustNew[natstest.Obj](filter.Prefix(filter.Key, "k")))
	rc, ok := driver.Capability[driver.AuditRechecker](wrapped)
	if !ok {
		t.Fatal("the KV ListerWatcher behind filter.Wrap offers no core.AuditRechecker")
	}
	unchanged := func(key string, rv core.ResourceVersion) bool {
		t.Helper()
		same, err := rc.AuditUnchanged(ctx, key, rv)
		if err != nil {
			t.Fatal(err)
		}
		return same
	}
	first, err := h.Put(ctx, "k1", 1)
	if err != nil {
		t.Fatal(err)
	}
	if !unchanged("k1", first) {
		t.Fatalf("k1 at %d, its last value, reported changed", first)
	}
	second, err := h.Put(ctx, "k1", 2)
	if err != nil {
		t.Fatal(err)
	}
	if unchanged("k1", first) || !unchanged("k1", second) {
		t.Fatalf("after a rewrite: k1 at %d should be changed, at %d unchanged", first, second)
	}
	if unchanged("k2", second) {
		t.Fatal("k2, never written, reported unchanged")
	}
	if err := h.Expire(ctx); err != nil { // a purge: no delete marker
		t.Fatal(err)
	}
	if unchanged("k1", second) {
		t.Fatalf("k1 at %d reported unchanged after the stream was purged", second)
	}
}

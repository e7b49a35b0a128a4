// Package etcdtest drives an etcdinformer.Prefix against a real etcd server
// for tests and benchmarks: New returns a conformance.Harness over a fresh
// prefix, which the adapter's conformance test, the reliability suite
// (integration/reliability) and the benchmarks (bench/) share. Most tests
// need only New and the server from servers.StartEtcd:
//
//	srv := servers.StartEtcd(t)
//	conformance.Run(t, caps, func(t *testing.T) conformance.Harness[etcdtest.Item] {
//		return etcdtest.New(t, srv, etcdtest.Options{})
//	})
//
// Besides the required methods a Harness implements every optional
// capability of package conformance: Expirer (compaction at the head),
// Unwatched (a write next to the prefix), Transactor (an etcd Txn), Truth
// (a read of the prefix straight from etcd) and, with Options.Faults,
// Faults (the Prefix's client goes through an internal/testkit/proxy that cuts
// and refuses connections; the server is stopped and restarted).
package etcdtest

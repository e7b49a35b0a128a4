// Package reliability is dbinformer's model-based fault-injection suite:
// for each adapter, against its real server, a random workload of creates,
// updates and deletes over a small key space runs while faults are
// injected (connections cut, refused or frozen through integration/proxy,
// the server killed and restarted with its data, the position expired,
// handlers that panic, and handlers that fail and requeue through a
// rate-limited WorkQueue). When the workload stops the suite waits for
// WaitFor(head) and checks that the cache equals the source read directly,
// that no handler saw a key's version go backwards (informertest.Recorder),
// that the reconciler never read an older version than before, that every
// handler ends at the source's final state (deleted keys gone), and that
// no goroutine is left behind once the harness is closed. It also measures,
// after each fault heals, how long the informer takes to reach the head of
// that moment, and reports it (p50/p99 per adapter and fault kind).
//
// Throughout, the informer audits itself (core.InformerOptions.Audit)
// every quarter second, report only, and once more after the final checks: a run
// that cannot compare (the source down, the cache behind a fault) is
// counted as failed and is fine; a divergent run is a divergence of the
// run, and a false positive when the final checks passed (the cache was
// right and the audit said otherwise, or it was wrong for a while and
// nothing else noticed). See AuditCounts.
//
// TestShardedReliability is the sharded variant (package shard): replicas
// splitting the keys of an etcd prefix or a Postgres table join, leave and
// lose their membership connection, as the seed says, while the same
// source faults break their reads and the keys are written throughout; no
// key may be handled by two replicas at overlapping times
// (shardtest.CallLog), and every key must end cached by exactly its
// owner, at the source's version.
//
// An adapter takes part through its conformance.Harness, the same one its
// conformance test and benchmarks use, which must also implement
// conformance.Truth and conformance.Faults. Its file in this package
// registers a MakeHarness under the adapter's name:
//
//	func init() {
//		reliability.Register("etcd", func(t testing.TB, rnd *rand.Rand) (conformance.Harness[etcdtest.Item], string) {
//			return etcdtest.NewProxied(t, ...), "embedded etcd"
//		})
//	}
//
// Every value written carries a version drawn from one counter per run, so
// versions grow in write order across keys and across deletes: a handler
// that sees a smaller version after a larger one for the same key has seen
// the key go backwards.
//
// A run is a pure function of its seed for everything the suite decides
// (operations, keys, fault kinds and their positions); the timing of the
// servers is not, so a failing seed is replayed with the command the
// failure prints, and re-run a few times if it does not fail at once.
//
//	go test ./integration/reliability -run TestReliability/etcd -seed 7 -v
//	go test ./integration/reliability -run TestReliability -seeds 50 -report RELIABILITY.md
//
// Flags of the test binary: -seeds N (seeds 1..N per adapter, default 2,
// the small version that make test runs), -seed N (only that one), -ops and
// -faults (size of a run), -audit D (the audit's period; negative: off),
// and -report FILE (write RELIABILITY.md). Every
// divergence found is kept as a regression test that always runs.
//
// TestKillRestart is the kill fault of warm restarts (core.CheckpointOptions):
// for every adapter (subtests postgres, etcd, nats-kv, nats-stream, kube,
// each over its own harness from etcdtest, natstest, kubetest, pgtest), the
// informer runs as a child process (internal/killchild; Postgres on a
// permanent slot) that is killed with SIGKILL at a seeded instant, also
// during its checkpoint writes, and restarted from its checkpoint; the last
// start must not list, and its cache must equal the source. It takes the
// same -seed and -seeds flags, and make reliability runs it.
//
// The package's other tests cover bad inputs and hostile names that the
// adapters' own tests do not: empty and huge keys and values, bucket,
// stream, slot and schema names with quotes, semicolons, spaces, dots and
// wildcards, passwords next to TLS settings, and a watch that delivers out
// of version order.
package reliability

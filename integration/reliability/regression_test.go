package reliability_test

import (
	"flag"
	"testing"

	"github.com/dbinformer/dbinformer/integration/reliability"
)

var flagKnownBugs = flag.Bool("known-bugs", false, "also run the regression tests of divergences not fixed yet")

// Found by TestReliability/nats seed 1 (KV history 5). How often it
// diverges depends on the machine's load: 2 runs of 3 with -race and 2 of 5
// without on a busy machine, 16 seeds of 50 in the RELIABILITY.md run, none
// in 20 runs on a quiet machine. The expire fault cuts the informer's
// connection, writes, purges the bucket's stream below its head and lets
// the client reconnect. The watch's pull consumer lives on the server and
// survives the disconnect; the server moves it past the purged messages,
// so the watch only sees the stream sequence jump (as History-1 rewrites
// also make it jump), its consumer sequence stays contiguous, and the
// lost-value check (adapters/nats/watch.go, tail.head, run only after
// KVOptions.IdleCheck without messages or on RequestProgress) never runs
// while messages keep coming. WaitFor(head) is satisfied by the delivered
// messages and returns with every purged key still cached (27 divergences:
// 9 keys in cache, handler and reconciler).
//
// It runs with -known-bugs until adapters/nats is fixed; then drop the flag.
func TestRegressionNATSPurgeWhileDisconnected(t *testing.T) {
	if !*flagKnownBugs {
		t.Log("known divergence, not fixed yet: run with -known-bugs")
		return
	}
	for attempt := 1; attempt <= 10; attempt++ {
		res := reliability.Run(t, &reliability.NATS{Purge: true}, 1, reliability.Config{Ops: 40, FaultsPerKind: 1})
		if len(res.Divergences) > 0 {
			t.Fatalf("attempt %d: %s", attempt, res.Failure())
		}
	}
}

// Found by the 50-seed run (RELIABILITY.md, 2026-11-21): postgres seed 21,
// temporary slot, -ops 60 -faults 1, on a loaded machine. WaitFor(head)
// returned without error, yet the cache lacked the last ~10 transactions
// of the workload (keys at versions 55..63 stale or missing, one delete not
// applied): a version at or past head was reported applied while those
// transactions were not. It did not reproduce in 12 quiet replays; it runs
// here up to 10 times (with -known-bugs) until its cause is found.
func TestRegressionPostgresSeed21(t *testing.T) {
	if !*flagKnownBugs {
		t.Log("known divergence, not reproduced on demand yet: run with -known-bugs")
		return
	}
	for attempt := 1; attempt <= 10; attempt++ {
		res := reliability.Run(t, &reliability.Postgres{}, 21, reliability.Config{Ops: 60, FaultsPerKind: 1})
		if len(res.Divergences) > 0 {
			t.Fatalf("attempt %d: %s", attempt, res.Failure())
		}
	}
}

package reliability_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/integration/reliability"
)

// Report renders results as RELIABILITY.md: a summary per adapter, a table
// per adapter and fault kind with the time the informer took to converge
// after each fault healed (p50 and p99, and apart those overlapped by the
// next fault), what the consistency audit said, and every divergence with
// the command that replays its seed.
func ExampleReport() {
	res := reliability.Result{
		Adapter: "etcd", Variant: "embedded etcd", Seed: 7, Ops: 60,
		Config: reliability.Config{Ops: 60, FaultsPerKind: 1},
		Faults: map[conformance.Fault]int{conformance.Cut: 1, conformance.Restart: 1},
		Converge: map[conformance.Fault][]time.Duration{
			conformance.Cut: {120 * time.Millisecond},
		},
		// The next fault came before the informer had caught up after the
		// restart: its time is reported apart.
		Overlapped: map[conformance.Fault][]time.Duration{
			conformance.Restart: {9 * time.Second},
		},
		Divergences: []string{`cache lacks "k03"; want version 41`},
		// The consistency audit ran five times, twice during a fault; one
		// run could not read the source.
		Audit: reliability.AuditCounts{Runs: 5, DuringFaults: 2, Equal: 4, Failed: 1,
			FailedBy: map[string]int{reliability.AuditSourceDown: 1}, InFlight: 3},
	}
	md := reliability.Report([]reliability.Result{res}, "go test ./integration/reliability", time.Minute)
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "| etcd | cut") || strings.HasPrefix(line, "| etcd | 5 |") || strings.HasPrefix(line, "| etcd | 1 | 60") || strings.HasPrefix(line, "| etcd | restart") || strings.HasPrefix(line, "- etcd seed") {
			fmt.Println(line)
		}
	}
	fmt.Println(res.Replay())
	// Output:
	// | etcd | 1 | 60 | 2 | 0 | 0 | 1 | 5 (4/0/1) | embedded etcd ×1 | 0s |
	// | etcd | cut | 1 | 1 | 1 | 120ms | 120ms | - |
	// | etcd | restart | 1 | 1 | 1 | - | - | 1 (max 9s) |
	// | etcd | 5 | 2 | 4 | 0 | 0 | 1 (source 1) | 3 | 5.0 |
	// - etcd seed 7 (embedded etcd): replay with `go test ./integration/reliability -run 'TestReliability/etcd$' -seed 7 -ops 60 -faults 1 -v`
	// go test ./integration/reliability -run 'TestReliability/etcd$' -seed 7 -ops 60 -faults 1 -v
}

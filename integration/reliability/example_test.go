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
// next fault), and every divergence with the
// command that replays its seed.
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
	}
	md := reliability.Report([]reliability.Result{res}, "go test ./integration/reliability", time.Minute)
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "| etcd | cut") || strings.HasPrefix(line, "| etcd | restart") || strings.HasPrefix(line, "- etcd seed") {
			fmt.Println(line)
		}
	}
	fmt.Println(res.Replay())
	// Output:
	// | etcd | cut | 1 | 1 | 1 | 120ms | 120ms | - |
	// | etcd | restart | 1 | 1 | 1 | - | - | 1 (max 9s) |
	// - etcd seed 7 (embedded etcd): replay with `go test ./integration/reliability -run 'TestReliability/etcd$' -seed 7 -ops 60 -faults 1 -v`
	// go test ./integration/reliability -run 'TestReliability/etcd$' -seed 7 -ops 60 -faults 1 -v
}

package reliability_test

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/integration/reliability"
)

var (
	flagSeed   = flag.Uint64("seed", 0, "run only this seed (replay)")
	flagSeeds  = flag.Int("seeds", 2, "seeds per adapter (1..N)")
	flagOps    = flag.Int("ops", 0, "writes per run (0: the default)")
	flagFaults = flag.Int("faults", 0, "faults of each kind per run (0: the default)")
	flagReport = flag.String("report", "", "write a Markdown report of every run to this file")
	flagAudit  = flag.Duration("audit", 0, "the consistency audit's period (0: reliability.DefaultAuditPeriod; negative: no audit)")
)

func seeds() []uint64 {
	if *flagSeed != 0 {
		return []uint64{*flagSeed}
	}
	out := make([]uint64, *flagSeeds)
	for i := range out {
		out[i] = uint64(i + 1)
	}
	return out
}

func config() reliability.Config {
	cfg := reliability.Config{Ops: *flagOps, FaultsPerKind: *flagFaults, AuditPeriod: *flagAudit}
	if cfg.Ops == 0 && *flagReport == "" {
		cfg.Ops = 40 // the small version inside make test
	}
	return cfg
}

var report struct {
	mu      sync.Mutex
	results []reliability.Result
}

func record(r reliability.Result) {
	report.mu.Lock()
	report.results = append(report.results, r)
	report.mu.Unlock()
}

func runAll(t *testing.T, a reliability.Adapter) {
	for _, seed := range seeds() {
		t.Run(fmt.Sprintf("seed_%d", seed), func(t *testing.T) {
			res := a.Run(t, seed, config())
			record(res)
			if len(res.Divergences) > 0 {
				t.Error(res.Failure())
			}
		})
	}
}

// command is the go test command line that reproduces this run's report.
func command() string {
	args := []string{"go test ./integration/reliability -run 'TestReliability'"}
	flag.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "seed", "seeds", "ops", "faults", "report", "timeout", "audit":
			args = append(args, "-"+f.Name+" "+f.Value.String())
		case "test.run":
			args[0] = "go test ./integration/reliability -run '" + f.Value.String() + "'"
		case "test.timeout":
			args = append(args, "-timeout "+f.Value.String())
		}
	})
	return strings.Join(args, " ")
}

// TestReliability runs the suite for every registered adapter (each
// adapter's file in the package registers its harness); -seeds, -seed,
// -ops, -faults, -audit and -report size it (the defaults are the small
// version run by make test).
func TestReliability(t *testing.T) {
	start := time.Now()
	adapters := reliability.Adapters()
	if len(adapters) == 0 {
		t.Fatal("no adapter registered (reliability.Register)")
	}
	for _, a := range adapters {
		t.Run(a.Name, func(t *testing.T) { runAll(t, a) })
	}
	if *flagReport != "" {
		md := reliability.Report(report.results, command(), time.Since(start))
		if err := os.WriteFile(*flagReport, []byte(md), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

package reliability

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/dbinformer/dbinformer/core/conformance"
)

// Report renders results as RELIABILITY.md: per adapter and fault kind, the
// runs that injected it, how many faults, how many of those runs diverged,
// and the time to converge after the fault healed (p50 and p99 over every
// fault of that kind: from the heal to WaitFor of the head read then
// returning); then every divergence with its replay seed.
func Report(results []Result, command string, elapsed time.Duration) string {
	var b strings.Builder
	reportIntro(&b, command, elapsed)
	adapters, byAdapter := groupByAdapter(results)
	reportSummary(&b, adapters, byAdapter)
	reportFaultKinds(&b, adapters, byAdapter)
	reportAudit(&b, results, adapters, byAdapter)
	reportDivergences(&b, results)
	return b.String()
}

// reportIntro writes the report's title, what a run checks, and how and
// where this report was made.
func reportIntro(b *strings.Builder, command string, elapsed time.Duration) {
	b.WriteString("# Reliability\n\n")
	b.WriteString("Model-based fault injection against the real servers (`integration/reliability`): a random\n")
	b.WriteString("workload of creates, updates and deletes over 16 keys while faults are injected; afterwards\n")
	b.WriteString("`WaitFor(head)`, then cache == source read directly, handler views and a failing-and-requeuing\n")
	b.WriteString("WorkQueue controller end at the source's state, no key's version ever went backwards in a\n")
	b.WriteString("handler, and no goroutine is left after stop. A divergence is a run where any check failed.\n")
	b.WriteString("Throughout, the informer's consistency audit (`InformerOptions.Audit`, report only) compares its cache\n")
	b.WriteString("with the source every few hundred milliseconds, and once more after the final checks; a divergent audit is a\n")
	b.WriteString("divergence of the run (see Consistency audit below).\n")
	b.WriteString("Each adapter runs through its conformance.Harness (Truth and Faults); `memory` is core/memory behind\n")
	b.WriteString("an informertest.Spy, a baseline with no server.\n\n")
	fmt.Fprintf(b, "- command: `%s`\n", command)
	fmt.Fprintf(b, "- date: %s\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(b, "- machine: %s, %d CPUs, %s/%s, %s\n", cpuModel(), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	fmt.Fprintf(b, "- wall time: %s\n\n", elapsed.Round(time.Second))
}

// groupByAdapter returns the adapters in the order of their first result,
// and each one's results.
func groupByAdapter(results []Result) ([]string, map[string][]Result) {
	var adapters []string
	byAdapter := map[string][]Result{}
	for _, r := range results {
		if _, ok := byAdapter[r.Adapter]; !ok {
			adapters = append(adapters, r.Adapter)
		}
		byAdapter[r.Adapter] = append(byAdapter[r.Adapter], r)
	}
	return adapters, byAdapter
}

// reportSummary writes the Summary section: one row per adapter, its runs'
// totals.
func reportSummary(b *strings.Builder, adapters []string, byAdapter map[string][]Result) {
	b.WriteString("## Summary\n\n| adapter | runs (seeds) | writes | faults injected | relists | watch restarts | divergent runs | audits (equal/divergent/failed) | variants | mean run time |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, a := range adapters {
		rs := byAdapter[a]
		var ops, faults, div, relists, restarts int
		var total time.Duration
		variants := map[string]int{}
		var audit AuditCounts
		for _, r := range rs {
			audit = audit.add(r.Audit)
			ops += r.Ops
			relists += r.Relists
			restarts += r.Restarts
			for _, n := range r.Faults {
				faults += n
			}
			if len(r.Divergences) > 0 {
				div++
			}
			total += r.Elapsed
			variants[r.Variant]++
		}
		var vs []string
		for v, n := range variants {
			vs = append(vs, fmt.Sprintf("%s ×%d", v, n))
		}
		slices.Sort(vs)
		fmt.Fprintf(b, "| %s | %d | %d | %d | %d | %d | %d | %d (%d/%d/%d) | %s | %s |\n", a, len(rs), ops, faults, relists, restarts, div,
			audit.Runs, audit.Equal, audit.Divergent, audit.Failed,
			strings.Join(vs, ", "), (total / time.Duration(len(rs))).Round(100*time.Millisecond))
	}
}

// faultCell is one row of the Adapter × fault kind table, summed over
// runs.
type faultCell struct {
	runs, faults, div int
	converge, over    []time.Duration
}

// reportFaultKinds writes the Adapter × fault kind section: per adapter
// and fault kind, the runs, faults, divergences and convergence times.
func reportFaultKinds(b *strings.Builder, adapters []string, byAdapter map[string][]Result) {
	b.WriteString("\n## Adapter × fault kind\n\n")
	b.WriteString("`runs` = runs that injected this kind at least once; `faults` = how many times in all;\n")
	b.WriteString("`divergences` = those runs that failed a check; `converge` = time from the fault's heal to\n")
	b.WriteString("`WaitFor(head at the heal)` returning, p50 and p99 over every fault of the kind (measured, not asserted;\n")
	b.WriteString("the workload keeps writing meanwhile). `overlapped` = faults left out of p50/p99 because the next\n")
	b.WriteString("fault was injected before the informer had caught up (their time includes that fault's outage), with\n")
	b.WriteString("the longest of them. Requeue and panic are the handlers' faults: no heal to time.\n\n")
	b.WriteString("| adapter | fault | runs | faults | divergences | converge p50 | converge p99 | overlapped |\n|---|---|---|---|---|---|---|---|\n")
	for _, a := range adapters {
		cells := faultCells(byAdapter[a])
		for _, f := range sortedFaults(cells) {
			c := cells[f]
			p50, p99 := "-", "-"
			if len(c.converge) > 0 {
				slices.Sort(c.converge)
				p50, p99 = fmtDuration(percentile(c.converge, 0.5)), fmtDuration(percentile(c.converge, 0.99))
			}
			over := "-"
			if len(c.over) > 0 {
				over = fmt.Sprintf("%d (max %s)", len(c.over), fmtDuration(slices.Max(c.over)))
			}
			fmt.Fprintf(b, "| %s | %s | %d | %d | %d | %s | %s | %s |\n", a, f, c.runs, c.faults, c.div, p50, p99, over)
		}
	}
}

// faultCells sums one adapter's results by the fault kinds they injected.
func faultCells(rs []Result) map[conformance.Fault]*faultCell {
	cells := map[conformance.Fault]*faultCell{}
	for _, r := range rs {
		for f, n := range r.Faults {
			if n == 0 {
				continue
			}
			c := cells[f]
			if c == nil {
				c = &faultCell{}
				cells[f] = c
			}
			c.runs++
			c.faults += n
			if len(r.Divergences) > 0 {
				c.div++
			}
			c.converge = append(c.converge, r.Converge[f]...)
			c.over = append(c.over, r.Overlapped[f]...)
		}
	}
	return cells
}

// reportAudit writes the Consistency audit section: per adapter, what its
// informers' audits found, then every divergent audit with its seed.
func reportAudit(b *strings.Builder, results []Result, adapters []string, byAdapter map[string][]Result) {
	b.WriteString("\n## Consistency audit\n\n")
	fmt.Fprintf(b, "Each run's informer audits itself every %s (`-audit`; the first one period after its sync, Pace\n", auditPeriods(results))
	b.WriteString("unlimited) while the faults go on, report only, and once more after the final checks. `failed`\n")
	b.WriteString("runs could not compare and are fine, by why: `source` = its read failed (a fault), `lag` = the cache did\n")
	b.WriteString("not reach the audit's version within the period (behind a fault), `list` = a relist was running;\n")
	b.WriteString("`other` would be an adapter breaking the AuditLister contract, and is a divergence. `divergent` runs\n")
	b.WriteString("are divergences of their run; `false positives` are those of runs whose final checks passed.\n")
	b.WriteString("`during faults` = audits that overlapped a fault (from its injection to the informer catching up with\n")
	b.WriteString("the head read at its heal). `in flight` = keys left out of comparisons because they changed after the\n")
	b.WriteString("audit's version.\n\n")
	b.WriteString("| adapter | audits | during faults | equal | divergent | false positives | failed (by why) | in flight | audits per run |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, a := range adapters {
		var c AuditCounts
		for _, r := range byAdapter[a] {
			c = c.add(r.Audit)
		}
		failed := "0"
		if c.Failed > 0 {
			failed = fmt.Sprintf("%d (%s)", c.Failed, c.failedBy())
		}
		fmt.Fprintf(b, "| %s | %d | %d | %d | %d | %d | %s | %d | %.1f |\n", a, c.Runs, c.DuringFaults, c.Equal, c.Divergent, c.FalsePositives, failed,
			c.InFlight, float64(c.Runs)/float64(len(byAdapter[a])))
	}
	findings := 0
	for _, r := range results {
		for _, f := range r.Audit.Findings {
			if findings == 0 {
				b.WriteString("\nDivergent audits (replay each with its seed):\n\n")
			}
			findings++
			fmt.Fprintf(b, "- %s seed %d (%s): %s\n", r.Adapter, r.Seed, r.Variant, f)
		}
	}
}

// reportDivergences writes the Divergences section: every divergent run
// with its replay command and what diverged.
func reportDivergences(b *strings.Builder, results []Result) {
	b.WriteString("\n## Divergences\n\n")
	n := 0
	for _, r := range results {
		if len(r.Divergences) == 0 {
			continue
		}
		n++
		fmt.Fprintf(b, "- %s seed %d (%s): replay with `%s`\n", r.Adapter, r.Seed, r.Variant, r.Replay())
		for _, d := range r.Divergences {
			fmt.Fprintf(b, "  - %s\n", d)
		}
	}
	if n == 0 {
		b.WriteString("None.\n")
	}
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// fmtDuration rounds d for a table: milliseconds below ten seconds, tenths
// of a second above.
func fmtDuration(d time.Duration) string {
	if d < 10*time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

// sortedFaults returns the fault kinds in a fixed order for reports.
func sortedFaults[V any](m map[conformance.Fault]V) []conformance.Fault {
	out := make([]conformance.Fault, 0, len(m))
	for f := range m {
		out = append(out, f)
	}
	slices.Sort(out)
	return out
}

func fmtConverge(m, overlapped map[conformance.Fault][]time.Duration) string {
	var parts []string
	for _, f := range sortedFaults(m) {
		ds := m[f]
		parts = append(parts, fmt.Sprintf("%s %s", f, ds[len(ds)-1].Round(time.Millisecond)))
	}
	var over []string
	for _, f := range sortedFaults(overlapped) {
		ds := overlapped[f]
		over = append(over, fmt.Sprintf("%s %s", f, ds[len(ds)-1].Round(time.Millisecond)))
	}
	out := "(no fault healed alone)"
	if len(parts) > 0 {
		out = "within " + strings.Join(parts, ", ")
	}
	if len(over) > 0 {
		out += " (overlapped by the next fault: " + strings.Join(over, ", ") + ")"
	}
	return out
}

// percentile returns the p-th percentile (0..1) of sorted ds, nearest rank.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(p*float64(len(ds))+0.999999) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// auditPeriods names the audit periods the results ran with.
func auditPeriods(results []Result) string {
	seen := map[time.Duration]bool{}
	var out []string
	for _, r := range results {
		if p := r.Config.AuditPeriod; !seen[p] {
			seen[p] = true
			if p < 0 {
				out = append(out, "(off)")
			} else {
				out = append(out, p.String())
			}
		}
	}
	return strings.Join(out, ", ")
}

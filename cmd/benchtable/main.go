package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// results maps a sub-benchmark to its metrics, each the values of every run.
type results map[string]map[string][]float64

var (
	lineRE = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)
	// A benchmark that logs while it runs splits its line: the testing
	// package prints the name, the log lines follow, then the result on a
	// line of its own.
	nameRE   = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s`)
	resultRE = regexp.MustCompile(`^\d+\s+(\S+ ns/op.*)$`)
)

// parse reads `go test -bench` output.
func parse(r io.Reader) (results, error) {
	res := results{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	split := "" // the name of a benchmark whose result line a log line split
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		m := lineRE.FindStringSubmatch(line)
		if m == nil {
			if r := resultRE.FindStringSubmatch(line); r != nil && split != "" {
				m = []string{line, split, r[1]}
			} else if n := nameRE.FindStringSubmatch(sc.Text()); n != nil {
				split = n[1]
				continue
			} else {
				continue
			}
		}
		split = ""
		f := strings.Fields(m[2])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			if res[m[1]] == nil {
				res[m[1]] = map[string][]float64{}
			}
			res[m[1]][f[i+1]] = append(res[m[1]][f[i+1]], v)
		}
	}
	return res, sc.Err()
}

func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func (r results) get(bench, metric string) (float64, bool) {
	vs := r[bench][metric]
	if len(vs) == 0 {
		return 0, false
	}
	return median(vs), true
}

// format prints a figure with its unit, without the side's name that
// prefixes the metrics of a side-by-side benchmark.
func format(v float64, metric string) string {
	for _, p := range []string{"ours-handler-", "ours-indexed-", "ours-", "clientgo-", "raw-", "copy-", "bare-", "map-", "relay-", "direct-"} {
		metric = strings.TrimPrefix(metric, p)
	}
	switch metric {
	case "ns/op":
		return fmt.Sprintf("%.3g s", v/1e9)
	case "s":
		return fmt.Sprintf("%.3g s", v)
	}
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.3gM %s", v/1e6, metric)
	case v >= 1e4:
		return fmt.Sprintf("%.3gk %s", v/1e3, metric)
	}
	return fmt.Sprintf("%.3g %s", v, metric)
}

// ratios pairs the k-th run of ours with the k-th run of the reference
// (both sides of a run are measured in the same process, one after the
// other), so a row's spread is the spread of what each run measured, not of
// medians taken apart. With no reference the values are ours alone.
func ratios(ours, ref []float64) []float64 {
	if ref == nil {
		return slices.Clone(ours)
	}
	n := min(len(ours), len(ref))
	out := make([]float64, 0, n)
	for k := 0; k < n; k++ {
		if ref[k] != 0 {
			out = append(out, ours[k]/ref[k])
		}
	}
	return out
}

// meets says whether v meets the row's target.
func (r row) meets(v float64) bool {
	return (r.Op == "≥" && v >= r.Target) || (r.Op == "≤" && v <= r.Target)
}

// table renders the rows found in res as Markdown, and how many targets
// were met out of those measured. A row with several runs shows the median
// ratio and the spread (lowest–highest run), and counts as met only when
// every run meets its target.
func table(res results) (string, int, int) {
	var b strings.Builder
	b.WriteString("| Comparison | Ours | Reference | Ratio ours/ref | Target | Met |\n")
	b.WriteString("|---|---:|---:|---:|---|---|\n")
	met, measured := 0, 0
	for _, r := range rows {
		ours, ok := res.get(r.Ours, r.OursMetric)
		if !ok {
			fmt.Fprintf(&b, "| %s | not run | | | | |\n", r.Title)
			continue
		}
		refName := r.Ref
		if refName == "" {
			refName = r.Ours
		}
		refCell, ratioCell := "—", "—"
		var refRuns []float64
		if r.RefMetric != "" {
			ref, ok := res.get(refName, r.RefMetric)
			if !ok || ref == 0 {
				fmt.Fprintf(&b, "| %s | %s | not run | | | |\n", r.Title, format(ours, r.OursMetric))
				continue
			}
			refRuns = res[refName][r.RefMetric]
			refCell = format(ref, r.RefMetric)
		}
		runs := ratios(res[r.Ours][r.OursMetric], refRuns)
		if len(runs) == 0 {
			fmt.Fprintf(&b, "| %s | %s | %s | no paired run | | |\n", r.Title, format(ours, r.OursMetric), refCell)
			continue
		}
		if r.RefMetric != "" {
			ratioCell = fmt.Sprintf("**%.2f×**", median(runs))
			if len(runs) > 1 {
				ratioCell += fmt.Sprintf(" (%.2f–%.2f)", slices.Min(runs), slices.Max(runs))
			}
		} else if len(runs) > 1 {
			ratioCell = fmt.Sprintf("(%.3g–%.3g)", slices.Min(runs), slices.Max(runs))
		}
		targetCell, metCell := "—", "—"
		if r.Op != "" {
			measured++
			unit := "×"
			if r.RefMetric == "" {
				unit = ""
			}
			targetCell = fmt.Sprintf("%s %g%s", r.Op, r.Target, unit)
			good := 0
			for _, v := range runs {
				if r.meets(v) {
					good++
				}
			}
			switch {
			case good == len(runs):
				metCell = "yes"
				met++
			default:
				metCell = "**no**"
			}
			if len(runs) > 1 {
				metCell += fmt.Sprintf(" (%d/%d runs)", good, len(runs))
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", r.Title, format(ours, r.OursMetric), refCell, ratioCell, targetCell, metCell)
	}
	return b.String(), met, measured
}

// stale names the rows whose benchmark ran but did not report what the
// row reads: a benchmark renamed its sub-benchmarks or metrics and the
// table went on printing "not run" over real runs (BenchmarkRelay's rows,
// for a whole session).
func stale(res results) []string {
	ran := map[string]bool{}
	for name := range res {
		top, _, _ := strings.Cut(name, "/")
		ran[top] = true
	}
	var out []string
	for _, r := range rows {
		top, _, _ := strings.Cut(r.Ours, "/")
		if !ran[top] {
			continue
		}
		refName := r.Ref
		if refName == "" {
			refName = r.Ours
		}
		if _, ok := res.get(r.Ours, r.OursMetric); !ok {
			out = append(out, fmt.Sprintf("%q: Benchmark%s ran but no Benchmark%s reported %s", r.Title, top, r.Ours, r.OursMetric))
		}
		if _, ok := res.get(refName, r.RefMetric); r.RefMetric != "" && !ok {
			out = append(out, fmt.Sprintf("%q: Benchmark%s ran but no Benchmark%s reported %s", r.Title, top, refName, r.RefMetric))
		}
	}
	return out
}

func machine(goVersion string) string {
	cpu := ""
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := ""
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
					mem = fmt.Sprintf("%.1f GiB", kb/(1<<20))
				}
			}
		}
	}
	return fmt.Sprintf("%d cores (%s), %s memory, %s, %s/%s", runtime.NumCPU(), cpu, mem, goVersion, runtime.GOOS, runtime.GOARCH)
}

// keptNotes returns the "## Notes" section of an existing file, if any.
func keptNotes(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if i := bytes.Index(data, []byte("\n## Notes")); i >= 0 {
		return string(data[i+1:])
	}
	return ""
}

// measuredIn is how many measured rows the table in path records (its
// "Targets met: M of N" line), 0 when there is none: a run of a few
// benchmarks once replaced the whole table this way (ad9141f).
func measuredIn(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	m := targetsRE.FindSubmatch(data)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

var targetsRE = regexp.MustCompile(`(?m)^- Targets met: \d+ of (\d+)`)

func main() {
	var (
		bench   = flag.String("bench", ".", "benchmarks to run (go test -bench)")
		count   = flag.Int("count", 1, "runs of each benchmark; figures are medians, a target is met only when every run meets it")
		short   = flag.Bool("short", false, "small sizes (the smoke run)")
		out     = flag.String("out", "BENCHMARKS.md", `file to write, "-" for none`)
		from    = flag.String("from", "", "parse this saved go test output instead of running (comma-separated files: one full run each)")
		pkg     = flag.String("pkg", "./bench/", "package holding the benchmarks")
		timeout = flag.String("timeout", "90m", "go test -timeout")
		only    = flag.String("rows", "", "print only the rows whose title contains this (with -bench, e.g. WorkQueue)")
		check   = flag.Bool("check", false, "only check that every row whose benchmark ran found its metrics (exit 1 if not); for make bench-smoke")
		force   = flag.Bool("force", false, "write -out even when it records more measured rows than this run measured")
	)
	flag.Parse()
	if *only != "" {
		rows = slices.DeleteFunc(rows, func(r row) bool { return !strings.Contains(r.Title, *only) })
	}
	args := []string{"test", "-run", "^$", "-bench", *bench, "-benchmem", "-benchtime=1x",
		"-count", strconv.Itoa(*count), "-timeout", *timeout}
	if *short {
		args = append(args, "-short")
	}
	args = append(args, *pkg)
	command := "go " + strings.Join(quoteArgs(args), " ")

	var output []byte
	if *from != "" {
		for _, f := range strings.Split(*from, ",") {
			data, err := os.ReadFile(f)
			if err != nil {
				fatal(err)
			}
			output = append(output, data...)
		}
		command = "(parsed from " + *from + ")"
	} else {
		fmt.Fprintln(os.Stderr, "running:", command)
		var buf bytes.Buffer
		cmd := exec.Command("go", args...)
		cmd.Stdout = io.MultiWriter(os.Stderr, &buf)
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			fatal(fmt.Errorf("go test: %w", err))
		}
		output = buf.Bytes()
	}
	res, err := parse(bytes.NewReader(output))
	if err != nil {
		fatal(err)
	}
	if *check {
		bad := stale(res)
		for _, b := range bad {
			fmt.Fprintln(os.Stderr, "benchtable: stale row:", b)
		}
		if len(bad) > 0 {
			fmt.Fprintln(os.Stderr, "benchtable: fix the row in cmd/benchtable (or the benchmark's metric names)")
			os.Exit(1)
		}
		fmt.Printf("benchtable: every row whose benchmark ran found its metrics (%d benchmarks)\n", len(res))
		return
	}
	goVersion := runtime.Version()
	if v, err := exec.Command("go", "env", "GOVERSION").Output(); err == nil {
		goVersion = strings.TrimSpace(string(v))
	}
	tbl, met, measured := table(res)
	fmt.Print(tbl)
	fmt.Printf("targets met: %d of %d\n", met, measured)
	if *out == "-" {
		return
	}
	if had := measuredIn(*out); had > measured && !*force {
		fatal(fmt.Errorf("%s records %d measured rows and this run measured %d: it would replace the full table with a partial one (use -out - and put the rows under Notes, or -force)", *out, had, measured))
	}
	var doc strings.Builder
	doc.WriteString("# Benchmarks\n\n")
	doc.WriteString("Generated by `go run ./cmd/benchtable` (`make bench`). Each row runs our code and the reference on the same workload in the same process; ")
	doc.WriteString("only the ratio is a claim, the absolute figures depend on a shared, noisy machine. Sizes and workloads: see `bench/*_test.go` and `bench/doc.go`.\n\n")
	fmt.Fprintf(&doc, "- Command: `%s`\n", command)
	fmt.Fprintf(&doc, "- Machine: %s\n", machine(goVersion))
	fmt.Fprintf(&doc, "- Date: %s\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&doc, "- Runs: %d of each benchmark; a ratio is the median run, with the lowest–highest run in brackets; a target is met only when every run meets it\n", *count)
	fmt.Fprintf(&doc, "- Targets met: %d of %d\n\n", met, measured)
	doc.WriteString(tbl)
	doc.WriteString("\n<details><summary>Raw go test output</summary>\n\n```\n")
	for _, l := range strings.Split(string(output), "\n") {
		if strings.HasPrefix(l, "Benchmark") || strings.HasPrefix(l, "cpu:") || strings.HasPrefix(l, "ok") || strings.HasPrefix(l, "PASS") {
			doc.WriteString(l + "\n")
		}
	}
	doc.WriteString("```\n</details>\n")
	if notes := keptNotes(*out); notes != "" {
		doc.WriteString("\n" + notes)
	}
	if err := os.WriteFile(*out, []byte(doc.String()), 0o644); err != nil {
		fatal(err)
	}
	fmt.Fprintln(os.Stderr, "wrote", *out)
}

func quoteArgs(args []string) []string {
	q := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, "^$ *") {
			a = "'" + a + "'"
		}
		q[i] = a
	}
	return q
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "benchtable:", err)
	os.Exit(1)
}

package main

import (
	"fmt"
	"strings"
	"testing"
)

const sample = `goos: linux
BenchmarkPipeline-2   	       1	 263386980 ns/op	      1210 clientgo-B/event	         7.634 clientgo-allocs/event	    230593 clientgo-events/s	        14.67 clientgo-peak-heap-MB	         0.1248 clientgo-s	       332.8 ours-B/event	         3.409 ours-allocs/event	    700000 ours-events/s	         6.113 ours-peak-heap-MB	         0.02491 ours-s
BenchmarkPipeline-2   	       1	 263386980 ns/op	      1210 clientgo-B/event	         7.634 clientgo-allocs/event	    230593 clientgo-events/s	        14.67 clientgo-peak-heap-MB	         0.1248 clientgo-s	       332.8 ours-B/event	         3.409 ours-allocs/event	    100000 ours-events/s	         6.113 ours-peak-heap-MB	         0.02491 ours-s
BenchmarkPipeline-2   	       1	 263386980 ns/op	      1210 clientgo-B/event	         7.634 clientgo-allocs/event	    230593 clientgo-events/s	        14.67 clientgo-peak-heap-MB	         0.1248 clientgo-s	       332.8 ours-B/event	         3.409 ours-allocs/event	    500000 ours-events/s	         6.113 ours-peak-heap-MB	         0.02491 ours-s
PASS
`

func TestParseMedian(t *testing.T) {
	res, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if got := res["Pipeline"]["ours-events/s"]; len(got) != 3 {
		t.Fatalf("runs of ours: %v", got)
	}
	if v, _ := res.get("Pipeline", "ours-events/s"); v != 500000 {
		t.Fatalf("median %v, want 500000", v)
	}
}

// A table from saved output of three runs: the throughput row misses its
// target (median 500k/230k < 3, and one run reaches 3.04× but another
// only 0.43×), the allocation row is met in every run (3.41/7.63 ≤ 0.5), and the
// bare-loop rows are "not run" (the sample has no bare side).
func Example() {
	res, _ := parse(strings.NewReader(sample))
	tbl, met, measured := table(res)
	for _, l := range strings.Split(tbl, "\n") {
		if strings.Contains(l, "vs client-go: throughput") || strings.Contains(l, "vs client-go: allocations") {
			fmt.Println(l)
		}
	}
	fmt.Println(met, "of", measured)
	// Output:
	// | 1 Core pipeline vs client-go: throughput | 500k events/s | 231k events/s | **2.17×** (0.43–3.04) | ≥ 3× | **no** (1/3 runs) |
	// | 1 Core pipeline vs client-go: allocations per event | 3.41 allocs/event | 7.63 allocs/event | **0.45×** (0.45–0.45) | ≤ 0.5× | yes (3/3 runs) |
	// 1 of 2
}

// A row is met only when every run meets it: two good runs and one bad are
// not enough, whatever the median says.
func TestMetOnlyWhenEveryRunMeets(t *testing.T) {
	const out = `BenchmarkWorkQueue/Parallel8x8-2 1 1 ns/op 3000000 ours-items/s 1000000 clientgo-items/s
BenchmarkWorkQueue/Parallel8x8-2 1 1 ns/op 3000000 ours-items/s 1000000 clientgo-items/s
BenchmarkWorkQueue/Parallel8x8-2 1 1 ns/op 1500000 ours-items/s 1000000 clientgo-items/s
`
	res, err := parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	tbl, met, _ := table(res)
	if met != 0 || !strings.Contains(tbl, "| **3.00×** (1.50–3.00) | ≥ 2× | **no** (2/3 runs) |") {
		t.Fatalf("met %d, table:\n%s", met, tbl)
	}
}

// A result line split from its benchmark's name by a log line (a
// benchmark that logs while it runs) is joined back to the name.
func TestParseSplitLine(t *testing.T) {
	res, err := parse(strings.NewReader("BenchmarkEtcd/List-2   \t2026/12/07 07:56:57 INFO dbinformer source=x err=\"expired\"\n" +
		"2026/12/07 07:56:57 INFO dbinformer source=y\n" +
		"       1\t2000 ns/op\t         2.3 ours-s\t 2.4 raw-s\n" +
		"BenchmarkEtcd/List-2  1  2 ns/op  2.5 ours-s  2.6 raw-s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := res["Etcd/List"]["ours-s"]; len(got) != 2 || got[0] != 2.3 || got[1] != 2.5 {
		t.Fatalf("ours-s = %v, want [2.3 2.5]", got)
	}
}

// A row whose benchmark ran without the metric it reads is reported; a
// row whose benchmark did not run at all is not (a -bench filter).
func TestStaleRows(t *testing.T) {
	res, err := parse(strings.NewReader(`BenchmarkRelay-2   1  13 ns/op  1 relay-slots  8 direct-slots  250 relay-lag-p99-ms  66 direct-lag-p99-ms
BenchmarkEtcd/List-2  1  2 ns/op  2.3 ours-s  2.4 raw-s
`))
	if err != nil {
		t.Fatal(err)
	}
	bad := stale(res)
	// The relay rows for walsenders, walsender CPU and lag p50 read
	// metrics this output lacks; the etcd watch row's sub-benchmark did
	// not run although BenchmarkEtcd did.
	for _, want := range []string{"relay-walsenders", "relay-lag-p50-ms", "Etcd/Watch"} {
		found := false
		for _, b := range bad {
			found = found || strings.Contains(b, want)
		}
		if !found {
			t.Errorf("no stale row names %s in %q", want, bad)
		}
	}
	for _, b := range bad {
		if strings.Contains(b, "relay-slots") || strings.Contains(b, "lag-p99") || strings.Contains(b, "NATS") || strings.Contains(b, "Etcd/List") {
			t.Errorf("reported a row whose metrics are there, or whose benchmark did not run: %s", b)
		}
	}
}

// Package bench holds dbinformer's side-by-side benchmarks: each one runs
// our code and the reference a user would otherwise pick (client-go's
// tools/cache and util/workqueue, controller-runtime, a plain Go map, a raw
// COPY, a bare replication receive loop, the raw etcd and NATS clients, a
// hand-written worker loop) on the same
// workload in the same process, so that their ratio means something on a
// shared, noisy machine where absolute times do not.
//
// The benchmarks live in the _test files, one sub-benchmark per side
// ("ours" and the reference's name). One op is the whole workload, so run
// them with -benchtime=1x; each reports its own per-event figures with
// b.ReportMetric. -short selects small sizes for a smoke run:
//
//	go test -run '^$' -bench . -benchtime=1x -short ./bench/
//
// Benchmarks that alternate the sides over several rounds report medians;
// DBINFORMER_BENCH_ROUNDS=1 prints every round to stderr as well, to see
// the spread behind a median.
//
// cmd/benchtable runs them at full size, pairs each "ours" with its
// reference and writes the ratios to BENCHMARKS.md.
//
// This package, unlike core, may import client-go: the comparison needs it,
// the library does not.
package bench

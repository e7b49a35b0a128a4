// Command benchtable runs dbinformer's side-by-side benchmarks (package
// bench) in one `go test` process, pairs each of our sub-benchmarks with
// its reference, prints one table of ratios and writes it to BENCHMARKS.md
// together with the command, the machine and the date.
//
// Usage, from the repository root:
//
//	go run ./cmd/benchtable              # full sizes, writes BENCHMARKS.md
//	go run ./cmd/benchtable -short -out - # smoke sizes, table on stdout only
//	go run ./cmd/benchtable -from out.txt # table from a saved `go test -bench` output
//	go run ./cmd/benchtable -bench WorkQueue -rows WorkQueue -out - # one group of rows
//
// Only ratios are claims: the machines this runs on are shared and noisy,
// so the absolute figures beside them are for orientation. With -count > 1
// every figure is the median of the runs. Text under a "## Notes" heading
// in an existing output file is kept, so the hand-written analysis
// survives a rerun.
package main

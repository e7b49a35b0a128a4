# dbinformer — see README.md.
SHELL := /bin/bash
GO ?= go
# The whole suite takes a few minutes warm on 2 cores; the timeout leaves
# room for a cold machine without letting a hang eat CI's 90 minutes.
TEST_TIMEOUT ?= 40m
TEST_FLAGS ?=

.PHONY: test deps postgres kube-apiserver vet fuzz smoke reliability bench bench-smoke
test: deps vet smoke
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) ./...
	bash scripts/fuzz.sh $(FUZZ_SHORT)
	$(MAKE) --no-print-directory bench-smoke

# Fuzz targets (DeltaFIFO/FIFO, Indexer, WorkQueue against reference models):
# a short fixed-time pass runs inside make test, a long one here.
FUZZ_SHORT ?= 10s
FUZZ_TIME ?= 3m
fuzz:
	bash scripts/fuzz.sh $(FUZZ_TIME)

# Everything a fresh machine needs before the tests: Postgres server binaries
# (Debian's postgresql, only when missing) and the real kube-apiserver built
# from the nested module tools/kube-apiserver into ~/.cache/dbinformer (only
# when missing or stale; a cold build takes ~15 minutes on 2 cores).
deps: postgres kube-apiserver
	bash scripts/ensure-chromium.sh

postgres:
	bash scripts/ensure-postgres.sh

kube-apiserver:
	bash scripts/build-kube-apiserver.sh >/dev/null

# One real round trip per server (Postgres, etcd, NATS, kube-apiserver),
# named in the output so that a run shows the four servers were really used.
smoke:
	set -o pipefail; $(GO) test -count=1 -v -run 'Smoke$$' ./internal/testkit/servers/ | grep -E '^(--- |ok|FAIL|panic)'

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }

# The fault-injection suite with N seeds per adapter (etcd, Postgres, NATS,
# kube-apiserver) against the real servers; writes RELIABILITY.md. make test
# runs 2 seeds per adapter. A failing seed prints its replay command.
N ?= 50
reliability: deps
	$(GO) test -count=1 -timeout 120m ./integration/reliability -run 'TestReliability$$|TestKillRestart$$|TestShardedReliability$$' -seeds $(N) -report $(CURDIR)/RELIABILITY.md

# Side by side with client-go, a plain map, a raw Postgres COPY and the raw
# etcd and NATS clients, as ratios measured in one process; every benchmark
# runs BENCH_COUNT times (make bench BENCH_COUNT=3 for the three runs a
# target needs) and a target counts as met only when every run meets it.
# Rewrites BENCHMARKS.md.
BENCH_COUNT ?= 1
bench:
	$(GO) run ./cmd/benchtable -count $(BENCH_COUNT)

# Every benchmark of every package once, at small sizes, so none can rot;
# then every BENCHMARKS.md row whose benchmark ran must have found its
# metrics (a renamed metric would otherwise print "not run").
bench-smoke:
	set -o pipefail; out=$$(mktemp); trap 'rm -f $$out' EXIT; \
	$(GO) test -count=1 -run '^$$' -bench . -benchtime=1x -short ./... | grep -Ev 'no test files|^(goos|goarch|pkg|cpu):' | tee $$out && \
	$(GO) run ./cmd/benchtable -from $$out -check

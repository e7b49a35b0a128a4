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

// row is one line of the table: a metric of our sub-benchmark against the
// same (or a related) metric of the reference, as the ratio ours/ref.
type row struct {
	Title      string
	Ours       string // benchmark name without "Benchmark" and the -P suffix
	OursMetric string
	Ref        string // "" when the reference is another metric of Ours (side by side)
	RefMetric  string // "" for a row with no reference (an absolute target)
	Op         string // "≥" or "≤" against Target; "" for no target
	Target     float64
}

var rows = []row{
	{"1 Core pipeline vs client-go: throughput", "Pipeline", "ours-events/s", "", "clientgo-events/s", "≥", 2.5},
	{"1 Core pipeline vs a bare loop (plain map + 2 map-of-set indexes, no queue, lock or handler): throughput", "Pipeline", "ours-events/s", "", "bare-events/s", "≥", 0.5},
	{"1 Core pipeline vs a bare loop: allocations per event", "Pipeline", "ours-allocs/event", "", "bare-allocs/event", "", 0},
	{"1 Core pipeline vs client-go: allocations per event", "Pipeline", "ours-allocs/event", "", "clientgo-allocs/event", "≤", 0.5},
	{"1 Core pipeline vs client-go: bytes allocated per event", "Pipeline", "ours-B/event", "", "clientgo-B/event", "", 0},
	{"1 Core pipeline vs client-go: peak heap above the input", "Pipeline", "ours-peak-heap-MB", "", "clientgo-peak-heap-MB", "", 0},
	{"2 WorkQueue Add/Get/Done, 1 goroutine", "WorkQueue/AddGetDone", "ours-items/s", "", "clientgo-items/s", "≥", 1.5},
	{"2 WorkQueue 8 producers + 8 consumers", "WorkQueue/Parallel8x8", "ours-items/s", "", "clientgo-items/s", "≥", 1.5},
	{"2 WorkQueue AddAfter, 100k pending", "WorkQueue/AddAfter100k", "ours-items/s", "", "clientgo-items/s", "≥", 1.5},
	{"3 Memory per object: ours (2 indexes) vs client-go (2 indexes)", "MemoryPerObject/ours", "B/object", "MemoryPerObject/clientgo", "B/object", "≤", 1},
	{"3 Memory per object: ours (2 indexes) vs plain map", "MemoryPerObject/ours", "B/object", "MemoryPerObject/map", "B/object", "≤", 1.3},
	{"3 Memory per object: ours without indexes vs plain map", "MemoryPerObject/ours-noindex", "B/object", "MemoryPerObject/map", "B/object", "", 0},
	{"3 Memory per object: ours with 2 indexes vs without (the indexes' cost)", "MemoryPerObject/ours", "B/object", "MemoryPerObject/ours-noindex", "B/object", "", 0},
	{"3 Initial sync of 1M objects: peak heap, informer vs decoding into a plain map", "InitialSync", "ours-peak-heap-MB", "", "map-peak-heap-MB", "≤", 1.3},
	{"3 Initial sync of 1M objects: peak heap, informer with one handler vs plain map", "InitialSync", "ours-handler-peak-heap-MB", "", "map-peak-heap-MB", "", 0},
	{"3 Initial sync of 1M objects: time, informer vs decoding into a plain map", "InitialSync", "ours-s", "", "map-s", "", 0},
	{"3 Initial sync of 1M objects: time, informer with 2 indexes (org, team) vs plain map without", "InitialSync", "ours-indexed-s", "", "map-s", "", 0},
	{"4 Postgres initial sync (List) vs raw COPY TO STDOUT: time", "Postgres/InitialSync", "ours-s", "", "copy-s", "≤", 1.5},
	{"4 Postgres initial sync (List) of 1M mixed rows (int, text, numeric, timestamptz, jsonb, 1 in 50 TOASTed) vs COPY (SELECT …) TO STDOUT, text: time", "PostgresScale/InitialSync", "ours-s", "", "copytext-s", "≤", 1.5},
	{"4 Postgres initial sync (List) of 1M mixed rows vs binary COPY (SELECT …) TO STDOUT: time", "PostgresScale/InitialSync", "ours-s", "", "copybinary-s", "", 0},
	{"4 Postgres initial sync of 1M mixed rows into a synced informer vs COPY (SELECT …) TO STDOUT, text: time", "PostgresScale/InitialSync", "informer-s", "", "copytext-s", "≤", 1.5},
	{"4 Postgres initial sync of 1M mixed rows: steady heap, informer vs plain pgx scan into map[key]T", "PostgresScale/Heap", "ours-steady-heap-MB", "", "map-steady-heap-MB", "≤", 1.3},
	{"4 Postgres initial sync of 1M mixed rows: peak heap, informer vs plain pgx scan into map[key]T", "PostgresScale/Heap", "ours-peak-heap-MB", "", "map-peak-heap-MB", "≤", 1.5},
	{"4 Postgres initial sync of 1M mixed rows: RSS after sync, informer vs plain pgx scan into map[key]T", "PostgresScale/Heap", "ours-rss-MB", "", "map-rss-MB", "", 0},
	{"4 Postgres initial sync of 1M mixed rows: time, informer vs plain pgx scan into map[key]T", "PostgresScale/Heap", "ours-s", "", "map-s", "", 0},
	{"4 Postgres Source of three tables (1M, 500k, 250k rows): sync time vs its largest table alone", "PostgresScale/ThreeTables", "three-s", "", "largest-s", "≤", 1.3},
	{"4 The floor of that row: raw binary COPY of the same three tables vs the largest alone, through as many connections as the Source's default snapshot readers, no informer", "PostgresScale/ThreeTables", "copythree-s", "", "copylargest-s", "", 0},
	{"4 Postgres Source of three tables: sync time vs raw binary COPY of the three through as many connections", "PostgresScale/ThreeTables", "three-s", "", "copythree-s", "", 0},
	{"4 Postgres Source of three tables, default snapshot readers: sync time vs its largest table alone through one reader (how a Source read each table when #20 was filed)", "PostgresScale/ThreeTables", "three-s", "", "largestone-s", "", 0},
	{"4 Postgres Source of three tables: machine CPU busy during the sync, %", "PostgresScale/ThreeTables", "three-machine-busy-pct", "", "", "", 0},
	{"4 Postgres largest table alone: machine CPU busy during the sync, %", "PostgresScale/ThreeTables", "largest-machine-busy-pct", "", "", "", 0},
	{"4 Raw COPY of the three tables: machine CPU busy, %", "PostgresScale/ThreeTables", "copythree-machine-busy-pct", "", "", "", 0},
	{"4 Postgres WAL retained by the slot at the end of the initial sync of 1M rows under 2k rows/s of writes: default snapshot readers vs one", "PostgresSyncWAL", "parallel-retained-WAL-MB", "", "one-retained-WAL-MB", "", 0},
	{"4 Postgres initial sync of 1M rows under 2k rows/s of writes: time, default snapshot readers vs one", "PostgresSyncWAL", "parallel-s", "", "one-s", "", 0},
	{"5 Postgres streaming, writers unpaced: applied vs committed rows/s", "Postgres/Streaming/max/ours", "applied-rows/s", "", "committed-rows/s", "≥", 0.99},
	{"5 Postgres streaming, writers unpaced, the floor: a bare receive loop that decodes nothing, applied vs committed rows/s", "Postgres/Streaming/max/bare", "applied-rows/s", "", "committed-rows/s", "", 0},
	{"5 Postgres streaming, writers unpaced: lag p99, ms (from send)", "Postgres/Streaming/max/ours", "lag-from-send-p99-ms", "", "", "", 0},
	{"5 Postgres streaming, a backlog of 400k row changes (100-row transactions) drained, the writers done: drain rate, ours vs a bare receive loop", "Postgres/Streaming/backlog/ours", "drained-rows/s", "Postgres/Streaming/backlog/bare", "drained-rows/s", "≥", 1},
	{"5 Postgres streaming, a 400k-row backlog drained: walsender CPU, ours vs the bare loop's", "Postgres/Streaming/backlog/ours", "walsender-cpu-ms", "Postgres/Streaming/backlog/bare", "walsender-cpu-ms", "", 0},
	{"5 Postgres streaming, a 400k-row backlog drained: our process's CPU vs the bare loop's", "Postgres/Streaming/backlog/ours", "process-cpu-ms", "Postgres/Streaming/backlog/bare", "process-cpu-ms", "", 0},
	{"5 Postgres streaming at 20k rows/s: applied vs committed rows/s", "Postgres/Streaming/paced/ours", "applied-rows/s", "", "committed-rows/s", "≥", 0.99},
	{"5 Postgres streaming at 20k rows/s: lag p50, ms (commit returned → handler)", "Postgres/Streaming/paced/ours", "lag-p50-ms", "", "", "", 0},
	{"5 Postgres streaming at 20k rows/s: lag p99, ms (commit returned → handler)", "Postgres/Streaming/paced/ours", "lag-p99-ms", "", "", "", 0},
	{"5 Postgres streaming at 20k rows/s: lag p99, ms (transaction sent → handler)", "Postgres/Streaming/paced/ours", "lag-from-send-p99-ms", "", "", "≤", 100},
	{"5 Postgres decode rate vs bare receive loop that decodes nothing", "Postgres/Decode", "ours-rows/s", "", "bare-rows/s", "≥", 0.8},
	{"5 Postgres decode: allocations per row, ours (decoded into structs) vs bare receive loop", "Postgres/Decode", "ours-allocs/row", "", "bare-allocs/row", "", 0},
	{"5 Streaming every column (#36, measured, no target): 1M-row table, T maps 3 of its 5 columns (unmapped: a 200-byte text, a ~110-byte jsonb), 200k updates in 1,000-row transactions, one unpaced writer: applied changes/s, every column published (the default) vs Options.PublishColumnList", "PostgresColumns", "all-changes/s", "", "collist-changes/s", "", 0},
	{"5 Streaming every column (#36), the same 200k updates as a backlog (walsender held, then let go): drain rate, every column vs column list", "PostgresColumns", "all-drained-changes/s", "", "collist-drained-changes/s", "", 0},
	{"5 Streaming every column (#36), the backlog drained: walsender CPU, every column vs column list", "PostgresColumns", "all-walsender-cpu-ms", "", "collist-walsender-cpu-ms", "", 0},
	{"5 Streaming every column (#36), the backlog drained: our process's CPU, every column vs column list", "PostgresColumns", "all-process-cpu-ms", "", "collist-process-cpu-ms", "", 0},
	{"5 Streaming every column (#36), the backlog drained: bytes read from the server per change, every column vs column list", "PostgresColumns", "all-read-B/change", "", "collist-read-B/change", "", 0},
	{"5 Streaming every column (#36): initial sync of the 1M rows into an informer, every column published vs column list (the List reads only the mapped columns either way)", "PostgresColumns", "all-sync-s", "", "collist-sync-s", "", 0},
	{"5 Relay (#23): 8 informers through one relay vs 8 direct, a slot each: replication slots in use", "Relay", "relay-slots", "", "direct-slots", "", 0},
	{"5 Relay (#23): 8 informers through one relay vs 8 direct: walsenders", "Relay", "relay-walsenders", "", "direct-walsenders", "", 0},
	{"5 Relay (#23): 8 informers through one relay vs 8 direct: walsender CPU, ms", "Relay", "relay-walsender-cpu-ms", "", "direct-walsender-cpu-ms", "", 0},
	{"5 Relay (#23): 8 informers through one relay vs 8 direct at 20k rows/s: lag p50 (send → handler)", "Relay", "relay-lag-p50-ms", "", "direct-lag-p50-ms", "", 0},
	{"5 Relay (#23): 8 informers through one relay vs 8 direct at 20k rows/s: lag p99 (send → handler)", "Relay", "relay-lag-p99-ms", "", "direct-lag-p99-ms", "≤", 2},
	{"5 Relay, busy keys (#38): 8 informers through one relay vs 8 direct, one-row transactions at 1,000/s over 20 keys: lag p99 (send → handler)", "RelayBusyKeys", "relay-lag-p99-ms", "", "direct-lag-p99-ms", "", 0},
	{"5 Relay, busy keys (#38): follower lag p99 at 1,000 transactions/s, ms (send → handler)", "RelayBusyKeys", "relay-lag-p99-ms", "", "", "≤", 1000},
	{"5 Relay, busy keys (#38): downstream relists", "RelayBusyKeys", "relay-relists", "", "", "≤", 0},
	{"5 Relay failover (#38): 3 relay processes in one Postgres election, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: follower lag p99 before any fault, ms (send → handler)", "RelayFailover", "steady-lag-p99-ms", "", "", "≤", 1000},
	{"5 Relay failover (#38): 3 relay processes in one Postgres election, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: failover gap after kill -9 of the leader, s (fault → first change sent after it applied on every follower)", "RelayFailover", "kill-gap-s", "", "", "≤", 10},
	{"5 Relay failover (#38): 3 relay processes in one Postgres election, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: follower lag p99 in the minute after the kill -9 takeover, ms", "RelayFailover", "kill-lag-p99-ms", "", "", "≤", 1000},
	{"5 Relay failover (#38): 3 relay processes in one Postgres election, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: relists published from the kill -9 to the minute's end", "RelayFailover", "kill-relists", "", "", "≤", 0},
	{"5 Relay failover (#38): 3 relay processes in one Postgres election, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: replication slots after the kill -9 takeover", "RelayFailover", "kill-slots", "", "", "≤", 1},
	{"5 Relay failover (#38): 3 relay processes in one Postgres election, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: failover gap after SIGSTOP of the leader, s (default lease)", "RelayFailover", "stop-gap-s", "", "", "≤", 10},
	{"5 Relay failover (#38): 3 relay processes in one Postgres election, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: follower lag p99 in the minute after the SIGSTOP takeover, ms", "RelayFailover", "stop-lag-p99-ms", "", "", "≤", 1000},
	{"5 Relay failover (#38): 3 relay processes in one Postgres election, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: relists published from the SIGSTOP to the minute's end", "RelayFailover", "stop-relists", "", "", "≤", 0},
	{"5 Relay failover (#38): 3 relay processes in one Postgres election, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: replication slots after the SIGSTOP takeover", "RelayFailover", "stop-slots", "", "", "≤", 1},
	{"5 Relay failover (#38): 3 relay processes in one Postgres election, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: follower relists (Lists from the stream) from the first fault to the end", "RelayFailover", "follower-relists", "", "", "≤", 0},
	{"5 Relay failover (#38): 3 relay processes in one Postgres election, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: gap after pg_terminate_backend of the leader's walsender, s (fault → first change sent after it applied on every follower)", "RelayFailover", "walsender-gap-s", "", "", "≤", 5},
	{"5 Relay failover (#38): 3 relay processes in one Postgres election, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: follower lag p99 in the minute after pg_terminate_backend of the leader's walsender, ms", "RelayFailover", "walsender-lag-p99-ms", "", "", "≤", 1000},
	{"5 Relay failover (#38): 3 relay processes in one Postgres election, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: relists published from pg_terminate_backend of the leader's walsender to the minute's end", "RelayFailover", "walsender-relists", "", "", "≤", 0},
	{"5 Relay failover (#38): 3 relay processes in one Postgres election, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: replication slots after pg_terminate_backend of the leader's walsender", "RelayFailover", "walsender-slots", "", "", "≤", 1},
	{"5 Relay failover (#38): 3 relay processes in one Postgres election, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: gap after shutdown of the nats-server leading the stream, s (fault → first change sent after it applied on every follower)", "RelayFailover", "streamleader-gap-s", "", "", "≤", 5},
	{"5 Relay failover (#38): 3 relay processes in one Postgres election, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: follower lag p99 in the minute after shutdown of the nats-server leading the stream, ms", "RelayFailover", "streamleader-lag-p99-ms", "", "", "≤", 1000},
	{"5 Relay failover (#38): 3 relay processes in one Postgres election, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: relists published from shutdown of the nats-server leading the stream to the minute's end", "RelayFailover", "streamleader-relists", "", "", "≤", 0},
	{"5 Relay failover (#38): 3 relay processes in one Postgres election, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: replication slots after shutdown of the nats-server leading the stream", "RelayFailover", "streamleader-slots", "", "", "≤", 1},
	{"5 Relay failover (#38): 3 relay processes in one Postgres election, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: gap after a follower restarted (new informer and Downstream), s (fault → first change sent after it applied on every follower)", "RelayFailover", "follower-gap-s", "", "", "≤", 5},
	{"5 Relay failover (#38): 3 relay processes in one Postgres election, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: follower lag p99 in the minute after a follower restarted (new informer and Downstream), ms", "RelayFailover", "follower-lag-p99-ms", "", "", "≤", 1000},
	{"5 Relay failover (#38): 3 relay processes in one Postgres election, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: relists published from a follower restarted (new informer and Downstream) to the minute's end", "RelayFailover", "follower-relists", "", "", "≤", 0},
	{"5 Relay failover (#38): 3 relay processes in one Postgres election, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: replication slots after a follower restarted (new informer and Downstream)", "RelayFailover", "follower-slots", "", "", "≤", 1},
	{"5 Relay failover (#38), an etcd lease election at its default lease: 3 relay processes, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: failover gap after kill -9 of the leader, s", "RelayFailoverElections/etcd", "kill-gap-s", "", "", "≤", 10},
	{"5 Relay failover (#38), an etcd lease election at its default lease: 3 relay processes, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: failover gap after SIGSTOP of the leader, s", "RelayFailoverElections/etcd", "stop-gap-s", "", "", "≤", 10},
	{"5 Relay failover (#38), an etcd lease election at its default lease: 3 relay processes, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: follower lag p99 in the 30 s after the kill -9 takeover, ms", "RelayFailoverElections/etcd", "kill-lag-p99-ms", "", "", "≤", 1000},
	{"5 Relay failover (#38), an etcd lease election at its default lease: 3 relay processes, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: follower lag p99 in the 30 s after the SIGSTOP takeover, ms", "RelayFailoverElections/etcd", "stop-lag-p99-ms", "", "", "≤", 1000},
	{"5 Relay failover (#38), an etcd lease election at its default lease: 3 relay processes, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: relists published at the kill -9 takeover", "RelayFailoverElections/etcd", "kill-relists", "", "", "≤", 0},
	{"5 Relay failover (#38), an etcd lease election at its default lease: 3 relay processes, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: relists published at the SIGSTOP takeover", "RelayFailoverElections/etcd", "stop-relists", "", "", "≤", 0},
	{"5 Relay failover (#38), an etcd lease election at its default lease: 3 relay processes, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: replication slots after the kill -9 takeover", "RelayFailoverElections/etcd", "kill-slots", "", "", "≤", 1},
	{"5 Relay failover (#38), an etcd lease election at its default lease: 3 relay processes, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: replication slots after the SIGSTOP takeover", "RelayFailoverElections/etcd", "stop-slots", "", "", "≤", 1},
	{"5 Relay failover (#38), a Kubernetes Lease election at its default lease: 3 relay processes, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: failover gap after kill -9 of the leader, s", "RelayFailoverElections/kube", "kill-gap-s", "", "", "≤", 10},
	{"5 Relay failover (#38), a Kubernetes Lease election at its default lease: 3 relay processes, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: failover gap after SIGSTOP of the leader, s", "RelayFailoverElections/kube", "stop-gap-s", "", "", "≤", 10},
	{"5 Relay failover (#38), a Kubernetes Lease election at its default lease: 3 relay processes, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: follower lag p99 in the 30 s after the kill -9 takeover, ms", "RelayFailoverElections/kube", "kill-lag-p99-ms", "", "", "≤", 1000},
	{"5 Relay failover (#38), a Kubernetes Lease election at its default lease: 3 relay processes, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: follower lag p99 in the 30 s after the SIGSTOP takeover, ms", "RelayFailoverElections/kube", "stop-lag-p99-ms", "", "", "≤", 1000},
	{"5 Relay failover (#38), a Kubernetes Lease election at its default lease: 3 relay processes, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: relists published at the kill -9 takeover", "RelayFailoverElections/kube", "kill-relists", "", "", "≤", 0},
	{"5 Relay failover (#38), a Kubernetes Lease election at its default lease: 3 relay processes, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: relists published at the SIGSTOP takeover", "RelayFailoverElections/kube", "stop-relists", "", "", "≤", 0},
	{"5 Relay failover (#38), a Kubernetes Lease election at its default lease: 3 relay processes, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: replication slots after the kill -9 takeover", "RelayFailoverElections/kube", "kill-slots", "", "", "≤", 1},
	{"5 Relay failover (#38), a Kubernetes Lease election at its default lease: 3 relay processes, 4 followers, a 3-node JetStream cluster, 1,000 tx/s: replication slots after the SIGSTOP takeover", "RelayFailoverElections/kube", "stop-slots", "", "", "≤", 1},
	{"6 etcd List of 100k keys vs raw clientv3: time", "Etcd/List", "ours-s", "", "raw-s", "≤", 1.1},
	{"6 etcd watch of 100k changes vs raw clientv3: time", "Etcd/Watch", "ours-s", "", "raw-s", "≤", 1.1},
	{"7 NATS KV initial sync of 100k keys vs raw KV watcher: time", "NATSKV/List", "ours-s", "", "raw-s", "≤", 1.2},
	{"7 NATS KV 100k changes vs raw KV watcher: time", "NATSKV/Watch", "ours-s", "", "raw-s", "≤", 1.2},
	{"7 NATS KV on a 3-node cluster (R3): initial sync of 100k keys vs raw KV watcher: time", "NATSKVCluster/List", "ours-s", "", "raw-s", "≤", 1.2},
	{"7 NATS KV on a 3-node cluster (R3): 100k changes vs raw KV watcher: time", "NATSKVCluster/Watch", "ours-s", "", "raw-s", "≤", 1.2},
	{"10 Postgres restart over 1M rows: time to synced, warm (checkpoint, permanent slot) vs cold (list)", "WarmStart", "warm-s", "", "cold-s", "≤", 0.1},
	{"10 Postgres warm restart: rows read from Postgres (seq_tup_read + idx_tup_fetch)", "WarmStart", "warm-rows-read", "", "", "≤", 0},
	{"10 Postgres warm restart without handlers: first List after synced (decodes every lazily loaded row), s", "WarmStart", "warm-first-list-s", "", "", "", 0},
	{"10 Postgres restart over 1M rows, informer with a handler: time to synced, warm vs cold (the cold start without one)", "WarmStart", "warmhandler-s", "", "cold-s", "", 0},
	{"10 Postgres restart from an expired checkpoint, 1% of rows changed: notifications, % of keys", "WarmStart", "expired-notified-pct", "", "", "≤", 2},
	{"10 Checkpoint write time per million objects, s", "WarmStart", "checkpoint-write-s-per-M", "", "", "", 0},
	{"10 Checkpoint size per million objects, MB", "WarmStart", "checkpoint-MB-per-M", "", "", "", 0},
	{"11 Partial sync (#22), NATS KV of 1M keys, filter matching 1% pushed down: initial sync time, filtered vs whole", "PartialSync/nats", "filtered-s", "", "all-s", "≤", 0.05},
	{"11 Partial sync, NATS KV of 1M keys, 1% filter: steady heap, filtered vs whole (the in-process nats-server shares the heap)", "PartialSync/nats", "filtered-MB", "", "all-MB", "≤", 0.05},
	{"11 Partial sync: values decoded by the adapter during writes that touch only non-matching keys", "PartialSync/nats", "decoded-nonmatching", "", "", "≤", 0},
	{"11 Partial sync, Postgres table of 1M rows, key range matching 1% pushed down (List query, PG15+ row filter): initial sync time, filtered vs whole", "PartialSync/postgres", "filtered-s", "", "all-s", "≤", 0.05},
	{"11 Partial sync, Postgres table of 1M rows, 1% key range: steady heap, filtered vs whole (Postgres runs out of process)", "PartialSync/postgres", "filtered-MB", "", "all-MB", "≤", 0.05},
	{"11 Partial sync, Postgres: rows decoded by the adapter during 10,000 updates of non-matching rows", "PartialSync/postgres", "decoded-nonmatching", "", "", "≤", 0},
	{"12 Controller (#42): reconcile throughput, package controller vs a hand-written worker loop over the same work queue (4 workers, 200k keys)", "Controller/Throughput", "ours-reconciles/s", "", "loop-reconciles/s", "≥", 0.95},
	{"12 Controller reconcile throughput: process CPU time for the 200k keys, package controller vs the hand-written loop", "Controller/Throughput", "ours-cpu-s", "", "loop-cpu-s", "", 0},
	{"12 Controller vs controller-runtime v0.24.1, 5,000 ConfigMaps of a real kube-apiserver, one process: cold start (list, sync, 4 workers) to every object reconciled, throughput (controller-runtime's sync wait polls every 100 ms)", "ControllerKube", "ours-reconciles/s", "", "controllerruntime-reconciles/s", "", 0},
	{"12 Controller vs controller-runtime, 5,000 ConfigMaps: allocations per object from cold start to reconciled", "ControllerKube", "ours-allocs/reconcile", "", "controllerruntime-allocs/reconcile", "", 0},
	{"12 Controller failover on etcd (20k keys), leader resigns: new leader wins → its first reconcile, warm standby vs a cold start of the same informers", "ControllerFailover/Resign", "warm-s", "", "cold-s", "", 0},
	{"12 Controller failover on etcd (20k keys), leader killed (no resign; its 1 s lease expires): new leader wins → its first reconcile, warm standby vs a cold start of the same informers", "ControllerFailover/Kill", "warm-s", "", "cold-s", "", 0},
	{"12 Controller failover, leader killed, warm standby: new leader wins → its first reconcile, s", "ControllerFailover/Kill", "warm-s", "", "", "≤", 1},
	{"13 Audit (#37), NATS KV of 1M keys: time, an unpaced audit of the synced informer vs a List of the same rows", "NATSAudit/Read", "audit-s", "", "list-s", "≤", 1.2},
	{"13 Audit, NATS KV of 1M keys: live heap the audit holds at its last row (seen set, suspects, consumer buffers) vs the informer's cache (live heap it added)", "NATSAudit/Read", "audit-retained-MB", "", "cache-MB", "≤", 0.05},
	{"13 Audit, NATS KV of 1M keys: peak heap above the start (garbage included), audit vs the informer's cache", "NATSAudit/Read", "audit-peak-heap-MB", "", "cache-MB", "", 0},
	{"13 Audit, NATS KV of 1M keys: peak heap above the start, audit vs the List", "NATSAudit/Read", "audit-peak-heap-MB", "", "list-peak-heap-MB", "", 0},
	{"13 Audit, NATS KV of 1M keys: informer throughput (100k of them updated) while audits at the default pace (10,000 rows/s) run back to back vs without", "NATSAudit/Throughput", "paced-changes/s", "", "alone-changes/s", "≥", 0.8},
	{"13 Audit, NATS KV of 1M keys: informer throughput while unpaced audits run back to back vs without (2 cores, the nats-server in the process)", "NATSAudit/Throughput", "unpaced-changes/s", "", "alone-changes/s", "", 0},
	{"13 Audit, Postgres table of 1M rows: time, an unpaced audit of the synced informer vs a late List of the same rows", "PostgresAudit", "audit-s", "", "list-s", "≤", 1.2},
	{"13 Audit, Postgres table of 1M rows: live heap the audit holds at its last row vs the informer's cache", "PostgresAudit", "audit-retained-MB", "", "cache-MB", "≤", 0.05},
	{"13 Audit, Postgres table of 1M rows: informer throughput (200k rows updated, 1,000 a transaction) while audits at the default pace (10,000 rows/s) run back to back vs without", "PostgresAuditThroughput", "paced-changes/s", "", "alone-changes/s", "≥", 0.8},
	{"13 Audit, Postgres table of 1M rows: informer throughput while unpaced audits run back to back vs without (2 cores, Postgres on the same machine)", "PostgresAuditThroughput", "unpaced-changes/s", "", "alone-changes/s", "", 0},
	{"10 Postgres warm restart memory (#39), 1M rows, then 5 min of 2,000 updates/s: heap, warm start vs cold start", "WarmRestartMemory", "warm-heap-MB", "", "cold-heap-MB", "≤", 1.1},
}

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

package bench_test

import (
	"context"
	"os"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/jackc/pglogrepl"
)

// BenchmarkWarmRestartMemory compares the heap of an informer over a
// 1,000,000-row Postgres table (warmRow: text and numeric columns,
// REPLICA IDENTITY DEFAULT; 20,000 under -short or DBINFORMER_BENCH_SMALL,
// DBINFORMER_WARM_ROWS sets another number) after a warm restart and
// minutes of steady updates with the same after a cold start, in one
// process: the warm side loads the checkpoint a first (cold) run saved
// and watches from it over the permanent slot; the cold side lists. Each
// then takes 2,000 row updates a second for 5 minutes (10 s under -short;
// DBINFORMER_WARM_MEM_SECONDS sets another duration) in transactions of
// 200 rows walking through the table, checkpointing every 10 s, waits
// until it has applied them all, and its heap is measured: the live heap
// after GC while it runs (the lowest of three samples), less the same once
// it stopped (warm-heap-MB, cold-heap-MB; heap warm/cold, target ≤ 1.1).
// RSS is not compared: one process holds both sides, and its RSS keeps
// the first side's peak. DBINFORMER_HEAP_PROFILE=dir writes each side's
// heap profile there (warm.pprof, cold.pprof) when it is measured.
func BenchmarkWarmRestartMemory(b *testing.B) {
	pg := harness.StartPostgres(b)
	rows := size(1_000_000, 20_000)
	if v, _ := strconv.Atoi(os.Getenv("DBINFORMER_WARM_ROWS")); v > 0 {
		rows = v
	}
	seconds := size(300, 10)
	if v, _ := strconv.Atoi(os.Getenv("DBINFORMER_WARM_MEM_SECONDS")); v > 0 {
		seconds = v
	}
	const perSecond, perTxn = 2000, 200
	pg.Exec(b, "CREATE TABLE warm_rows ("+warmRowCols+"); INSERT INTO warm_rows "+warmRowsFrom(1, rows))
	pg.Exec(b, "VACUUM ANALYZE warm_rows")
	ctx := context.Background()
	conn := pg.Conn(b)
	defer conn.Close(ctx)
	next := 1 // the first id of the next transaction
	// churn runs the updates against proc, then waits until it has
	// applied them.
	churn := func(proc *warmProcess) {
		tick := time.NewTicker(time.Second * perTxn / perSecond)
		defer tick.Stop()
		for range seconds * perSecond / perTxn {
			<-tick.C
			hi := min(next+perTxn-1, rows)
			if _, err := conn.Exec(ctx, "UPDATE warm_rows SET n = n + 1, amount = amount + 0.01, note = md5(note) WHERE id BETWEEN "+strconv.Itoa(next)+" AND "+strconv.Itoa(hi)); err != nil {
				b.Fatal(err)
			}
			if next = hi + 1; next > rows {
				next = 1
			}
		}
		var lsn pglogrepl.LSN
		if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()").Scan(&lsn); err != nil {
			b.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		defer cancel()
		if err := proc.inf.WaitFor(wctx, core.ResourceVersion(lsn)); err != nil {
			b.Fatal(err)
		}
	}
	// measure starts a process, churns, and returns its heap.
	measure := func(slot string, store core.CheckpointStore) (heap uint64, lists int) {
		proc := startWarmProcessEvery(b, pg, slot, store, nil, 10*time.Second)
		proc.waitSynced(b)
		churn(proc)
		if n := proc.inf.Indexer().Len(); n != rows {
			b.Fatalf("cached %d rows, want %d", n, rows)
		}
		// The lowest of three samples: the steady heap, not one that a
		// checkpoint being written adds to.
		running := liveHeap()
		for range 2 {
			time.Sleep(300 * time.Millisecond)
			running = min(running, liveHeap())
		}
		if d := os.Getenv("DBINFORMER_HEAP_PROFILE"); d != "" {
			f, _ := os.Create(d + "/" + map[bool]string{true: "warm", false: "cold"}[slot != ""] + ".pprof")
			pprof.WriteHeapProfile(f)
			f.Close()
		}
		lists = proc.spy.Lists()
		proc.stop(b)
		proc = nil
		stopped := liveHeap()
		return running - min(running, stopped), lists
	}
	const slot = "bench_warm_mem"
	for b.Loop() {
		store := newDirStore(b)
		first := startWarmProcess(b, pg, slot, store, nil)
		first.waitSynced(b)
		first.stop(b)
		warm, warmLists := measure(slot, store)
		if warmLists != 0 {
			b.Fatalf("the warm start listed %d times, want 0", warmLists)
		}
		cold, _ := measure("", newDirStore(b))
		b.ReportMetric(float64(warm)/1e6, "warm-heap-MB")
		b.ReportMetric(float64(cold)/1e6, "cold-heap-MB")
		b.ReportMetric(float64(warm)/float64(cold), "heap-warm/cold")
	}
}

func newDirStore(b *testing.B) core.CheckpointStore {
	b.Helper()
	store, err := core.NewDirCheckpointStore(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	return store
}

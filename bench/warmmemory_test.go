package bench_test

import (
	"bufio"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/checkpoint"
	codecs "github.com/dbinformer/dbinformer/core/codec"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// BenchmarkWarmRestartMemory (#39) compares the memory of an informer
// after a warm restart and minutes of steady writes with the same after a
// cold start of the same rows, each side a process of its own (this test
// binary re-executed: runWarmMemSide), so that its RSS is its own:
//
//   - postgres: a 1,000,000-row table (warmRow: text and numeric
//     columns, REPLICA IDENTITY DEFAULT; 20,000 under -short or
//     DBINFORMER_BENCH_SMALL, DBINFORMER_WARM_ROWS sets another number).
//     A first (cold) run in this process saves the checkpoint; the warm
//     side loads it and watches from it over the permanent slot, the
//     cold side lists. This process updates 2,000 rows a second, in
//     transactions of 200 rows walking through the table.
//   - etcd: 500,000 keys under one prefix (etcdWarmValue, the same
//     fields as warmRow, JSON of about 110 bytes; 20,000 under -short,
//     DBINFORMER_WARM_KEYS sets another number), the checkpoint in the
//     Binary codec (lazily decoded pages, as Postgres's). A first run in
//     this process lists and saves the checkpoint; the warm side loads it
//     and watches from its revision, the cold side lists. This process
//     puts 2,000 keys a second, in transactions of 100 walking through
//     the keys. 500k rather than 1M: putting them (transactions of 128,
//     four at a time) took 48 s on the loaded 2-core machine this was
//     written on, into an etcd embedded in this process (not a side's),
//     1M would take twice that and its cold Lists as well, and 500k
//     already makes a cache of hundreds of MB, past the sides' common
//     baseline (the test binary's ~70 MB RSS).
//     The history the churn leaves is compacted once both sides have
//     applied it (never before the warm side watched from its revision:
//     it would relist), so the backend stays well under etcd's quota.
//
// Both sides run at once (the warm one started and synced first, then the
// cold one), so that they take the same writes and a run takes half the
// time it took one side after the other (80 minutes for three; each
// measures itself in its own process, which the other does not touch).
// Each side checkpoints every 10 s and takes the writes for 5 minutes
// (10 s under -short; DBINFORMER_WARM_MEM_SECONDS sets another duration);
// then this process tells it the version the writes ended at, and it
// waits for it (WaitFor) and measures itself: its RSS (VmRSS of
// /proc/self/status, before it forces a GC; warm-rss-MB, cold-rss-MB,
// rss-warm/cold) and the live heap after GC while it runs (the lowest of
// three samples: the steady heap, not one a checkpoint being written adds
// to), less the same once it stopped (warm-heap-MB, cold-heap-MB,
// heap-warm/cold); targets ≤ 1.1 both. Also each side's peak RSS
// (VmHWM: the load or the list included; warm-peak-rss-MB,
// cold-peak-rss-MB). The warm side must not list. DBINFORMER_HEAP_PROFILE=dir
// writes each side's heap profile there (<source>-warm.pprof,
// <source>-cold.pprof) when it is measured.
func BenchmarkWarmRestartMemory(b *testing.B) {
	seconds := size(300, 10)
	if v, _ := strconv.Atoi(os.Getenv("DBINFORMER_WARM_MEM_SECONDS")); v > 0 {
		seconds = v
	}
	b.Run("postgres", func(b *testing.B) {
		rows := size(1_000_000, 20_000)
		if v, _ := strconv.Atoi(os.Getenv("DBINFORMER_WARM_ROWS")); v > 0 {
			rows = v
		}
		pg := harness.StartPostgres(b)
		pg.Exec(b, "CREATE TABLE warm_rows ("+warmRowCols+"); INSERT INTO warm_rows "+warmRowsFrom(1, rows))
		pg.Exec(b, "VACUUM ANALYZE warm_rows")
		for b.Loop() {
			warmMemPostgres(b, pg, rows, seconds)
		}
	})
	b.Run("etcd", func(b *testing.B) {
		keys := size(500_000, 20_000)
		if v, _ := strconv.Atoi(os.Getenv("DBINFORMER_WARM_KEYS")); v > 0 {
			keys = v
		}
		e := harness.StartEtcd(b)
		client := e.Client(b)
		t0 := time.Now()
		etcdWarmLoad(b, client, keys)
		b.Logf("put %d keys in %.1f s", keys, time.Since(t0).Seconds())
		for b.Loop() {
			warmMemEtcd(b, e, client, keys, seconds)
		}
	})
}

// warmMemPerSecond is the writes each side takes (rows, keys).
const warmMemPerSecond = 2000

// warmMemEnv holds, in a re-executed test binary, the side of
// BenchmarkWarmRestartMemory to run (a JSON warmMemSpec); see TestMain.
const warmMemEnv = "DBINFORMER_WARM_MEM_SIDE"

type warmMemSpec struct {
	Source string // "postgres" or "etcd"
	Side   string // "warm" or "cold": for the heap profile's name
	// Conn is the database (postgres) or the endpoints, comma-separated
	// (etcd).
	Conn string
	// Slot is the permanent slot (postgres, warm side); "" for a Source
	// of its own.
	Slot string
	// Dir holds the checkpoints: the first run's for the warm side, an
	// empty directory for the cold side.
	Dir  string
	Rows int
}

// runWarmMemSide is one side's process. It syncs (loading the checkpoint
// in Dir or listing) and reports "synced <lists>"; then it reads "wait
// <version>" on stdin, waits until it applied that version, measures
// itself and reports "measured <heap B> <rss kB> <peak rss kB> <lists>",
// and ends.
func runWarmMemSide(spec string) int {
	var s warmMemSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, "warm memory side:", err)
		return 2
	}
	var err error
	switch s.Source {
	case "postgres":
		err = warmMemPostgresSide(s)
	case "etcd":
		err = warmMemEtcdSide(s)
	default:
		err = fmt.Errorf("unknown source %q", s.Source)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "warm memory side %s/%s: %v\n", s.Source, s.Side, err)
		return 1
	}
	return 0
}

func warmMemLogf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "warm memory side: "+format+"\n", args...)
}

func warmMemPostgresSide(s warmMemSpec) error {
	store, err := checkpoint.NewDirStore(s.Dir)
	if err != nil {
		return err
	}
	p, err := openWarmProcess(s.Conn, s.Slot, store, nil, 10*time.Second, warmMemLogf)
	if err != nil {
		return err
	}
	return measureWarmMemSide(s, p.inf, p.spy.Lists, p.close)
}

func warmMemEtcdSide(s warmMemSpec) error {
	client, err := clientv3.New(clientv3.Config{
		Endpoints:            strings.Split(s.Conn, ","),
		DialTimeout:          10 * time.Second,
		DialKeepAliveTime:    harness.EtcdKeepAliveTime,
		DialKeepAliveTimeout: harness.EtcdKeepAliveTimeout,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		return err
	}
	defer client.Close()
	store, err := checkpoint.NewDirStore(s.Dir)
	if err != nil {
		return err
	}
	inf, spy, err := newEtcdWarmInformer(client, store, 10*time.Second, warmMemLogf)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	return measureWarmMemSide(s, inf, spy.Lists, func() error {
		cancel()
		return <-done
	})
}

// measureWarmMemSide is the part of runWarmMemSide common to the sources,
// for the running informer inf (lists counts its Lists, stop ends it).
func measureWarmMemSide[T any](s warmMemSpec, inf *core.SharedIndexInformer[T], lists func() int, stop func() error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := inf.WaitForCacheSync(ctx); err != nil {
		_ = stop()
		return err
	}
	fmt.Printf("synced %d\n", lists())
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() {
		_ = stop()
		return errors.New("stdin ended before the version to wait for")
	}
	v, err := strconv.ParseUint(strings.TrimPrefix(in.Text(), "wait "), 10, 64)
	if err != nil {
		_ = stop()
		return fmt.Errorf("version to wait for: %w", err)
	}
	if err := inf.WaitFor(ctx, core.ResourceVersion(v)); err != nil {
		_ = stop()
		return err
	}
	if n := inf.Indexer().Len(); n != s.Rows {
		_ = stop()
		return fmt.Errorf("cached %d objects, want %d", n, s.Rows)
	}
	// RSS as the program runs, before a forced GC.
	rss := procStatusKB("VmRSS:")
	running := steadyHeap()
	// The kernel updates the high-water mark lazily: it can lag the RSS
	// read above.
	peak := max(procStatusKB("VmHWM:"), rss)
	writeHeapProfile(s.Source + "-" + s.Side)
	n := lists()
	if err := stop(); err != nil {
		return err
	}
	stopped := liveHeap()
	fmt.Printf("measured %d %d %d %d\n", running-min(running, stopped), rss, peak, n)
	return nil
}

// warmMemSide is a side's process as this process sees it.
type warmMemSide struct {
	name string
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
}

// warmMemResult is what a side measured.
type warmMemResult struct {
	heap         uint64 // B
	rss, peakRSS uint64 // kB
	lists        int
}

// startWarmMemSide starts a side's process and waits until it synced.
func startWarmMemSide(b *testing.B, spec warmMemSpec) *warmMemSide {
	b.Helper()
	cmd, in, out := startChildWithInput(b, warmMemEnv, spec)
	s := &warmMemSide{name: spec.Source + "/" + spec.Side, cmd: cmd, in: in, out: bufio.NewScanner(out)}
	// A benchmark that fails before finish leaves no side running.
	b.Cleanup(func() {
		if s.cmd.ProcessState == nil {
			s.in.Close()
			_ = s.cmd.Process.Kill()
			_ = s.cmd.Wait()
		}
	})
	var lists int
	if !s.out.Scan() || !scanLine(s.out.Text(), "synced", &lists) {
		s.fail(b, "did not sync")
	}
	return s
}

// startWarmMemSides starts a process for each spec, one after the other
// (each synced before the next starts: a cold side's List does not slow a
// warm side's load), and returns them running.
func startWarmMemSides(b *testing.B, specs []warmMemSpec) []*warmMemSide {
	b.Helper()
	procs := make([]*warmMemSide, len(specs))
	for i, spec := range specs {
		procs[i] = startWarmMemSide(b, spec)
	}
	return procs
}

// finishWarmMemSides gives every side the version to wait for and returns
// what each measured, in order. They wait at once: each measures itself
// in its own process.
func finishWarmMemSides(b *testing.B, procs []*warmMemSide, v uint64) []warmMemResult {
	b.Helper()
	for _, p := range procs {
		if _, err := fmt.Fprintf(p.in, "wait %d\n", v); err != nil {
			p.fail(b, err.Error())
		}
	}
	out := make([]warmMemResult, len(procs))
	for i, p := range procs {
		out[i] = p.result(b)
	}
	return out
}

// result reads what the side measured, once it was told what to wait for,
// and waits for it to exit.
func (s *warmMemSide) result(b *testing.B) warmMemResult {
	b.Helper()
	var r warmMemResult
	if !s.out.Scan() || !scanLine(s.out.Text(), "measured", &r.heap, &r.rss, &r.peakRSS, &r.lists) {
		s.fail(b, "measured nothing")
	}
	s.in.Close()
	if err := s.cmd.Wait(); err != nil {
		b.Fatalf("warm memory side %s: %v", s.name, err)
	}
	return r
}

func (s *warmMemSide) fail(b *testing.B, what string) {
	b.Helper()
	s.in.Close()
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	b.Fatalf("warm memory side %s %s (its last line: %q)", s.name, what, s.out.Text())
}

// scanLine parses "verb <args…>" into args.
func scanLine(line, verb string, args ...any) bool {
	rest, ok := strings.CutPrefix(line, verb+" ")
	if !ok {
		return false
	}
	n, err := fmt.Sscan(rest, args...)
	return err == nil && n == len(args)
}

// reportWarmMem reports the two sides' figures.
func reportWarmMem(b *testing.B, warm, cold warmMemResult) {
	if warm.lists != 0 {
		b.Fatalf("the warm side listed %d times, want 0", warm.lists)
	}
	b.ReportMetric(float64(warm.heap)/1e6, "warm-heap-MB")
	b.ReportMetric(float64(cold.heap)/1e6, "cold-heap-MB")
	b.ReportMetric(float64(warm.heap)/float64(cold.heap), "heap-warm/cold")
	b.ReportMetric(float64(warm.rss)/1e3, "warm-rss-MB")
	b.ReportMetric(float64(cold.rss)/1e3, "cold-rss-MB")
	b.ReportMetric(float64(warm.rss)/float64(cold.rss), "rss-warm/cold")
	b.ReportMetric(float64(warm.peakRSS)/1e3, "warm-peak-rss-MB")
	b.ReportMetric(float64(cold.peakRSS)/1e3, "cold-peak-rss-MB")
}

// warmMemPostgres is one run of the postgres sub-benchmark.
func warmMemPostgres(b *testing.B, pg *harness.Postgres, rows, seconds int) {
	const slot, perTxn = "bench_warm_mem", 200
	ctx := context.Background()
	conn := pg.Conn(b)
	defer conn.Close(ctx)
	dir := b.TempDir()
	store, err := checkpoint.NewDirStore(dir)
	if err != nil {
		b.Fatal(err)
	}
	first := startWarmProcess(b, pg, slot, store, nil)
	first.waitSynced(b)
	first.stop(b)

	next := 1 // the first id of the next transaction
	// Both sides take the same writes at once, each in its own process.
	sides := func(specs ...warmMemSpec) []warmMemResult {
		procs := startWarmMemSides(b, specs)
		tick := time.NewTicker(time.Second * perTxn / warmMemPerSecond)
		defer tick.Stop()
		for range seconds * warmMemPerSecond / perTxn {
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
		return finishWarmMemSides(b, procs, uint64(lsn))
	}
	r := sides(warmMemSpec{Source: "postgres", Side: "warm", Conn: pg.ConnString(), Slot: slot, Dir: dir, Rows: rows},
		warmMemSpec{Source: "postgres", Side: "cold", Conn: pg.ConnString(), Dir: b.TempDir(), Rows: rows})
	// The next run's first process makes the permanent slot again.
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := pgtest.DropSlot(dctx, pg.ConnString(), slot); err != nil {
		b.Fatal(err)
	}
	reportWarmMem(b, r[0], r[1])
}

// etcdWarmValue is the etcd sub-benchmark's value: warmRow's fields, as
// JSON.
type etcdWarmValue struct {
	ID     int64   `json:"id"`
	Org    string  `json:"org"`
	Team   string  `json:"team"`
	N      int32   `json:"n"`
	Amount float64 `json:"amount"`
	Note   string  `json:"note"`
}

const etcdWarmPrefix = "/warm/"

// etcdWarmPut is the put of key i's value after n updates.
func etcdWarmPut(i, n int) clientv3.Op {
	sum := md5.Sum([]byte(strconv.Itoa(i) + "/" + strconv.Itoa(n)))
	v, _ := json.Marshal(etcdWarmValue{ID: int64(i), Org: "org-" + strconv.Itoa(i%100), Team: "team-" + strconv.Itoa(i%1000),
		N: int32(n), Amount: float64(i)*1.37 + float64(n)/100, Note: hex.EncodeToString(sum[:])})
	return clientv3.OpPut(etcdWarmPrefix+strconv.Itoa(i), string(v))
}

// etcdWarmLoad puts keys 0..keys-1 in transactions of 128 (etcd's
// default --max-txn-ops), four at a time.
func etcdWarmLoad(b *testing.B, client *clientv3.Client, keys int) {
	const perTxn, writers = 128, 4
	ctx := context.Background()
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			ops := make([]clientv3.Op, 0, perTxn)
			for lo := w * perTxn; lo < keys; lo += writers * perTxn {
				ops = ops[:0]
				for i := lo; i < min(lo+perTxn, keys); i++ {
					ops = append(ops, etcdWarmPut(i, 0))
				}
				if _, err := client.Txn(ctx).Then(ops...).Commit(); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range writers {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
}

// newEtcdWarmInformer is the informer of the etcd sub-benchmark's keys,
// checkpointing into store every interval in the Binary codec.
func newEtcdWarmInformer(client *clientv3.Client, store checkpoint.Store, interval time.Duration, logf func(string, ...any)) (*core.SharedIndexInformer[etcdWarmValue], *informertest.Spy[etcdWarmValue], error) {
	lw, err := etcdinformer.NewPrefix[etcdWarmValue](context.Background(), client, etcdWarmPrefix, etcdinformer.Options[etcdWarmValue]{})
	if err != nil {
		return nil, nil, err
	}
	codec, err := codecs.NewBinary[etcdWarmValue]()
	if err != nil {
		return nil, nil, err
	}
	spy := informertest.Wrap[etcdWarmValue](lw)
	inf := core.NewSharedIndexInformer[etcdWarmValue](spy, core.InformerOptions[etcdWarmValue]{
		Name:         "warm_keys",
		ErrorHandler: func(err error) { logf("informer: %v", err) },
		Checkpoint:   &core.CheckpointOptions[etcdWarmValue]{Store: store, Codec: codec, Interval: interval},
	})
	return inf, spy, nil
}

// warmMemEtcd is one run of the etcd sub-benchmark.
func warmMemEtcd(b *testing.B, e *harness.Etcd, client *clientv3.Client, keys, seconds int) {
	const perTxn = 100
	ctx := context.Background()
	dir := b.TempDir()
	store, err := checkpoint.NewDirStore(dir)
	if err != nil {
		b.Fatal(err)
	}
	// The first run lists and saves the checkpoint when it ends.
	inf, _, err := newEtcdWarmInformer(client, store, -1, b.Logf)
	if err != nil {
		b.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- inf.Run(rctx) }()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	synced := inf.WaitForCacheSync(sctx)
	stop()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	if synced != nil {
		b.Fatal(synced)
	}
	inf = nil

	next, pass := 0, 1 // the first key of the next transaction, the pass over the keys
	// Both sides take the same writes at once, each in its own process.
	sides := func(specs ...warmMemSpec) []warmMemResult {
		procs := startWarmMemSides(b, specs)
		tick := time.NewTicker(time.Second * perTxn / warmMemPerSecond)
		defer tick.Stop()
		var rev int64
		ops := make([]clientv3.Op, 0, perTxn)
		for range seconds * warmMemPerSecond / perTxn {
			<-tick.C
			ops = ops[:0]
			hi := min(next+perTxn, keys)
			for i := next; i < hi; i++ {
				ops = append(ops, etcdWarmPut(i, pass))
			}
			resp, err := client.Txn(ctx).Then(ops...).Commit()
			if err != nil {
				b.Fatal(err)
			}
			rev = resp.Header.Revision
			if next = hi; next == keys {
				next, pass = 0, pass+1
			}
		}
		r := finishWarmMemSides(b, procs, uint64(rev))
		// Both sides applied everything up to rev: its history can go.
		if _, err := client.Compact(ctx, rev); err != nil {
			b.Fatal(err)
		}
		return r
	}
	endpoints := strings.Join(e.Endpoints(), ",")
	r := sides(warmMemSpec{Source: "etcd", Side: "warm", Conn: endpoints, Dir: dir, Rows: keys},
		warmMemSpec{Source: "etcd", Side: "cold", Conn: endpoints, Dir: b.TempDir(), Rows: keys})
	reportWarmMem(b, r[0], r[1])
}

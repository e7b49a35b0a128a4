package bench_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/leader"
	"github.com/dbinformer/dbinformer/relay"
	"github.com/dbinformer/dbinformer/relay/relaytest"
)

// BenchmarkRelay (#23): 8 informers on one Postgres table, either each
// with its own Source (a replication slot and a walsender each: "direct")
// or all through one relay into a JetStream stream ("relay"), in the same
// process, under the same paced writer (rows of 100-row transactions at
// 20k rows/s; 2k under -short). Each iteration runs the two one right
// after the other, so that both see the same load from outside, and
// reports both and their ratios (relay/direct): with -count 3 the ratios
// of three adjacent pairs. For each side: replication slots and
// walsenders in use, CPU the walsenders spent (/proc utime+stime of their
// pids, ms) and the whole process spent (ms; the NATS server runs in it),
// end-to-end lag from the commit's send to each informer's handler, p50
// and p99, the rate the writer achieved while writing (offered-rows/s:
// below the target when the writer could not keep its pace, and then the
// two sides did not carry the same load), and, for the relay, how many
// times a downstream informer relisted, and for both the fraction of the
// rows' changes that reached the handlers (delivered: below 1 when a
// downstream that fell behind skipped changes a later change of the same
// key superseded, whose lag is then not counted).
func BenchmarkRelay(b *testing.B) {
	pg := harness.StartPostgres(b)
	nsrv := harness.StartNATS(b)
	rate := size(20000, 2000)
	dur := time.Duration(size(5, 1)) * time.Second
	for range b.N {
		direct := runRelayBench(b, pg, nsrv, "direct", rate, dur, relayLoad{perTx: 100, keys: 2000})
		relayed := runRelayBench(b, pg, nsrv, "relay", rate, dur, relayLoad{perTx: 100, keys: 2000})
		reportRelay(b, direct, relayed)
	}
}

// BenchmarkRelayBusyKeys (#38): BenchmarkRelay's two sides under writes
// that never pause on keys so busy that a downstream a transaction behind
// finds nearly every group it reads incomplete (a later change of a key
// removed its message): one-row transactions at 1,000/s (100/s under
// -short) over 20 keys. The downstreams catch up as they read (they used
// to wait for the writes to stop): the lag p99 ratio is the follower lag
// against direct informers.
func BenchmarkRelayBusyKeys(b *testing.B) {
	pg := harness.StartPostgres(b)
	nsrv := harness.StartNATS(b)
	rate := size(1000, 100)
	dur := time.Duration(size(10, 2)) * time.Second
	for range b.N {
		direct := runRelayBench(b, pg, nsrv, "direct", rate, dur, relayLoad{perTx: 1, keys: 20})
		relayed := runRelayBench(b, pg, nsrv, "relay", rate, dur, relayLoad{perTx: 1, keys: 20})
		reportRelay(b, direct, relayed)
	}
}

// relayLoad shapes a relay benchmark's writes: rows per transaction, over
// how many keys (round robin).
type relayLoad struct{ perTx, keys int }

// reportRelay reports both sides of a relay benchmark and their ratios.
func reportRelay(b *testing.B, direct, relayed relaySample) {
	for _, s := range []relaySample{direct, relayed} {
		b.ReportMetric(float64(s.slots), s.mode+"-slots")
		b.ReportMetric(float64(s.senders), s.mode+"-walsenders")
		b.ReportMetric(s.walsenderCPU, s.mode+"-walsender-cpu-ms")
		b.ReportMetric(s.procCPU, s.mode+"-proc-cpu-ms")
		b.ReportMetric(s.p50, s.mode+"-lag-p50-ms")
		b.ReportMetric(s.p99, s.mode+"-lag-p99-ms")
		b.ReportMetric(s.offered, s.mode+"-offered-rows/s")
		b.ReportMetric(s.delivered, s.mode+"-delivered")
	}
	b.ReportMetric(float64(relayed.relists), "relay-relists")
	b.ReportMetric(relayed.p50/direct.p50, "p50-ratio")
	b.ReportMetric(relayed.p99/direct.p99, "p99-ratio")
}

// relaySample is one side's run.
type relaySample struct {
	mode                  string
	slots, senders        int
	walsenderCPU, procCPU float64
	p50, p99, offered     float64
	delivered             float64 // the fraction of row changes handlers saw
	relists               int64
}

// scope is a testing.TB whose cleanups run when close is called.
type scope struct {
	testing.TB
	fns []func()
}

func (s *scope) Cleanup(f func()) { s.fns = append(s.fns, f) }

func (s *scope) close() {
	for i := len(s.fns) - 1; i >= 0; i-- {
		s.fns[i]()
	}
}

// countingDown counts a Downstream's Lists: an informer's first, and
// one per relist.
type countingDown struct {
	*relay.Downstream[pgtest.Row]
	lists *atomic.Int64
}

func (d countingDown) List(ctx context.Context, sink driver.ListSink[pgtest.Row]) (core.ResourceVersion, error) {
	d.lists.Add(1)
	return d.Downstream.List(ctx, sink)
}

func runRelayBench(b *testing.B, pg *harness.Postgres, nsrv *harness.NATS, mode string, rate int, dur time.Duration, load relayLoad) relaySample {
	// Everything a side starts is stopped when it ends, before the other
	// side runs: a Source left open would go on decoding the WAL.
	sc := &scope{TB: b}
	defer sc.close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := pgtest.New(sc, pg, pgtest.Options{})
	const n = 8
	var lists atomic.Int64
	var lws []driver.ListerWatcher[pgtest.Row]
	switch mode {
	case "direct":
		// The harness's own Source is the first of the eight.
		lws = append(lws, src.Table())
		for range n - 1 {
			s, err := pginformer.NewSource(ctx, pg.ConnString(), pginformer.Options{})
			if err != nil {
				b.Fatal(err)
			}
			sc.Cleanup(func() { s.Close() })
			t, err := pginformer.NewTable[pgtest.Row](ctx, s, src.TableName(), pginformer.TableOptions[pgtest.Row]{})
			if err != nil {
				b.Fatal(err)
			}
			lws = append(lws, t)
		}
	case "relay":
		h := relaytest.New(sc, src, nsrv.JetStream(sc), relaytest.Options{NoWait: true, NewElector: func(int) leader.Elector {
			el, err := leader.NewPostgres(pg.ConnString(), "bench-"+src.TableName(), leader.PostgresOptions{})
			if err != nil {
				b.Fatal(err)
			}
			return el
		}})
		for range n {
			d, err := h.NewDownstream(ctx, nsrv.JetStream(sc))
			if err != nil {
				b.Fatal(err)
			}
			lws = append(lws, countingDown{d, &lists})
		}
	}
	// Each row's V is the time its transaction was sent (unix ns).
	var mu sync.Mutex
	var lags []float64
	var infs []*core.SharedIndexInformer[pgtest.Row]
	var wg sync.WaitGroup
	for i, lw := range lws {
		inf := core.NewSharedIndexInformer[pgtest.Row](lw, core.InformerOptions[pgtest.Row]{Name: fmt.Sprintf("%s-%d", mode, i)})
		rec := func(r pgtest.Row) {
			if r.V > 1e18 {
				l := float64(time.Now().UnixNano()-r.V) / 1e6
				mu.Lock()
				lags = append(lags, l)
				mu.Unlock()
			}
		}
		_, _ = inf.AddEventHandler(core.ResourceEventHandlerFuncs[pgtest.Row]{
			AddFunc:    func(_ string, r pgtest.Row, _ bool) { rec(r) },
			UpdateFunc: func(_ string, _, r pgtest.Row) { rec(r) },
		})
		wg.Go(func() { _ = inf.Run(ctx) })
		infs = append(infs, inf)
	}
	for _, inf := range infs {
		if err := inf.WaitForCacheSync(ctx); err != nil {
			b.Fatal(err)
		}
	}
	slots, senders, pids := replicationUse(sc, ctx, pg)
	cpu0, self0 := procCPU(pids), selfCPU()

	perTx := load.perTx
	txs := rate * int(dur/time.Second) / perTx
	interval := time.Second * time.Duration(perTx) / time.Duration(rate)
	keys := make([]string, perTx)
	start := time.Now()
	var last core.ResourceVersion
	for i := range txs {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		for j := range keys {
			keys[j] = "k" + strconv.Itoa((i*perTx+j)%load.keys)
		}
		rv, err := src.PutAll(ctx, keys, time.Now().UnixNano())
		if err != nil {
			b.Fatal(err)
		}
		last = rv
	}
	written := time.Since(start)
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	for _, inf := range infs {
		if err := inf.WaitFor(wctx, last); err != nil {
			b.Fatalf("%s: %v", mode, err)
		}
	}
	wcancel()
	cpu, self := procCPU(pids)-cpu0, selfCPU()-self0
	cancel()
	wg.Wait()

	slices.Sort(lags)
	pct := func(p float64) float64 {
		if len(lags) == 0 {
			return 0
		}
		return lags[min(len(lags)-1, int(p*float64(len(lags))))]
	}
	return relaySample{mode: mode, slots: slots, senders: senders, walsenderCPU: cpu, procCPU: self,
		p50: pct(0.50), p99: pct(0.99), offered: float64(txs*perTx) / written.Seconds(),
		delivered: float64(len(lags)) / float64(len(infs)*txs*perTx), relists: max(lists.Load()-n, 0)}
}

// replicationUse counts replication slots and walsenders and returns the
// walsenders' pids.
func replicationUse(b testing.TB, ctx context.Context, pg *harness.Postgres) (slots, senders int, pids []int) {
	conn := pg.Conn(b)
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE active").Scan(&slots); err != nil {
		b.Fatal(err)
	}
	rows, err := conn.Query(ctx, "SELECT pid FROM pg_stat_replication")
	if err != nil {
		b.Fatal(err)
	}
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			b.Fatal(err)
		}
		pids = append(pids, pid)
	}
	return slots, len(pids), pids
}

// procCPU sums utime+stime of pids from /proc, in ms (0 where unreadable).
func procCPU(pids []int) float64 {
	var ticks float64
	for _, pid := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(data)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) > 12 {
			u, _ := strconv.ParseFloat(f[11], 64)
			st, _ := strconv.ParseFloat(f[12], 64)
			ticks += u + st
		}
	}
	return ticks * 10 // USER_HZ 100
}

// selfCPU is the process's user+system CPU time so far, in ms.
func selfCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e6
}

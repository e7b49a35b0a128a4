package bench_test

import (
	"context"
	"encoding/json"
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
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/leader"
	"github.com/dbinformer/dbinformer/relay"
	"github.com/dbinformer/dbinformer/relay/relaytest"
	"github.com/nats-io/nats.go/jetstream"
)

// TRACE (temporary): per-stage lags.
type stages struct {
	mu sync.Mutex
	m  map[string][]float64
}

func (s *stages) add(name string, v int64, now time.Time) {
	if v < 1e18 {
		return
	}
	l := float64(now.UnixNano()-v) / 1e6
	s.mu.Lock()
	if s.m == nil {
		s.m = map[string][]float64{}
	}
	s.m[name] = append(s.m[name], l)
	s.mu.Unlock()
}

func (s *stages) report(b *testing.B) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range s.m {
			if !yield(k) {
				return
			}
		}
	}) {
		l := s.m[k]
		slices.Sort(l)
		b.ReportMetric(l[len(l)/2], k+"-p50-ms")
		b.ReportMetric(l[min(len(l)-1, len(l)*99/100)], k+"-p99-ms")
	}
}

type tracedTable struct {
	*pginformer.Table[pgtest.Row]
	st *stages
}

func (t tracedTable) Watch(ctx context.Context, from core.ResourceVersion, opts core.WatchOptions[pgtest.Row]) error {
	emit := opts.Emit
	opts.Emit = func(b []core.Event[pgtest.Row]) error {
		now := time.Now()
		for _, ev := range b {
			if ev.HasObject {
				t.st.add("src", ev.Object.V, now)
			}
		}
		err := emit(b)
		now = time.Now()
		for _, ev := range b {
			if ev.HasObject {
				t.st.add("srcret", ev.Object.V, now)
			}
		}
		return err
	}
	return t.Table.Watch(ctx, from, opts)
}

type tracedDown struct {
	*relay.Downstream[pgtest.Row]
	st    *stages
	lists *atomic.Int64
}

func (t tracedDown) List(ctx context.Context, sink core.ListSink[pgtest.Row]) (core.ResourceVersion, error) {
	t.lists.Add(1)
	return t.Downstream.List(ctx, sink)
}

func (t tracedDown) Watch(ctx context.Context, from core.ResourceVersion, opts core.WatchOptions[pgtest.Row]) error {
	emit := opts.Emit
	opts.Emit = func(b []core.Event[pgtest.Row]) error {
		now := time.Now()
		for _, ev := range b {
			if ev.HasObject {
				t.st.add("down", ev.Object.V, now)
			}
		}
		return emit(b)
	}
	return t.Downstream.Watch(ctx, from, opts)
}

// BenchmarkRelay (#23): 8 informers on one Postgres table, either each
// with its own Source (a replication slot and a walsender each: "direct")
// or all through one relay into a JetStream stream ("relay"), in the same
// process, one after the other, under the same paced writer (rows of
// 100-row transactions at 20k rows/s; 2k under -short). Reported for each:
// replication slots and walsenders in use, CPU the walsenders spent
// (/proc utime+stime of their pids, ms), and end-to-end lag from the
// commit's send to each informer's handler, p50 and p99.
func BenchmarkRelay(b *testing.B) {
	pg := harness.StartPostgres(b)
	nsrv := harness.StartNATS(b)
	rate := size(20000, 2000)
	dur := time.Duration(size(5, 1)) * time.Second
	for _, mode := range []string{"direct", "relay"} {
		b.Run(mode, func(b *testing.B) {
			for range b.N {
				runRelayBench(b, pg, nsrv, mode, rate, dur)
			}
		})
	}
}

func runRelayBench(b *testing.B, pg *harness.Postgres, nsrv *harness.NATS, mode string, rate int, dur time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := pgtest.New(b, pg, pgtest.Options{})
	n := 8
	if v, _ := strconv.Atoi(os.Getenv("RELAY_N")); v > 0 {
		n = v
	}
	st := &stages{}
	var lists atomic.Int64
	hist, _ := strconv.Atoi(os.Getenv("RELAY_HIST"))
	var lws []core.ListerWatcher[pgtest.Row]
	switch mode {
	case "direct":
		// The harness's own Source is the first of the eight.
		lws = append(lws, tracedTable{src.Table(), st})
		for range n - 1 {
			s, err := pginformer.NewSource(ctx, pg.ConnString(), pginformer.Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			t, err := pginformer.NewTable[pgtest.Row](ctx, s, src.TableName(), pginformer.TableOptions[pgtest.Row]{})
			if err != nil {
				b.Fatal(err)
			}
			lws = append(lws, tracedTable{t, st})
		}
	case "relay":
		h := relaytest.New(b, tracedSrc{Harness: src, lw: tracedTable{src.Table(), st}}, nsrv.JetStream(b), relaytest.Options{History: int64(hist), NoWait: true, NewElector: func(int) leader.Elector {
			el, err := leader.NewPostgres(pg.ConnString(), "bench-"+src.TableName(), leader.PostgresOptions{})
			if err != nil {
				b.Fatal(err)
			}
			return el
		}})
		for range n {
			d, err := h.NewDownstream(ctx, nsrv.JetStream(b))
			if err != nil {
				b.Fatal(err)
			}
			lws = append(lws, tracedDown{d, st, &lists})
		}
		js := nsrv.JetStream(b)
		oc, err := js.OrderedConsumer(ctx, h.Stream(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{h.Prefix() + ".k.>"}, DeliverPolicy: jetstream.DeliverNewPolicy})
		if err != nil {
			b.Fatal(err)
		}
		cc, err := oc.Consume(func(m jetstream.Msg) {
			now := time.Now()
			var r pgtest.Row
			if json.Unmarshal(m.Data(), &r) != nil {
				return
			}
			if md, err := m.Metadata(); err == nil {
				st.add("stored", r.V, md.Timestamp)
			}
			st.add("raw", r.V, now)
		})
		if err != nil {
			b.Fatal(err)
		}
		defer cc.Stop()
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
	slots, senders, pids := replicationUse(b, ctx, pg)
	cpu0 := procCPU(pids)
	self0 := selfCPU()

	const perTx = 100
	txs := rate * int(dur/time.Second) / perTx
	interval := time.Second * perTx / time.Duration(rate)
	keys := make([]string, perTx)
	start := time.Now()
	var last core.ResourceVersion
	for i := range txs {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		for j := range keys {
			keys[j] = "k" + strconv.Itoa((i*perTx+j)%2000)
		}
		rv, err := src.PutAll(ctx, keys, time.Now().UnixNano())
		if err != nil {
			b.Fatal(err)
		}
		last = rv
	}
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	for _, inf := range infs {
		if err := inf.WaitFor(wctx, last); err != nil {
			b.Fatalf("%s: %v", mode, err)
		}
	}
	wcancel()
	elapsed := time.Since(start)
	cpu := procCPU(pids) - cpu0
	b.ReportMetric(selfCPU()-self0, "proc-cpu-ms")
	cancel()
	wg.Wait()

	slices.Sort(lags)
	pct := func(p float64) float64 {
		if len(lags) == 0 {
			return 0
		}
		return lags[min(len(lags)-1, int(p*float64(len(lags))))]
	}
	st.report(b)
	if mode == "relay" {
		b.ReportMetric(float64(lists.Load()-int64(n)), "relists")
	}
	b.ReportMetric(float64(slots), "slots")
	b.ReportMetric(float64(senders), "walsenders")
	b.ReportMetric(cpu, "walsender-cpu-ms")
	b.ReportMetric(pct(0.50), "lag-p50-ms")
	b.ReportMetric(pct(0.99), "lag-p99-ms")
	b.ReportMetric(float64(txs*perTx)/elapsed.Seconds(), "rows/s")
}

// replicationUse counts replication slots and walsenders and returns the
// walsenders' pids.
func replicationUse(b *testing.B, ctx context.Context, pg *harness.Postgres) (slots, senders int, pids []int) {
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

type tracedSrc struct {
	*pgtest.Harness
	lw core.ListerWatcher[pgtest.Row]
}

func (t tracedSrc) ListerWatcher() core.ListerWatcher[pgtest.Row] { return t.lw }

func selfCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e6
}

package bench_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"testing"
	"time"

	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	"github.com/dbinformer/dbinformer/adapters/nats/natstest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// BenchmarkNATSAudit (#37): the consistency audit of an informer over a
// NATS KV bucket of keys keys (1M; one embedded server).
//
//   - Read: an audit (unpaced, AuditNow) against a List of the same rows
//     by a second ListerWatcher of the bucket, alternating; the audit's
//     peak heap above its start beside the cache's own heap (the live heap
//     the synced informer added), whose ratio is the target "heap beyond
//     the cache ≤ 5%".
//   - Throughput: the informer applying updates of the first updates keys (published async,
//     timed until WaitFor their last revision) while audits run back to
//     back, at the default pace (10,000 rows/s) and unpaced, against the
//     same without an audit.
func BenchmarkNATSAudit(b *testing.B) {
	keys := size(1_000_000, 2_000)
	// The throughput sides rewrite the first updates keys each round: a
	// tenth of the bucket keeps a run of three sides within minutes.
	updates := size(100_000, 2_000)
	rounds := size(3, 1)
	h := natstest.NewKV(b, natstest.Config{Server: harness.StartNATS(b), History: 1})
	natsFill(b, h, keys)
	ctx := context.Background()
	ljs := h.ListenJetStream()
	newLW := func() *natsinformer.KV[item] {
		lw, err := natsinformer.NewKV(ctx, ljs, h.Bucket().Bucket(), natsinformer.KVOptions[item]{Prefix: "w."})
		if err != nil {
			b.Fatal(err)
		}
		return lw
	}
	before := liveHeap()
	probe := &heapProbe[item]{lw: newLW()}
	// Read audits unpaced; Throughput sets the pace per side (no audit
	// runs then, and the period is never reached).
	aopts := &core.AuditOptions[item]{Pace: -1}
	inf := core.NewSharedIndexInformer[item](probe, core.InformerOptions[item]{Name: "audit-bench", Audit: aopts})
	defer runSynced(b, inf)()
	cacheMB := float64(liveHeap()-before) / (1 << 20)
	listLW := newLW()

	audit := func() {
		if r := inf.AuditNow(ctx); r.Outcome != core.AuditEqual || r.Rows != int64(keys) {
			b.Fatalf("audit: %v, want equal over %d rows", r, keys)
		}
	}
	list := func() {
		if n := oursNATSList(b, listLW); n != keys {
			b.Fatalf("listed %d keys, want %d", n, keys)
		}
	}
	b.Run("Read", func(b *testing.B) {
		audit()
		list()
		// One untimed audit measures what it holds: the live heap when
		// the source's last row arrives (its seen set full, its
		// suspects and the consumer's buffers held) above the live heap
		// before it.
		probe.at, probe.base = keys, liveHeap()
		audit()
		probe.at = 0
		b.ReportMetric(float64(probe.held)/(1<<20), "audit-retained-MB")
		alternate(b, rounds,
			side{name: "audit", n: keys, unit: "row", peak: true, run: audit},
			side{name: "list", n: keys, unit: "row", peak: true, run: list})
		b.ReportMetric(cacheMB, "cache-MB")
	})

	version := 2
	js := h.Writer()
	update := func() {
		version++
		var last core.ResourceVersion
		for i := range updates {
			_, o := newItem(i)
			o.N = version
			v, _ := json.Marshal(o)
			f, err := js.PublishAsync("$KV."+h.Bucket().Bucket()+".w.k"+strconv.Itoa(i), v)
			if err != nil {
				b.Fatal(err)
			}
			if i == updates-1 {
				select {
				case ack := <-f.Ok():
					last = core.ResourceVersion(ack.Sequence)
				case err := <-f.Err():
					b.Fatal(err)
				}
			} else if i%1000 == 999 {
				<-js.PublishAsyncComplete()
			}
		}
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Minute)
		defer wcancel()
		if err := inf.WaitFor(wctx, last); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("Throughput", func(b *testing.B) {
		aud := newBackToBackAudits(b, inf, aopts)
		alternate(b, rounds,
			side{name: "paced", n: updates, unit: "change", prepare: aud.start("paced", 0), run: update, finish: aud.stop},
			side{name: "unpaced", n: updates, unit: "change", prepare: aud.start("unpaced", -1), run: update, finish: aud.stop},
			side{name: "alone", n: updates, unit: "change", run: update})
		aud.report(rounds)
	})
}

// heapProbe wraps an audited ListerWatcher (every capability found
// through Unwrap): when at is set, its AuditList reads the live heap as
// the at-th row arrives.
type heapProbe[T any] struct {
	lw         driver.ListerWatcher[T]
	at         int
	base, held uint64
}

func (p *heapProbe[T]) Unwrap() driver.ListerWatcher[T] { return p.lw }

func (p *heapProbe[T]) List(ctx context.Context, sink driver.ListSink[T]) (core.ResourceVersion, error) {
	return p.lw.List(ctx, sink)
}

func (p *heapProbe[T]) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[T]) error {
	return p.lw.Watch(ctx, from, opts)
}

func (p *heapProbe[T]) AuditList(ctx context.Context, atLeast core.ResourceVersion, sink driver.ListSink[T]) (core.ResourceVersion, error) {
	al, ok := driver.Capability[driver.AuditLister[T]](p.lw)
	if !ok {
		return 0, core.ErrAuditUnsupported
	}
	if p.at == 0 {
		return al.AuditList(ctx, atLeast, sink)
	}
	emit, n := sink.Emit, 0
	sink.Emit = func(ev driver.Event[T]) error {
		err := emit(ev)
		if n++; n == p.at {
			h := liveHeap() // once: two reads could go down in between and wrap
			p.held = h - min(p.base, h)
		}
		return err
	}
	return al.AuditList(ctx, atLeast, sink)
}

// backToBackAudits runs an informer's audits one after another while a
// throughput side applies changes: changes race each audit (keys in
// flight, never divergent). An audit that could not compare (a relist
// under way: History 1 buckets and slot expiries relist under load) is
// counted and retried after a pause; only a divergent one fails the
// benchmark. A paced audit of a large source outlasts a side's changes:
// stop cancels it rather than waiting it out.
type backToBackAudits[T any] struct {
	b        *testing.B
	inf      *core.SharedIndexInformer[T]
	opts     *core.AuditOptions[T]
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	runs     map[string]int // audits completed, per side
	couldNot map[string]int // audits that could not compare, per side
}

func newBackToBackAudits[T any](b *testing.B, inf *core.SharedIndexInformer[T], opts *core.AuditOptions[T]) *backToBackAudits[T] {
	return &backToBackAudits[T]{b: b, inf: inf, opts: opts, runs: map[string]int{}, couldNot: map[string]int{}}
}

// start returns a side's prepare: audits at pace (0 the default, -1
// unpaced) until stop.
func (a *backToBackAudits[T]) start(name string, pace float64) func() {
	return func() {
		a.opts.Pace = pace
		ctx, cancel := context.WithCancel(context.Background())
		a.cancel = cancel
		a.wg.Go(func() {
			for ctx.Err() == nil {
				r := a.inf.AuditNow(ctx)
				switch {
				case ctx.Err() != nil:
					return
				case r.Outcome == core.AuditEqual:
					a.runs[name]++
				case r.Outcome == core.AuditFailed:
					a.couldNot[name]++
					select {
					case <-ctx.Done():
					case <-time.After(50 * time.Millisecond):
					}
				default:
					a.b.Errorf("audit under writes: %v", r)
					return
				}
			}
		})
	}
}

func (a *backToBackAudits[T]) stop() { a.cancel(); a.wg.Wait() }

// report reports audits completed and not, per side and round.
func (a *backToBackAudits[T]) report(rounds int) {
	for name, n := range a.runs {
		a.b.ReportMetric(float64(n)/float64(rounds*a.b.N), name+"-audits/round")
	}
	for name, n := range a.couldNot {
		a.b.ReportMetric(float64(n)/float64(rounds*a.b.N), name+"-audits-not-compared/round")
	}
}

package bench_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/dbinformer/dbinformer/bench"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

// obj is the object both pipelines carry. client-go needs a runtime.Object
// with ObjectMeta (its key function and resourceVersion come from there), so
// both sides use this type and the very same pointers: identical input.
type obj struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Org, Team         string
	N                 int
}

func (o *obj) DeepCopyObject() runtime.Object { c := *o; return &c }

type objList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata"`
	Items           []obj
}

func (l *objList) DeepCopyObject() runtime.Object {
	c := *l
	c.Items = append([]obj(nil), l.Items...)
	return &c
}

// stream is the pre-generated input: the same objects as our events (in
// batches, as a watch emits them) and as client-go watch events.
type stream struct {
	ours [][]driver.Event[*obj]
	cg   []watch.Event
}

const pipelineBatch = 100

func newStream(n, keys int) *stream {
	changes := bench.Changes(n, keys, 1)
	names := make([]string, keys)
	for k := range names {
		names[k] = "object-" + strconv.Itoa(k)
	}
	last := make([]*obj, keys)
	s := &stream{cg: make([]watch.Event, n)}
	flat := make([]driver.Event[*obj], n)
	for i, c := range changes {
		rv := i + 1
		o := last[c.Key]
		if c.Type != driver.Deleted {
			o = &obj{ObjectMeta: metav1.ObjectMeta{Name: names[c.Key], ResourceVersion: strconv.Itoa(rv)},
				Org: "org-" + strconv.Itoa(c.Key%100), Team: "team-" + strconv.Itoa(c.Key%1000), N: rv}
			last[c.Key] = o
		}
		flat[i] = driver.Event[*obj]{Type: c.Type, Key: names[c.Key], Object: o, HasObject: true, RV: core.ResourceVersion(rv)}
		t := watch.Added
		switch c.Type {
		case driver.Modified:
			t = watch.Modified
		case driver.Deleted:
			t = watch.Deleted
		}
		s.cg[i] = watch.Event{Type: t, Object: o}
	}
	for i := 0; i < n; i += pipelineBatch {
		s.ours = append(s.ours, flat[i:min(i+pipelineBatch, n)])
	}
	return s
}

// --- ours: a ListerWatcher that lists nothing and plays the batches.

type oursLW struct{ s *stream }

func (l oursLW) List(context.Context, driver.ListSink[*obj]) (core.ResourceVersion, error) {
	return 0, nil
}

func (l oursLW) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[*obj]) error {
	// Batches hold pipelineBatch consecutive versions starting at 1, so a
	// reopened watch resumes at the batch after from.
	for _, b := range l.s.ours[int(from)/pipelineBatch:] {
		if err := opts.Emit(b); err != nil {
			return err
		}
	}
	<-ctx.Done()
	return driver.Stopped(ctx)
}

// --- client-go: a ListerWatcher whose watch.Interface is fed from the same
// events through a channel of watch.DefaultChanSize, like client-go's fake
// watcher (a real StreamWatcher's channel is unbuffered).

type cgLW struct{ s *stream }

func (l cgLW) List(metav1.ListOptions) (runtime.Object, error) {
	return &objList{ListMeta: metav1.ListMeta{ResourceVersion: "0"}}, nil
}

func (l cgLW) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	from, _ := strconv.Atoi(opts.ResourceVersion)
	w := &cgWatch{ch: make(chan watch.Event, watch.DefaultChanSize), stop: make(chan struct{})}
	go func() {
		defer close(w.ch)
		for _, ev := range l.s.cg[min(from, len(l.s.cg)):] {
			select {
			case w.ch <- ev:
			case <-w.stop:
				return
			}
		}
		<-w.stop
	}()
	return w, nil
}

// IsWatchListSemanticsUnSupported makes client-go's reflector List then
// Watch, as ours does, instead of a streaming watch-list.
func (l cgLW) IsWatchListSemanticsUnSupported() bool { return true }

type cgWatch struct {
	ch   chan watch.Event
	once sync.Once
	stop chan struct{}
}

func (w *cgWatch) ResultChan() <-chan watch.Event { return w.ch }
func (w *cgWatch) Stop()                          { w.once.Do(func() { close(w.stop) }) }

// BenchmarkPipeline: 1,000,000 changes (adds, updates, deletes over 100,000
// keys) through ListerWatcher → Reflector → FIFO → Indexer with two indexes
// → one handler, ours against client-go's SharedIndexInformer (its
// defaults: in-order FIFO), and against a bare loop (see bare below). One
// run is the whole stream; the handler counts notifications and the run
// ends when it has seen every change. The three sides alternate for 3
// rounds; each reports its medians.
func BenchmarkPipeline(b *testing.B) {
	n, keys := size(1_000_000, 20_000), size(100_000, 2_000)
	var (
		s       *stream
		done    chan struct{}
		seen    atomic.Int64
		cancel  context.CancelFunc
		runDone chan struct{}
		start   func()
		has     func(string) bool
	)
	count := func() {
		if seen.Add(1) == int64(n) {
			close(done)
		}
	}
	reset := func() {
		s = newStream(n, keys)
		seen.Store(0)
		done = make(chan struct{})
		runDone = make(chan struct{})
	}
	run := func() {
		start()
		<-done
	}
	finish := func() {
		cancel()
		<-runDone
		checkFinal(b, s, keys, has)
		s = nil
	}
	ours := side{name: "ours", n: n, unit: "event", peak: true, run: run, finish: finish,
		prepare: func() {
			reset()
			inf := core.NewSharedIndexInformer[*obj](oursLW{s}, core.InformerOptions[*obj]{
				Indexers: core.Indexers[*obj]{
					"org":  func(o *obj) ([]string, error) { return []string{o.Org}, nil },
					"team": func(o *obj) ([]string, error) { return []string{o.Team}, nil },
				},
			})
			if _, err := inf.AddEventHandler(core.ResourceEventHandlerFuncs[*obj]{
				AddFunc:    func(string, *obj, bool) { count() },
				UpdateFunc: func(string, *obj, *obj) { count() },
				DeleteFunc: func(string, *obj, bool) { count() },
			}); err != nil {
				b.Fatal(err)
			}
			var ctx context.Context
			ctx, cancel = context.WithCancel(context.Background())
			start = func() { go func() { _ = inf.Run(ctx); close(runDone) }() }
			has = func(k string) bool { _, ok := inf.Indexer().Get(k); return ok }
		}}
	clientgo := side{name: "clientgo", n: n, unit: "event", peak: true, run: run, finish: finish,
		prepare: func() {
			reset()
			inf := cache.NewSharedIndexInformer(cgLW{s}, &obj{}, 0, cache.Indexers{
				"org":  func(o any) ([]string, error) { return []string{o.(*obj).Org}, nil },
				"team": func(o any) ([]string, error) { return []string{o.(*obj).Team}, nil },
			})
			if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
				AddFunc:    func(any) { count() },
				UpdateFunc: func(any, any) { count() },
				DeleteFunc: func(any) { count() },
			}); err != nil {
				b.Fatal(err)
			}
			var ctx context.Context
			ctx, cancel = context.WithCancel(context.Background())
			start = func() { go func() { inf.RunWithContext(ctx); close(runDone) }() }
			has = func(k string) bool { _, ok, _ := inf.GetIndexer().GetByKey(k); return ok }
		}}
	// bare is the physical limit of this work on the machine: the same
	// events applied in one loop to a plain map and two
	// map[value]map[key]struct{} indexes, computed by the same index
	// functions, with no queue, no locking and no handlers.
	bare := side{name: "bare", n: n, unit: "event", peak: true,
		prepare: func() {
			reset()
			close(runDone)
			cancel = func() {}
		},
		run: func() {
			org := func(o *obj) ([]string, error) { return []string{o.Org}, nil }
			team := func(o *obj) ([]string, error) { return []string{o.Team}, nil }
			m := bareApply(s, org, team)
			has = func(k string) bool { _, ok := m[k]; return ok }
		},
		finish: finish}
	alternate(b, size(3, 1), ours, clientgo, bare)
}

// bareApply applies every event of s to a map and two indexes, the way
// the simplest correct single-goroutine program would.
func bareApply(s *stream, fs ...func(*obj) ([]string, error)) map[string]*obj {
	items := map[string]*obj{}
	indices := make([]map[string]map[string]struct{}, len(fs))
	for i := range indices {
		indices[i] = map[string]map[string]struct{}{}
	}
	for _, batch := range s.ours {
		for _, ev := range batch {
			old, existed := items[ev.Key]
			for i, f := range fs {
				idx := indices[i]
				var ov, nv []string
				if existed {
					ov, _ = f(old)
				}
				if ev.Type != driver.Deleted {
					nv, _ = f(ev.Object)
				}
				if slices.Equal(ov, nv) {
					continue
				}
				for _, v := range ov {
					if set := idx[v]; set != nil {
						delete(set, ev.Key)
						if len(set) == 0 {
							delete(idx, v)
						}
					}
				}
				for _, v := range nv {
					set := idx[v]
					if set == nil {
						set = map[string]struct{}{}
						idx[v] = set
					}
					set[ev.Key] = struct{}{}
				}
			}
			if ev.Type == driver.Deleted {
				delete(items, ev.Key)
			} else {
				items[ev.Key] = ev.Object
			}
		}
	}
	return items
}

// checkFinal asserts that the cache holds exactly the keys the stream left
// present, so that a fast but wrong pipeline cannot win.
func checkFinal(b *testing.B, s *stream, keys int, has func(string) bool) {
	b.Helper()
	present := map[string]bool{}
	for _, ev := range s.cg {
		o := ev.Object.(*obj)
		present[o.Name] = ev.Type != watch.Deleted
	}
	for k := range keys {
		name := "object-" + strconv.Itoa(k)
		if has(name) != present[name] {
			b.Fatalf("key %s: cached %v, want %v", name, has(name), present[name])
		}
	}
}

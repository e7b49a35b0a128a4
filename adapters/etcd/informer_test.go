package etcdinformer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// converge is the deadline for a cache to catch up with etcd: a bound for
// a wedged informer, not a performance target.
const converge = 60 * time.Second

// gatedLW wraps the adapter to count Lists and, when held, to keep the
// informer's watch down: Hold ends the running watch and makes Watch wait
// for Release.
type gatedLW struct {
	core.ListerWatcher[item]
	lists atomic.Int64

	mu      sync.Mutex
	held    chan struct{} // closed by Release; nil when not held
	stop    context.CancelFunc
	watches int
}

var errHeld = errors.New("watch held by the test")

func (g *gatedLW) ReportsProgress() bool {
	pr, ok := g.ListerWatcher.(core.ProgressReporter)
	return ok && pr.ReportsProgress()
}

func (g *gatedLW) List(ctx context.Context, sink core.ListSink[item]) (core.ResourceVersion, error) {
	g.lists.Add(1)
	return g.ListerWatcher.List(ctx, sink)
}

func (g *gatedLW) Watch(ctx context.Context, from core.ResourceVersion, opts core.WatchOptions[item]) error {
	for {
		g.mu.Lock()
		held := g.held
		if held == nil {
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			g.stop = cancel
			g.watches++
			g.mu.Unlock()
			err := g.ListerWatcher.Watch(wctx, from, opts)
			if ctx.Err() == nil && wctx.Err() != nil {
				return errHeld // Hold ended it; the informer retries
			}
			return err
		}
		g.mu.Unlock()
		select {
		case <-held:
		case <-ctx.Done():
			return core.Stopped(ctx)
		}
	}
}

func (g *gatedLW) Hold() {
	g.mu.Lock()
	g.held = make(chan struct{})
	stop := g.stop
	g.mu.Unlock()
	if stop != nil {
		stop()
	}
}

func (g *gatedLW) Release() {
	g.mu.Lock()
	close(g.held)
	g.held = nil
	g.mu.Unlock()
}

func (g *gatedLW) Watches() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.watches
}

// recorder is a handler that keeps every notification per key, and the
// errors the informer reported.
type recorder struct {
	mu     sync.Mutex
	events map[string][]string // key -> "add 3", "update 4", "delete 4", "delete? 4"
	errs   []error
}

func newRecorder() *recorder { return &recorder{events: make(map[string][]string)} }

func (r *recorder) add(key, what string) {
	r.mu.Lock()
	r.events[key] = append(r.events[key], what)
	r.mu.Unlock()
}

func (r *recorder) handler() core.ResourceEventHandler[item] {
	return core.ResourceEventHandlerFuncs[item]{
		AddFunc:    func(key string, obj item, _ bool) { r.add(key, fmt.Sprintf("add %d", obj.Version)) },
		UpdateFunc: func(key string, _, obj item) { r.add(key, fmt.Sprintf("update %d", obj.Version)) },
		DeleteFunc: func(key string, obj item, unknown bool) {
			if unknown {
				r.add(key, fmt.Sprintf("delete? %d", obj.Version))
				return
			}
			r.add(key, fmt.Sprintf("delete %d", obj.Version))
		},
	}
}

func (r *recorder) onError(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
}

// waitFor waits until key's notifications are want: handlers run on
// their own goroutines, after the cache was updated.
func (r *recorder) waitFor(t *testing.T, key string, want ...string) {
	t.Helper()
	deadline := time.Now().Add(converge)
	for {
		r.mu.Lock()
		got := strings.Join(r.events[key], ",")
		r.mu.Unlock()
		if got == strings.Join(want, ",") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: handler saw [%s], want %v", key, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *recorder) snapshot() (map[string][]string, []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ev := make(map[string][]string, len(r.events))
	for k, v := range r.events {
		ev[k] = append([]string(nil), v...)
	}
	return ev, append([]error(nil), r.errs...)
}

// runInformer starts inf and stops it (waiting for Run to return) at
// cleanup; it waits for the first sync.
func runInformer(t *testing.T, inf *core.SharedIndexInformer[item]) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("informer Run: %v", err)
		}
	})
	sctx, scancel := context.WithTimeout(ctx, converge)
	defer scancel()
	if err := inf.WaitForCacheSync(sctx); err != nil {
		t.Fatalf("WaitForCacheSync: %v", err)
	}
}

// etcdState reads the items under prefix straight from etcd.
func etcdState(t *testing.T, c *clientv3.Client, prefix string) (map[string]item, core.ResourceVersion) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), converge)
	defer cancel()
	resp, err := c.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("read %q from etcd: %v", prefix, err)
	}
	m := make(map[string]item, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var it item
		if err := json.Unmarshal(kv.Value, &it); err != nil {
			continue // undecodable values are not in the cache either
		}
		m[strings.TrimPrefix(string(kv.Key), prefix)] = it
	}
	return m, core.ResourceVersion(resp.Header.Revision)
}

func cacheState(inf *core.SharedIndexInformer[item]) map[string]item {
	m := make(map[string]item)
	inf.Indexer().Range(func(key string, obj item) bool {
		m[key] = obj
		return true
	})
	return m
}

// requireConverged waits until the cache has applied etcd's revision as
// read now, then requires the cache to equal the prefix.
func requireConverged(t *testing.T, inf *core.SharedIndexInformer[item], c *clientv3.Client, prefix string) map[string]item {
	t.Helper()
	want, rev := etcdState(t, c, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), converge)
	defer cancel()
	if err := inf.WaitFor(ctx, rev); err != nil {
		t.Fatalf("WaitFor(%d): %v", rev, err)
	}
	got := cacheState(inf)
	if !maps.Equal(got, want) {
		t.Fatalf("cache after WaitFor(%d) differs from etcd:\n cache %v\n etcd  %v", rev, got, want)
	}
	return got
}

func newLW(t testing.TB, c *clientv3.Client, prefix string, pageSize int64) *etcdinformer.Prefix[item] {
	t.Helper()
	lw, err := etcdinformer.NewPrefix(context.Background(), c, prefix, etcdinformer.Options[item]{PageSize: pageSize})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return lw
}

// TestInformerListUnderConcurrentWriters starts an informer while writers
// put and delete their own keys, then checks that every handler saw each
// key's changes after its first sighting without a gap or a repeat, and
// that the cache equals the prefix.
func TestInformerListUnderConcurrentWriters(t *testing.T) {
	srv := harness.StartEtcd(t)
	c := srv.Client(t)
	prefix := uniquePrefix("writers")
	ctx, cancel := context.WithTimeout(context.Background(), 5*converge)
	defer cancel()

	// Enough keys for many pages of 7, so that the List takes a while and
	// writes land between its pages.
	for i := 0; i < 200; i++ {
		if _, err := putItem(ctx, c, fmt.Sprintf("%sseed-%03d", prefix, i), item{Version: 1}); err != nil {
			t.Fatal(err)
		}
	}

	// Each writer owns its keys. A key's operations are numbered 1, 2, ...;
	// every 5th is a delete, the others put the operation's number, so a
	// put of n follows either a put of n-1 or a delete that came after a
	// put of n-2.
	const writers, keysPerWriter, opsPerWriter = 4, 5, 150
	var wg sync.WaitGroup
	writeErr := make(chan error, writers)
	started := make(chan struct{})
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := make([]int, keysPerWriter)
			for op := 0; op < opsPerWriter; op++ {
				if op == 10 && w == 0 {
					close(started)
				}
				k := op % keysPerWriter
				n[k]++
				key := fmt.Sprintf("%sw%d-k%d", prefix, w, k)
				var err error
				if n[k]%5 == 0 {
					_, err = c.Delete(ctx, key)
				} else {
					_, err = putItem(ctx, c, key, item{Version: n[k]})
				}
				if err != nil {
					writeErr <- err
					return
				}
			}
		}()
	}

	<-started
	rec := newRecorder()
	inf := core.NewSharedIndexInformer[item](newLW(t, c, prefix, 7), core.InformerOptions[item]{Name: "writers", ErrorHandler: rec.onError})
	reg, err := inf.AddEventHandler(rec.handler())
	if err != nil {
		t.Fatal(err)
	}
	runInformer(t, inf)
	wg.Wait()
	close(writeErr)
	for err := range writeErr {
		t.Fatalf("writer: %v", err)
	}
	requireConverged(t, inf, c, prefix)
	// The cache is up to date; let the handler catch up with it.
	for deadline := time.Now().Add(converge); reg.Pending() > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("handler still has %d notifications pending", reg.Pending())
		}
	}

	events, errs := rec.snapshot()
	for _, err := range errs {
		t.Errorf("informer reported: %v", err)
	}
	checked := 0
	for key, seq := range events {
		if strings.HasPrefix(key, "seed-") {
			if len(seq) != 1 || seq[0] != "add 1" {
				t.Errorf("seed key %s: %v, want one add", key, seq)
			}
			continue
		}
		checked++
		// After the first sighting, every change must be the next one.
		last, deleted := -1, false
		for i, ev := range seq {
			var kind string
			var v int
			if _, err := fmt.Sscanf(ev, "%s %d", &kind, &v); err != nil {
				t.Fatalf("%s: bad record %q", key, ev)
			}
			switch {
			case i == 0:
			case kind == "delete?":
				t.Errorf("%s: delete inferred by a relist, but nothing should have been relisted: %v", key, seq)
			case kind == "delete":
				if deleted || v != last {
					t.Errorf("%s: %s after version %d (deleted %v): %v", key, ev, last, deleted, seq)
				}
			case deleted:
				if kind != "add" || v != last+2 {
					t.Errorf("%s: %s after the delete of version %d: %v", key, ev, last, seq)
				}
			default:
				if kind != "update" || v != last+1 {
					t.Errorf("%s: %s after version %d: %v", key, ev, last, seq)
				}
			}
			deleted = kind == "delete"
			last = v
		}
	}
	if checked != writers*keysPerWriter {
		t.Errorf("handler saw %d writer keys, want %d", checked, writers*keysPerWriter)
	}
}

// TestInformerResumesAfterServerRestart stops etcd under a running
// informer and starts it again on the same data dir: the informer must
// carry on from its last revision without listing again.
func TestInformerResumesAfterServerRestart(t *testing.T) {
	srv := harness.StartEtcd(t)
	c := srv.Client(t)
	prefix := uniquePrefix("restart")
	ctx, cancel := context.WithTimeout(context.Background(), 5*converge)
	defer cancel()
	for i := 0; i < 10; i++ {
		if _, err := putItem(ctx, c, fmt.Sprintf("%sk%d", prefix, i), item{Version: 1}); err != nil {
			t.Fatal(err)
		}
	}
	lw := &gatedLW{ListerWatcher: newLW(t, c, prefix, 0)}
	rec := newRecorder()
	inf := core.NewSharedIndexInformer[item](lw, core.InformerOptions[item]{
		Name:         "restart",
		ErrorHandler: rec.onError,
		Backoff:      core.Backoff{Initial: 50 * time.Millisecond, Max: time.Second},
	})
	if _, err := inf.AddEventHandler(rec.handler()); err != nil {
		t.Fatal(err)
	}
	runInformer(t, inf)
	for i := 0; i < 5; i++ {
		if _, err := putItem(ctx, c, fmt.Sprintf("%sk%d", prefix, i), item{Version: 2}); err != nil {
			t.Fatal(err)
		}
	}
	requireConverged(t, inf, c, prefix)

	srv.Stop()
	srv.Restart(t)
	for i := 3; i < 8; i++ {
		if _, err := putItem(ctx, c, fmt.Sprintf("%sk%d", prefix, i), item{Version: 3}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Delete(ctx, prefix+"k9"); err != nil {
		t.Fatal(err)
	}
	got := requireConverged(t, inf, c, prefix)
	if got["k7"].Version != 3 || got["k0"].Version != 2 || len(got) != 9 {
		t.Fatalf("cache after restart: %v", got)
	}
	if n := lw.lists.Load(); n != 1 {
		t.Fatalf("informer listed %d times, want 1 (the restart must resume the watch, not relist)", n)
	}
	rec.waitFor(t, "k9", "add 1", "delete 1") // the delete carries the last object
	rec.waitFor(t, "k4", "add 1", "update 2", "update 3")
	rec.waitFor(t, "k0", "add 1", "update 2")
}

// TestInformerRelistsAfterCompaction keeps the informer's watch down while
// keys change and etcd compacts past the informer's revision: the watch
// then expires, the informer relists, and keys deleted meanwhile leave the
// cache as deletes.
func TestInformerRelistsAfterCompaction(t *testing.T) {
	srv := harness.StartEtcd(t)
	c := srv.Client(t)
	prefix := uniquePrefix("compact")
	ctx, cancel := context.WithTimeout(context.Background(), 5*converge)
	defer cancel()
	for _, k := range []string{"a", "b", "c"} {
		if _, err := putItem(ctx, c, prefix+k, item{Version: 1}); err != nil {
			t.Fatal(err)
		}
	}
	lw := &gatedLW{ListerWatcher: newLW(t, c, prefix, 0)}
	rec := newRecorder()
	inf := core.NewSharedIndexInformer[item](lw, core.InformerOptions[item]{
		Name:         "compact",
		ErrorHandler: rec.onError,
		Backoff:      core.Backoff{Initial: 50 * time.Millisecond, Max: time.Second},
	})
	if _, err := inf.AddEventHandler(rec.handler()); err != nil {
		t.Fatal(err)
	}
	runInformer(t, inf)
	requireConverged(t, inf, c, prefix)
	applied := inf.AppliedVersion()

	lw.Hold()
	if _, err := c.Delete(ctx, prefix+"b"); err != nil {
		t.Fatal(err)
	}
	if _, err := putItem(ctx, c, prefix+"a", item{Version: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := putItem(ctx, c, prefix+"d", item{Version: 1}); err != nil {
		t.Fatal(err)
	}
	head := srv.Head(t)
	srv.Compact(t, head)
	if core.ResourceVersion(head) <= applied {
		t.Fatalf("compacted at %d, not past the informer's %d", head, applied)
	}
	lw.Release()

	got := requireConverged(t, inf, c, prefix)
	if _, ok := got["b"]; ok || got["a"].Version != 2 || got["d"].Version != 1 {
		t.Fatalf("cache after relist: %v", got)
	}
	if n := lw.lists.Load(); n != 2 {
		t.Fatalf("informer listed %d times, want 2 (the first list and the relist after expiry)", n)
	}
	rec.waitFor(t, "b", "add 1", "delete? 1") // a delete inferred by the relist
	rec.waitFor(t, "d", "add 1")
	_, errs := rec.snapshot()
	expired := false
	for _, err := range errs {
		if errors.Is(err, core.ErrExpired) {
			expired = true
			if !strings.Contains(err.Error(), prefix) {
				t.Errorf("expired error does not name the prefix %q: %v", prefix, err)
			}
		}
	}
	if !expired {
		t.Fatalf("no expired error reported; errors: %v", errs)
	}
}

// TestInformerReadYourWrites: after WaitFor(R) for the revision R of a
// write, the lister sees the write; WaitFor also returns for a revision
// written under another prefix, which only a progress request reaches
// (the server's periodic notifications are turned off here).
func TestInformerReadYourWrites(t *testing.T) {
	srv := harness.StartEtcdWith(t, harness.EtcdOptions{ProgressNotifyInterval: time.Hour})
	c := srv.Client(t)
	prefix := uniquePrefix("ryw")
	ctx, cancel := context.WithTimeout(context.Background(), converge)
	defer cancel()
	inf := core.NewSharedIndexInformer[item](newLW(t, c, prefix, 0), core.InformerOptions[item]{Name: "ryw"})
	runInformer(t, inf)
	lister := inf.Lister()

	for i := 1; i <= 20; i++ {
		rev, err := putItem(ctx, c, prefix+"counter", item{Version: i})
		if err != nil {
			t.Fatal(err)
		}
		if err := inf.WaitFor(ctx, rev); err != nil {
			t.Fatalf("WaitFor(%d): %v", rev, err)
		}
		got, ok := lister.Get("counter")
		if !ok || got.Version != i {
			t.Fatalf("after WaitFor(%d) the lister has %v (present %v), want version %d", rev, got, ok, i)
		}
	}

	other, err := putItem(ctx, c, prefix[:len(prefix)-1]+"-elsewhere/x", item{Version: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := inf.WaitFor(ctx, other); err != nil {
		t.Fatalf("WaitFor(%d) for a write under another prefix: %v", other, err)
	}
	if av := inf.AppliedVersion(); av < other {
		t.Fatalf("WaitFor(%d) returned with AppliedVersion %d", other, av)
	}
	if _, ok := lister.Get("x"); ok {
		t.Fatal("a key of another prefix is in the cache")
	}
}

// TestInformerUndecodableValue: a value that is not JSON is reported with
// the prefix, key and revision (not its bytes), the rest of the cache stays
// right, and a later good value for the key is applied.
func TestInformerUndecodableValue(t *testing.T) {
	srv := harness.StartEtcd(t)
	c := srv.Client(t)
	prefix := uniquePrefix("bad")
	ctx, cancel := context.WithTimeout(context.Background(), converge)
	defer cancel()
	if _, err := putItem(ctx, c, prefix+"good", item{Version: 1}); err != nil {
		t.Fatal(err)
	}
	const secret = "password=hunter2"
	listed, err := c.Put(ctx, prefix+"bad-listed", secret)
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	inf := core.NewSharedIndexInformer[item](newLW(t, c, prefix, 0), core.InformerOptions[item]{Name: "bad", ErrorHandler: rec.onError})
	runInformer(t, inf)

	watched, err := c.Put(ctx, prefix+"bad-watched", secret)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := putItem(ctx, c, prefix+"after", item{Version: 7}); err != nil {
		t.Fatal(err)
	}
	requireConverged(t, inf, c, prefix)

	_, errs := rec.snapshot()
	want := map[string]int64{"bad-listed": listed.Header.Revision, "bad-watched": watched.Header.Revision}
	for _, err := range errs {
		var de *core.DecodeError
		if !errors.As(err, &de) {
			t.Errorf("unexpected error: %v", err)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error shows the value: %v", err)
		}
		if !strings.Contains(err.Error(), prefix) {
			t.Errorf("error does not name the prefix %q: %v", prefix, err)
		}
		if rev, ok := want[de.Key]; !ok || int64(de.RV) != rev {
			t.Errorf("decode error for key %q at %d; want one of %v", de.Key, de.RV, want)
		}
		delete(want, de.Key)
	}
	if len(want) != 0 {
		t.Fatalf("no decode error for %v; errors: %v", want, errs)
	}

	rev, err := putItem(ctx, c, prefix+"bad-watched", item{Version: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := inf.WaitFor(ctx, core.ResourceVersion(rev)); err != nil {
		t.Fatal(err)
	}
	if got, ok := inf.Lister().Get("bad-watched"); !ok || got.Version != 3 {
		t.Fatalf("fixed value not applied: %v %v", got, ok)
	}
}

package conformance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

// Capabilities tells the suite what the source promises beyond the
// contract's minimum. The zero value is the most conservative: it asserts
// only what every source must do.
type Capabilities struct {
	// DeletesCarryObject: deletes report HasObject=true with the last
	// object (etcd PrevKV, REPLICA IDENTITY FULL, Kubernetes). When false a
	// delete may still carry it, and then it must be the right one.
	DeletesCarryObject bool
	// DistinguishesUpdate: a put of a new key is reported Added and a put
	// of an existing key Modified (etcd by the key's version, Postgres
	// INSERT vs UPDATE, Kubernetes). When false either type is accepted for
	// a put (a NATS KV message does not say whether the key existed).
	DistinguishesUpdate bool
	// ExactWriteRV: the RV Put and Delete return is exactly the RV the
	// watch reports for that write (etcd, NATS, Kubernetes). When false the
	// suite requires only what read-your-writes needs: the event's RV is
	// after the RV of the previous write and at or before the write's own
	// RV (Postgres, where the writer sees an LSN at or after the commit).
	// A Harness whose server does not return the version of a write (a
	// Kubernetes delete returns the object as it was) can return a version
	// read just after the write, such as the RV of a List, with
	// ExactWriteRV false.
	ExactWriteRV bool
	// BatchStartRV (with ExactWriteRV false): a change's event may carry
	// any version after what the watch delivered before its batch, up to
	// the write's own RV, not necessarily after the previous write's: a
	// source that cannot tell a change from earlier ones it superseded
	// unseen (a relay's sharded Downstream) gives the changes of a batch
	// the batch's first version, so that read-your-writes holds for the
	// superseded ones too.
	BatchStartRV bool
	// StrictGoroutines: once Watch has returned, every goroutine started
	// since it was called has ended. Leave it
	// false when the client keeps connection goroutines alive between
	// watches.
	StrictGoroutines bool
	// IgnoreGoroutines lists substrings of goroutine stacks that the
	// StrictGoroutines check does not count, such as the package path of
	// a server embedded in the test process
	// ("go.etcd.io/etcd/server/v3"), whose goroutines are not the
	// adapter's.
	IgnoreGoroutines []string
	// Timeout bounds each wait for the source: one List, one write, the
	// next expected event, Watch returning after its context ends. It is a deadline
	// for a wedged source, not a performance target. Zero means 30s.
	Timeout time.Duration
	// BookmarkTimeout bounds the wait for a bookmark the source sends on
	// its own, used when the ListerWatcher does not report progress on
	// request (driver.ProgressReporter). Zero means 2 minutes (a Kubernetes apiserver
	// sends a watch bookmark about once a minute).
	BookmarkTimeout time.Duration
}

func (c Capabilities) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return 30 * time.Second
}

func (c Capabilities) bookmarkTimeout() time.Duration {
	if c.BookmarkTimeout > 0 {
		return c.BookmarkTimeout
	}
	return 2 * time.Minute
}

// tb is the part of testing.TB the cases use. It is an interface of our own
// so that the suite's tests can run a case on a recorder and check that a
// broken source makes it fail. Fatalf must not return (testing.T calls
// runtime.Goexit).
type tb interface {
	Helper()
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Failed() bool
	Cleanup(func())
}

var _ tb = (*testing.T)(nil)

type testCase[T any] struct {
	name string
	run  func(e *env[T])
}

// Run runs every case as a subtest; newHarness is called once per subtest
// and returns a fresh, empty Harness (its cleanup registered with
// t.Cleanup).
//
// Cases run one after another, never in parallel, so that a shared server
// sees one case at a time. A single case runs with the usual filter, e.g.
// go test -run 'TestConformance/Expired'. A case the harness cannot support
// (no Expirer, no Transactor...) logs why and passes; a case never skips.
func Run[T any](t *testing.T, caps Capabilities, newHarness func(t *testing.T) Harness[T]) {
	t.Helper()
	for _, c := range cases[T]() {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			if h == nil {
				t.Fatalf("newHarness returned nil")
			}
			runCase(t, caps, h, c.run)
		})
	}
}

// runCase runs one case against h, reporting through t. Every watch the
// case opens is cancelled, and waited for, by t's cleanup.
func runCase[T any](t tb, caps Capabilities, h Harness[T], run func(e *env[T])) {
	ctx, cancel := context.WithCancel(context.Background())
	e := &env[T]{t: t, caps: caps, h: h, lw: h.ListerWatcher(), ctx: ctx, live: make(map[string]int64), written: make(map[string]string)}
	t.Cleanup(cancel)
	run(e)
}

// write is one write the suite made, with what the watch must report for it.
type write struct {
	key   string
	n     int64            // version written; for a delete, the last version
	typ   driver.EventType // Added, Modified or Deleted as the source saw it
	rv    core.ResourceVersion
	after core.ResourceVersion // RV of the writer's previous write: the event's RV is above it
}

func (w write) String() string {
	if w.typ == driver.Deleted {
		return fmt.Sprintf("delete %q (last version %d) at RV %d", w.key, w.n, w.rv)
	}
	return fmt.Sprintf("put %q version %d (%s) at RV %d", w.key, w.n, w.typ, w.rv)
}

// env is the state of one case: the harness, the serial history of the
// suite's writes, and the model of what is live.
type env[T any] struct {
	t    tb
	caps Capabilities
	h    Harness[T]
	lw   driver.ListerWatcher[T]
	ctx  context.Context // lives as long as the case

	writes   []write
	live     map[string]int64 // key -> version, for keys that exist
	sentinel int
	written  map[string]string // event key -> suite key, for every key eventKey saw
}

// eventKey is the key the ListerWatcher reports for the suite's key. Only
// the case's goroutine may call it: it records the mapping for suiteKey.
func (e *env[T]) eventKey(key string) string {
	ek := key
	if m, ok := e.h.(KeyMapper); ok {
		ek = m.EventKey(key)
	}
	e.written[ek] = key
	return ek
}

// suiteKey maps a reported key back to the key the suite wrote; a key
// the suite never wrote comes back unchanged.
func (e *env[T]) suiteKey(ek string) string {
	if k, ok := e.written[ek]; ok {
		return k
	}
	return ek
}

// opCtx bounds one operation on the source.
func (e *env[T]) opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(e.ctx, e.caps.timeout())
}

func (e *env[T]) lastRV() core.ResourceVersion {
	if len(e.writes) == 0 {
		return 0
	}
	return e.writes[len(e.writes)-1].rv
}

func (e *env[T]) record(w write, err error) write {
	e.t.Helper()
	if err != nil {
		e.t.Fatalf("Harness: %s: %v", w, err)
	}
	if prev := e.lastRV(); len(e.writes) > 0 && w.rv <= prev {
		e.t.Fatalf("Harness: %s returned RV %d, not after the previous write's RV %d; the suite needs every write to return a later RV", w, w.rv, prev)
	}
	w.after = e.lastRV()
	e.writes = append(e.writes, w)
	return w
}

func (e *env[T]) put(key string, n int64) write {
	e.t.Helper()
	e.eventKey(key)
	ctx, cancel := e.opCtx()
	defer cancel()
	typ := driver.Added
	if _, ok := e.live[key]; ok {
		typ = driver.Modified
	}
	rv, err := e.h.Put(ctx, key, n)
	w := e.record(write{key: key, n: n, typ: typ, rv: rv}, err)
	e.live[key] = n
	return w
}

func (e *env[T]) del(key string) write {
	e.t.Helper()
	last, ok := e.live[key]
	if !ok {
		e.t.Fatalf("suite bug: delete of absent key %q", key)
	}
	ctx, cancel := e.opCtx()
	defer cancel()
	rv, err := e.h.Delete(ctx, key)
	w := e.record(write{key: key, n: last, typ: driver.Deleted, rv: rv}, err)
	delete(e.live, key)
	return w
}

// list runs List and checks what every List must satisfy. It returns the
// listed versions by key.
func (e *env[T]) list() (map[string]int64, core.ResourceVersion) {
	e.t.Helper()
	ctx, cancel := e.opCtx()
	defer cancel()
	got := make(map[string]int64)
	var bad []string
	type itemRV struct {
		key string
		rv  core.ResourceVersion
	}
	var items []itemRV // checked once the List's RV is known
	rv, err := e.lw.List(ctx, driver.ListSink[T]{Emit: func(ev driver.Event[T]) error {
		switch {
		case ev.Err != nil:
			bad = append(bad, fmt.Sprintf("item %q has Err: %v", ev.Key, ev.Err))
		case ev.Type != driver.Added:
			bad = append(bad, fmt.Sprintf("item %q has type %s, want Added", ev.Key, ev.Type))
		case ev.Key == "":
			bad = append(bad, "item with an empty key")
		case !ev.HasObject:
			bad = append(bad, fmt.Sprintf("item %q has HasObject false", ev.Key))
		default:
			k := e.suiteKey(ev.Key)
			if _, dup := got[k]; dup {
				bad = append(bad, fmt.Sprintf("item %q emitted twice", ev.Key))
			}
			got[k] = e.h.Version(ev.Object)
			items = append(items, itemRV{ev.Key, ev.RV})
		}
		return nil
	}})
	if err != nil {
		e.t.Fatalf("List: %v", err)
	}
	for _, it := range items {
		if it.rv > rv {
			bad = append(bad, fmt.Sprintf("item %q carries RV %d, after the List's RV %d", it.key, it.rv, rv))
		}
	}
	for _, b := range bad {
		e.t.Errorf("List: %s", b)
	}
	return got, rv
}

// checkListed compares a List taken while no write was in flight with the
// model.
func (e *env[T]) checkListed(got map[string]int64, rv core.ResourceVersion) {
	e.t.Helper()
	for k, n := range got {
		if want, ok := e.live[k]; !ok {
			e.t.Errorf("List returned %q (version %d), which does not exist", k, n)
		} else if n != want {
			e.t.Errorf("List returned %q at version %d, want %d", k, n, want)
		}
	}
	for k, n := range e.live {
		if _, ok := got[k]; !ok {
			e.t.Errorf("List is missing %q (version %d)", k, n)
		}
	}
	if len(e.writes) > 0 {
		last := e.writes[len(e.writes)-1]
		if e.caps.ExactWriteRV && rv < last.rv {
			e.t.Errorf("List returned RV %d, before the RV %d of the last completed write (%s)", rv, last.rv, last)
		} else if rv <= last.after {
			e.t.Errorf("List returned RV %d, not after RV %d, which precedes the last completed write (%s)", rv, last.after, last)
		}
	}
}

// watch opens a watch from `from`; next is the index in e.writes of the
// first write it must deliver. The watch runs in its own goroutine until
// the reader is stopped (or the case ends); its batches are copied and
// queued for the case to read.
func (e *env[T]) watch(from core.ResourceVersion, next int) *reader[T] {
	e.t.Helper()
	return e.watchWith(from, next, nil)
}

// watchWith is watch with a hook that runs inside Emit, after the batch
// was queued; its result is Emit's.
func (e *env[T]) watchWith(from core.ResourceVersion, next int, hook func(ctx context.Context, batch []driver.Event[T]) error) *reader[T] {
	e.t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	r := &reader[T]{
		e: e, from: from, floor: from, next: next,
		cancel:   cancel,
		ctx:      ctx,
		hook:     hook,
		progress: make(chan struct{}, 1),
		notify:   make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
	go func() {
		defer close(r.done)
		err := e.lw.Watch(ctx, from, driver.WatchOptions[T]{Emit: r.emit, Progress: r.progress})
		r.mu.Lock()
		r.err = err
		r.returned = true
		r.mu.Unlock()
	}()
	e.t.Cleanup(func() {
		cancel()
		timer := time.NewTimer(e.caps.timeout())
		defer timer.Stop()
		select {
		case <-r.done:
		case <-timer.C:
			e.t.Errorf("Watch(%d) did not return within %s after its context was cancelled", from, e.caps.timeout())
		}
		r.reportEmitFaults()
	})
	return r
}

// watchAfter watches from the RV of write i, expecting the writes after it.
func (e *env[T]) watchAfter(i int) *reader[T] {
	e.t.Helper()
	return e.watch(e.writes[i].rv, i+1)
}

package memory_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type obj struct{ N int }

// pullWatch turns one push-style Watch into calls a test makes in its own
// order: Next takes the next emitted batch (Emit returns once a Next took
// it), RequestProgress queues one progress request, Stop cancels the watch
// and waits for Watch to return. entered is closed when Emit is first
// called.
type pullWatch struct {
	cancel   context.CancelFunc
	entered  chan struct{}
	batches  chan []driver.Event[obj]
	progress chan struct{}
	done     chan struct{}
	err      error // Watch's result, set before done is closed
}

func startWatch(ctx context.Context, s *memory.Source[obj], from core.ResourceVersion) *pullWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &pullWatch{cancel: cancel, entered: make(chan struct{}), batches: make(chan []driver.Event[obj]), progress: make(chan struct{}, 1), done: make(chan struct{})}
	var once sync.Once
	go func() {
		defer close(w.done)
		w.err = s.Watch(ctx, from, driver.WatchOptions[obj]{
			Emit: func(b []driver.Event[obj]) error {
				once.Do(func() { close(w.entered) })
				select {
				case w.batches <- slices.Clone(b):
					return nil
				case <-ctx.Done():
					return driver.Stopped(ctx)
				}
			},
			Progress: w.progress,
		})
	}()
	return w
}

// Next returns the next batch, or Watch's error once it returned.
func (w *pullWatch) Next(ctx context.Context) ([]driver.Event[obj], error) {
	select {
	case b := <-w.batches:
		return b, nil
	case <-w.done:
		return nil, w.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (w *pullWatch) RequestProgress() {
	select {
	case w.progress <- struct{}{}:
	default:
	}
}

func (w *pullWatch) Stop() {
	w.cancel()
	<-w.done
}

// next calls Next with a deadline that only a wedged watch reaches.
func next(t *testing.T, w *pullWatch) []driver.Event[obj] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := w.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return b
}

// ended drains the watch's batches until Watch returns and returns its
// error.
func ended(t *testing.T, w *pullWatch) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		_, err := w.Next(ctx)
		if ctx.Err() != nil {
			t.Fatalf("the watch did not end: %v", ctx.Err())
		}
		if err != nil {
			return err
		}
	}
}

// watchErr calls Watch where it is expected to fail at once.
func watchErr(s *memory.Source[obj], from core.ResourceVersion) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return s.Watch(ctx, from, driver.WatchOptions[obj]{Emit: func([]driver.Event[obj]) error {
		return errors.New("a watch that should have failed emitted")
	}})
}

func watch(t *testing.T, s *memory.Source[obj], from core.ResourceVersion) *pullWatch {
	t.Helper()
	w := startWatch(context.Background(), s, from)
	t.Cleanup(w.Stop)
	return w
}

// quiet checks that the watch has nothing pending: a progress request is
// answered by a lone Bookmark at the head only once every pending event
// was emitted.
func quiet(t *testing.T, s *memory.Source[obj], w *pullWatch) error {
	t.Helper()
	head := s.HeadRV()
	w.RequestProgress()
	b := next(t, w)
	if len(b) != 1 || b[0].Type != driver.Bookmark || b[0].RV < head {
		return fmt.Errorf("pending: %s", fmtBatch(b))
	}
	return nil
}

func fmtBatch(b []driver.Event[obj]) string {
	s := ""
	for i, ev := range b {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%s:%s@%d", ev.Type, ev.Key, ev.RV)
		if ev.HasObject {
			s += fmt.Sprintf("=%d", ev.Object.N)
		}
	}
	return s
}

func TestWriteTypesAndVersions(t *testing.T) {
	s := memory.New[obj](memory.Options{})
	w := watch(t, s, 0)
	if rv := s.Put("a", obj{1}); rv != 1 {
		t.Errorf("first Put returned RV %d, want 1", rv)
	}
	s.Put("a", obj{2})
	if rv, ok := s.Delete("a"); rv != 3 || !ok {
		t.Errorf("Delete(a) = %d, %t; want 3, true", rv, ok)
	}
	if rv, ok := s.Delete("a"); rv != 3 || ok {
		t.Errorf("Delete of an absent key = %d, %t; want the head 3 and false", rv, ok)
	}
	got := fmtBatch(next(t, w))
	if want := "Added:a@1=1 Modified:a@2=2 Deleted:a@3=2"; got != want {
		t.Errorf("events %s, want %s", got, want)
	}
}

func TestApplyIsOneTransaction(t *testing.T) {
	// MaxBatch 1 would split a three-event transaction if it could.
	s := memory.New[obj](memory.Options{MaxBatch: 1})
	s.Put("a", obj{1})
	s.Put("c", obj{1})
	w := watch(t, s, s.HeadRV())
	rv, err := s.Apply(memory.PutOp("a", obj{2}), memory.PutOp("b", obj{1}), memory.DeleteOp[obj]("c"), memory.DeleteOp[obj]("absent"))
	if err != nil || rv != 3 {
		t.Fatalf("Apply = %d, %v; want 3, nil", rv, err)
	}
	s.Put("d", obj{1})
	if got, want := fmtBatch(next(t, w)), "Modified:a@3=2 Added:b@3=1 Deleted:c@3=1"; got != want {
		t.Errorf("first batch %s, want the whole transaction %s", got, want)
	}
	if got, want := fmtBatch(next(t, w)), "Added:d@4=1"; got != want {
		t.Errorf("second batch %s, want %s", got, want)
	}
}

func TestApplyRejectsDuplicateKeysAndNoOps(t *testing.T) {
	s := memory.New[obj](memory.Options{})
	if _, err := s.Apply(memory.PutOp("a", obj{1}), memory.DeleteOp[obj]("a")); !errors.Is(err, memory.ErrDuplicateKey) {
		t.Errorf("Apply with a key twice: %v, want ErrDuplicateKey", err)
	}
	if rv, err := s.Apply(memory.DeleteOp[obj]("absent")); rv != 0 || err != nil {
		t.Errorf("Apply of only no-op deletes = %d, %v; want the unchanged head 0", rv, err)
	}
	if s.Len() != 0 || s.HeadRV() != 0 {
		t.Errorf("after rejected and no-op transactions: %d keys at head %d, want none at 0", s.Len(), s.HeadRV())
	}
}

func TestListSnapshot(t *testing.T) {
	s := memory.New[obj](memory.Options{})
	s.Put("b", obj{1})
	s.Put("a", obj{1})
	s.Put("b", obj{2})
	s.Advance()
	var got []driver.Event[obj]
	var estimate int64 = -1
	rv, err := s.List(context.Background(), driver.ListSink[obj]{
		Emit:     func(ev driver.Event[obj]) error { got = append(got, ev); return nil },
		Estimate: func(n int64) { estimate = n },
	})
	if err != nil || rv != 4 {
		t.Fatalf("List = %d, %v; want the head 4", rv, err)
	}
	if g, want := fmtBatch(got), "Added:a@2=1 Added:b@3=2"; g != want {
		t.Errorf("List emitted %s, want %s (key order, RV of each key's last write)", g, want)
	}
	if estimate != 2 {
		t.Errorf("Estimate got %d, want 2", estimate)
	}
	boom := errors.New("boom")
	calls := 0
	if _, err := s.List(context.Background(), driver.ListSink[obj]{Emit: func(driver.Event[obj]) error { calls++; return boom }}); !errors.Is(err, boom) || calls != 1 {
		t.Errorf("List with failing Emit: %v after %d calls, want boom after 1", err, calls)
	}
	if items, at := s.Items(); len(items) != 2 || items["a"].N != 1 || items["b"].N != 2 || at != 4 {
		t.Errorf("Items = %v at %d, want a=1 b=2 at 4", items, at)
	}
}

func TestCompactExpires(t *testing.T) {
	// MaxBatch 1: a watch nobody reads has taken at most the first event.
	s := memory.New[obj](memory.Options{MaxBatch: 1})
	s.Put("a", obj{1})
	s.Put("a", obj{2})
	behind := watch(t, s, 0)
	caughtUp := watch(t, s, 0)
	next(t, caughtUp)
	next(t, caughtUp)
	s.Put("a", obj{3})
	if err := s.Compact(5); !errors.Is(err, memory.ErrFutureVersion) {
		t.Errorf("Compact past the head: %v, want ErrFutureVersion", err)
	}
	if err := s.Compact(2); err != nil {
		t.Fatal(err)
	}
	if err := watchErr(s, 1); !errors.Is(err, driver.ErrExpired) {
		t.Errorf("Watch(1) after Compact(2): %v, want ErrExpired", err)
	}
	if err := ended(t, behind); !errors.Is(err, driver.ErrExpired) {
		t.Errorf("a watch behind the compaction: %v, want ErrExpired", err)
	}
	if got, want := fmtBatch(next(t, caughtUp)), "Modified:a@3=3"; got != want {
		t.Errorf("a watch at the compacted version got %s, want %s", got, want)
	}
	if got, want := fmtBatch(next(t, watch(t, s, 2))), "Modified:a@3=3"; got != want {
		t.Errorf("Watch(2) after Compact(2) got %s, want %s", got, want)
	}
	if err := s.Compact(0); err != nil || s.CompactedRV() != 2 {
		t.Errorf("Compact to an earlier version: %v, compacted %d; want no error and still 2", err, s.CompactedRV())
	}
}

func TestProgressBookmark(t *testing.T) {
	s := memory.New[obj](memory.Options{})
	s.Put("a", obj{1})
	w := watch(t, s, 0)
	s.Advance()
	s.Advance()
	w.RequestProgress()
	// The pending event comes first, then the bookmark at the head that
	// Advance moved past it (in one batch or two).
	var got []driver.Event[obj]
	for len(got) == 0 || got[len(got)-1].Type != driver.Bookmark {
		got = append(got, next(t, w)...)
	}
	if got, want := fmtBatch(got), "Added:a@1=1 Bookmark:@3"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	s.NotifyProgress()
	if got, want := fmtBatch(next(t, w)), "Bookmark:@3"; got != want {
		t.Errorf("after NotifyProgress got %s, want %s", got, want)
	}
	s.Put("b", obj{1})
	if got, want := fmtBatch(next(t, w)), "Added:b@4=1"; got != want {
		t.Errorf("a bookmark is answered once: got %s, want %s", got, want)
	}
	// A watch from a future version never sees its position go back.
	future := watch(t, s, 10)
	future.RequestProgress()
	if got, want := fmtBatch(next(t, future)), "Bookmark:@10"; got != want {
		t.Errorf("bookmark of a watch from the future: %s, want %s", got, want)
	}
}

func TestDeletesWithoutObject(t *testing.T) {
	s := memory.New[obj](memory.Options{DeletesWithoutObject: true})
	s.Put("a", obj{1})
	s.Delete("a")
	if got, want := fmtBatch(next(t, watch(t, s, 1))), "Deleted:a@2"; got != want {
		t.Errorf("got %s, want %s (no object)", got, want)
	}
}

func TestInjectDecodeError(t *testing.T) {
	s := memory.New[obj](memory.Options{Name: "fake"})
	s.Put("a", obj{1})
	cause := errors.New("bad bytes")
	rv := s.InjectDecodeError("a", cause)
	s.Put("b", obj{1})
	b := next(t, watch(t, s, 1))
	if len(b) != 2 {
		t.Fatalf("got %s, want the bad event then b", fmtBatch(b))
	}
	var de *driver.DecodeError
	if !errors.As(b[0].Err, &de) || de.Key != "a" || de.RV != rv || de.Source != "fake" || !errors.Is(b[0].Err, cause) {
		t.Errorf("bad event Err = %#v, want a DecodeError for a at %d from fake wrapping the cause", b[0].Err, rv)
	}
	if b[0].Key != "a" || b[0].RV != rv || b[0].HasObject {
		t.Errorf("bad event %s, want key a at %d with no object", fmtBatch(b[:1]), rv)
	}
	if b[0].Type != driver.Modified {
		t.Errorf("bad event of a key that existed is %v, want Modified", b[0].Type)
	}
	// The bad value replaced the good one: Get and Items leave a out, List
	// reports it with the error, until the next write of a.
	if o, ok := s.Get("a"); ok {
		t.Errorf("Get(a) = %v after its value stopped decoding", o)
	}
	if items, _ := s.Items(); len(items) != 1 {
		t.Errorf("Items = %v, want only b", items)
	}
	var listed []driver.Event[obj]
	if _, err := s.List(context.Background(), driver.ListSink[obj]{Emit: func(ev driver.Event[obj]) error {
		listed = append(listed, ev)
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 2 || listed[0].Key != "a" || !errors.As(listed[0].Err, &de) || listed[0].HasObject {
		t.Errorf("List = %s, want a with the decode error, then b", fmtBatch(listed))
	}
	s.Put("a", obj{2})
	if o, ok := s.Get("a"); !ok || o.N != 2 {
		t.Errorf("Get(a) = %v, %v after a good write", o, ok)
	}
}

func TestWatchEnds(t *testing.T) {
	s := memory.New[obj](memory.Options{})
	cause := errors.New("test over")
	ctx, cancel := context.WithCancelCause(context.Background())
	idle := startWatch(ctx, s, 0)
	s.Put("a", obj{1})
	blocked := startWatch(ctx, s, 0) // will sit in Emit: nobody reads it
	if got := fmtBatch(next(t, idle)); got != "Added:a@1=1" {
		t.Errorf("the watch got %s, want the event", got)
	}
	<-blocked.entered // inside Emit
	cancel(cause)
	for _, w := range []*pullWatch{idle, blocked} {
		<-w.done
		if !errors.Is(w.err, driver.ErrWatchStopped) || !errors.Is(w.err, cause) {
			t.Errorf("Watch after its context was cancelled: %v, want ErrWatchStopped and the cause", w.err)
		}
	}
	if err := s.Watch(ctx, 0, driver.WatchOptions[obj]{}); !errors.Is(err, driver.ErrWatchStopped) {
		t.Errorf("Watch with a done context: %v, want ErrWatchStopped", err)
	}
}

// Concurrent writers and watchers, for the race detector and for ordering:
// every watcher sees every write exactly once, in version order.
func TestConcurrentWritersAndWatchers(t *testing.T) {
	s := memory.New[obj](memory.Options{MaxBatch: 7})
	const writers, perWriter, watchers = 4, 200, 3
	ws := make([]*pullWatch, watchers)
	for i := range ws {
		ws[i] = watch(t, s, 0)
	}
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			for j := range perWriter {
				if j%10 == 9 {
					s.Apply(memory.PutOp(fmt.Sprintf("w%d-x", i), obj{j}), memory.PutOp(fmt.Sprintf("w%d-y", i), obj{j}))
				} else {
					s.Put(fmt.Sprintf("w%d-%d", i, j%5), obj{j})
				}
			}
		})
	}
	results := make([]error, watchers)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, w := range ws {
		wg.Go(func() {
			var last core.ResourceVersion
			seen := 0
			want := writers * (perWriter + perWriter/10)
			for seen < want {
				b, err := w.Next(ctx)
				if err != nil {
					results[i] = fmt.Errorf("after %d events: %w", seen, err)
					return
				}
				if b[0].RV <= last {
					results[i] = fmt.Errorf("batch starts at RV %d after RV %d", b[0].RV, last)
					return
				}
				for _, ev := range b {
					if ev.RV < last {
						results[i] = fmt.Errorf("RV %d after %d in a batch", ev.RV, last)
						return
					}
					last = ev.RV
				}
				seen += len(b)
			}
			if last != s.HeadRV() {
				results[i] = fmt.Errorf("watcher ended at RV %d, head is %d", last, s.HeadRV())
			}
		})
	}
	wg.Wait()
	for i, err := range results {
		if err != nil {
			t.Errorf("watcher %d: %v", i, err)
		}
	}
	if want := core.ResourceVersion(writers * perWriter); s.HeadRV() != want {
		t.Errorf("head %d after %d writes, want %d", s.HeadRV(), want, want)
	}
}

func TestHistoryLimit(t *testing.T) {
	s := memory.New[obj](memory.Options{HistoryLimit: 3, MaxBatch: 1})
	slow := watch(t, s, 0)
	for i := range 5 {
		s.Put("a", obj{i})
	}
	// Five events, three kept: versions 3..5 are watchable, from 2 on.
	if got := s.CompactedRV(); got != 2 {
		t.Errorf("compacted to %d, want 2", got)
	}
	if err := ended(t, slow); !errors.Is(err, driver.ErrExpired) {
		t.Errorf("a watch that fell behind the limit: %v, want ErrExpired", err)
	}
	w2 := watch(t, s, 2)
	if got, want := fmtBatch(slices.Concat(next(t, w2), next(t, w2), next(t, w2))), "Modified:a@3=2 Modified:a@4=3 Modified:a@5=4"; got != want {
		t.Errorf("Watch(2) got %s, want %s", got, want)
	}
	// A transaction is dropped whole, never half-watchable.
	s.Apply(memory.PutOp("x", obj{1}), memory.PutOp("y", obj{1}), memory.PutOp("z", obj{1}))
	if got := s.CompactedRV(); got != 5 {
		t.Errorf("after a 3-event transaction compacted to %d, want 5", got)
	}
}

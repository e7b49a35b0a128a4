package kubeinformer_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/dbinformer/dbinformer/core/driver"
	kubeinformer "github.com/dbinformer/dbinformer/kubeadapter"
)

// These tests drive Watch with a scripted client, for what a real
// apiserver does not do on demand (an error event in the middle of a
// stream, a stream that ends at once); the tests against a real apiserver
// are in the other files.

// scripted is a Client whose List answers head (the version of a
// one-object list) and whose Watch calls open, recording every
// ListOptions.
type scripted struct {
	mu    sync.Mutex
	head  string
	open  func(n int, opts metav1.ListOptions) (watch.Interface, error)
	opens []metav1.ListOptions
}

func (s *scripted) List(ctx context.Context, opts metav1.ListOptions) (*corev1.ConfigMapList, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: s.head}}, nil
}

func (s *scripted) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	s.mu.Lock()
	n := len(s.opens)
	s.opens = append(s.opens, opts)
	s.mu.Unlock()
	return s.open(n, opts)
}

func (s *scripted) watches() []metav1.ListOptions {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]metav1.ListOptions(nil), s.opens...)
}

func cm(name, rv string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
}

func newScripted(t *testing.T, s *scripted) *kubeinformer.Resource[*corev1.ConfigMap] {
	t.Helper()
	r, err := kubeinformer.NewResource[*corev1.ConfigMap](context.Background(), s, kubeinformer.Options{Namespace: "ns", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// collect records what Watch emits.
type collect struct {
	mu     sync.Mutex
	events []driver.Event[*corev1.ConfigMap]
	got    chan struct{} // a value after every batch
}

func newCollect() *collect { return &collect{got: make(chan struct{}, 100)} }

func (c *collect) emit(batch []driver.Event[*corev1.ConfigMap]) error {
	c.mu.Lock()
	c.events = append(c.events, batch...)
	c.mu.Unlock()
	c.got <- struct{}{}
	return nil
}

func (c *collect) summary() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, e := range c.events {
		out = append(out, e.Type.String()+" "+e.Key+"@"+e.RV.String())
	}
	return out
}

// TestWatchEmitsThenFails: events before an error event are emitted, then
// Watch returns the error; a 410 in the stream matches driver.ErrExpired.
func TestWatchEmitsThenFails(t *testing.T) {
	s := &scripted{head: "5", open: func(n int, _ metav1.ListOptions) (watch.Interface, error) {
		w := watch.NewFakeWithChanSize(3, false)
		w.Add(cm("a", "6"))
		w.Modify(cm("a", "7"))
		w.Error(&apierrors.NewResourceExpired("too old resource version: 7 (9)").ErrStatus)
		return w, nil
	}}
	c := newCollect()
	err := newScripted(t, s).Watch(context.Background(), 5, driver.WatchOptions[*corev1.ConfigMap]{Emit: c.emit})
	if !errors.Is(err, driver.ErrExpired) {
		t.Fatalf("Watch returned %v, want core.ErrExpired", err)
	}
	if got, want := c.summary(), []string{"Added ns/a@6", "Modified ns/a@7"}; !equal(got, want) {
		t.Fatalf("emitted %v, want %v", got, want)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestWatchStopped: a cancelled context ends a Watch blocked in its stream
// or in Emit with driver.ErrWatchStopped, never with what it was doing.
func TestWatchStopped(t *testing.T) {
	for _, blockIn := range []string{"stream", "emit"} {
		t.Run(blockIn, func(t *testing.T) {
			s := &scripted{head: "5", open: func(n int, _ metav1.ListOptions) (watch.Interface, error) {
				w := watch.NewFakeWithChanSize(1, false)
				if blockIn == "emit" {
					w.Add(cm("a", "6"))
				}
				return w, nil
			}}
			ctx, cancel := context.WithCancelCause(context.Background())
			stopped := errors.New("test over")
			emitting := make(chan struct{})
			done := make(chan error, 1)
			go func() {
				done <- newScripted(t, s).Watch(ctx, 5, driver.WatchOptions[*corev1.ConfigMap]{Emit: func([]driver.Event[*corev1.ConfigMap]) error {
					close(emitting)
					<-ctx.Done()
					return errors.New("emit gave up")
				}})
			}()
			if blockIn == "emit" {
				<-emitting
			}
			cancel(stopped)
			err := <-done
			if !errors.Is(err, driver.ErrWatchStopped) || !errors.Is(err, stopped) {
				t.Fatalf("Watch returned %v, want core.ErrWatchStopped with the cause", err)
			}
		})
	}
}

// TestWatchNotServed: a 404 when the watch (re)opens means the resource is
// gone: driver.ErrPermanent, also when the stream first ends with nothing.
func TestWatchNotServed(t *testing.T) {
	notFound := apierrors.NewNotFound(schema.GroupResource{Group: "test.dbinformer.io", Resource: "widgets"}, "")
	s := &scripted{head: "5", open: func(n int, _ metav1.ListOptions) (watch.Interface, error) {
		if n == 0 {
			w := watch.NewFake()
			w.Stop() // ends at once, having sent nothing
			return w, nil
		}
		return nil, notFound
	}}
	err := newScripted(t, s).Watch(context.Background(), 5, driver.WatchOptions[*corev1.ConfigMap]{Emit: newCollect().emit})
	if !errors.Is(err, driver.ErrPermanent) || !errors.Is(err, notFound) {
		t.Fatalf("Watch returned %v, want core.ErrPermanent wrapping the 404", err)
	}
	if n := len(s.watches()); n != 2 {
		t.Fatalf("%d watch calls, want 2", n)
	}
}

// TestWatchEndsEmptyTwice: a server that ends every stream at once is an
// error (the caller backs off), not a loop.
func TestWatchEndsEmptyTwice(t *testing.T) {
	s := &scripted{head: "5", open: func(int, metav1.ListOptions) (watch.Interface, error) {
		w := watch.NewFake()
		w.Stop()
		return w, nil
	}}
	err := newScripted(t, s).Watch(context.Background(), 5, driver.WatchOptions[*corev1.ConfigMap]{Emit: newCollect().emit})
	if err == nil || errors.Is(err, driver.ErrPermanent) || errors.Is(err, driver.ErrExpired) {
		t.Fatalf("Watch returned %v, want a plain error", err)
	}
}

// TestWatchProgress: a progress request for a head the stream does not
// reach reopens the stream from the last emitted version as a short watch,
// whose bookmark is passed on; nothing is invented on the way. A request
// for a head already emitted is answered at once with a bookmark at the
// last emitted version.
func TestWatchProgress(t *testing.T) {
	streams := make(chan *watch.FakeWatcher, 10)
	s := &scripted{head: "5", open: func(n int, opts metav1.ListOptions) (watch.Interface, error) {
		w := watch.NewFakeWithChanSize(10, false)
		switch n {
		case 0:
			w.Add(cm("a", "6"))
		case 1:
			// The short watch: the server's bookmark at the head.
			w.Action(watch.Bookmark, cm("", "9"))
		}
		streams <- w
		return w, nil
	}}
	r := newScripted(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	progress := make(chan struct{})
	c := newCollect()
	done := make(chan error, 1)
	go func() {
		done <- r.Watch(ctx, 5, driver.WatchOptions[*corev1.ConfigMap]{Emit: c.emit, Progress: progress})
	}()
	<-c.got // Added a@6

	// Head 6 was emitted already: answered at once.
	s.mu.Lock()
	s.head = "6"
	s.mu.Unlock()
	progress <- struct{}{}
	<-c.got

	// Head 9 (writes elsewhere): the stream is replaced by a short watch
	// from 6 whose bookmark at 9 answers.
	s.mu.Lock()
	s.head = "9"
	s.mu.Unlock()
	progress <- struct{}{}
	<-c.got
	if got, want := c.summary(), []string{"Added ns/a@6", "Bookmark @6", "Bookmark @9"}; !equal(got, want) {
		t.Fatalf("emitted %v, want %v", got, want)
	}
	ws := s.watches()
	if len(ws) != 2 || ws[1].ResourceVersion != "6" || ws[1].TimeoutSeconds == nil || !ws[1].AllowWatchBookmarks {
		t.Fatalf("watch calls %+v: want a second, short one from 6 with bookmarks", ws)
	}
	// The short watch ends; a normal one follows, from 9.
	<-streams
	(<-streams).Stop()
	for len(s.watches()) < 3 {
		<-streams
	}
	if ws := s.watches(); ws[2].ResourceVersion != "9" || ws[2].TimeoutSeconds != nil {
		t.Fatalf("third watch %+v: want a normal one from 9", ws[2])
	}
	cancel()
	if err := <-done; !errors.Is(err, driver.ErrWatchStopped) {
		t.Fatalf("Watch returned %v", err)
	}
}

// TestWatchProgressByEvent: a request that the stream's own events pass is
// answered by a bookmark at the last of them, right after them; however the
// request and the events interleave, the result is the same.
func TestWatchProgressByEvent(t *testing.T) {
	history := []*corev1.ConfigMap{cm("a", "6"), cm("b", "7")}
	s := &scripted{head: "7", open: func(n int, opts metav1.ListOptions) (watch.Interface, error) {
		// Like the apiserver: replay what came after the version asked for.
		w := watch.NewFakeWithChanSize(len(history), false)
		for _, o := range history {
			if o.ResourceVersion > opts.ResourceVersion {
				w.Add(o)
			}
		}
		return w, nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	progress := make(chan struct{})
	c := newCollect()
	done := make(chan error, 1)
	go func() {
		done <- newScripted(t, s).Watch(ctx, 5, driver.WatchOptions[*corev1.ConfigMap]{Emit: c.emit, Progress: progress})
	}()
	progress <- struct{}{} // head 7; the watch is at 5 or further
	for {
		<-c.got
		if sm := c.summary(); len(sm) > 0 && sm[len(sm)-1] == "Bookmark @7" {
			break
		}
	}
	if got, want := c.summary(), []string{"Added ns/a@6", "Added ns/b@7", "Bookmark @7"}; !equal(got, want) {
		t.Fatalf("emitted %v, want %v", got, want)
	}
	cancel()
	<-done
}

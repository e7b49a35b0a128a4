package natsinformer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

// watchRun is one Watch running in its own goroutine: its events arrive on
// a channel, its error when it returns.
type watchRun[T any] struct {
	cancel   context.CancelFunc
	done     chan struct{}
	err      error
	progress chan struct{}

	mu      sync.Mutex
	cond    *sync.Cond
	events  []driver.Event[T]
	batches int
}

func startWatch[T any](t testing.TB, lw driver.ListerWatcher[T], from core.ResourceVersion) *watchRun[T] {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &watchRun[T]{cancel: cancel, done: make(chan struct{}), progress: make(chan struct{}, 1)}
	w.cond = sync.NewCond(&w.mu)
	go func() {
		defer close(w.done)
		err := lw.Watch(ctx, from, driver.WatchOptions[T]{
			Emit: func(batch []driver.Event[T]) error {
				if len(batch) == 0 {
					t.Errorf("Watch emitted an empty batch")
				}
				w.mu.Lock()
				w.events = append(w.events, batch...)
				w.batches++
				w.cond.Broadcast()
				w.mu.Unlock()
				return nil
			},
			Progress: w.progress,
		})
		w.mu.Lock()
		w.err = err
		w.cond.Broadcast()
		w.mu.Unlock()
	}()
	t.Cleanup(func() { w.stop() })
	return w
}

// requestProgress asks for a Bookmark.
func (w *watchRun[T]) requestProgress() {
	select {
	case w.progress <- struct{}{}:
	default:
	}
}

// wait waits until pred holds for the events so far (or the watch ended,
// which fails the test), then returns the events.
func (w *watchRun[T]) wait(t testing.TB, what string, pred func([]driver.Event[T]) bool) []driver.Event[T] {
	t.Helper()
	deadline := time.AfterFunc(testWait, func() {
		w.mu.Lock()
		w.cond.Broadcast()
		w.mu.Unlock()
	})
	defer deadline.Stop()
	start := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for !pred(w.events) {
		select {
		case <-w.done:
			if !pred(w.events) {
				t.Fatalf("waiting for %s: the watch ended: %v", what, w.err)
			}
		default:
		}
		if time.Since(start) > testWait {
			t.Fatalf("waiting for %s: not after %v; events: %v", what, testWait, w.events)
		}
		w.cond.Wait()
	}
	return append([]driver.Event[T](nil), w.events...)
}

// ended waits for the watch to return on its own and returns its error.
func (w *watchRun[T]) ended(t testing.TB) error {
	t.Helper()
	select {
	case <-w.done:
		return w.err
	case <-time.After(testWait):
		t.Fatalf("the watch did not end within %v", testWait)
		return nil
	}
}

// stop cancels the watch and returns its error.
func (w *watchRun[T]) stop() error {
	w.cancel()
	<-w.done
	return w.err
}

// testWait bounds a wait for something that must happen: long enough for a
// loaded machine, short enough that a hang is reported with context.
const testWait = 3 * time.Minute

// listAll lists lw into a map key -> object.
func listAll[T any](t testing.TB, lw driver.ListerWatcher[T]) (map[string]T, core.ResourceVersion) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	got := map[string]T{}
	rv, err := lw.List(ctx, driver.ListSink[T]{Emit: func(ev driver.Event[T]) error {
		if ev.Err != nil {
			t.Errorf("List: %v", ev.Err)
			return nil
		}
		got[ev.Key] = ev.Object
		return nil
	}})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	return got, rv
}

// hasRV reports whether events reach version rv.
func hasRV[T any](rv core.ResourceVersion) func([]driver.Event[T]) bool {
	return func(evs []driver.Event[T]) bool {
		return len(evs) > 0 && evs[len(evs)-1].RV >= rv
	}
}

type item struct {
	N int `json:"n"`
}

var bucketSeq atomic.Int64

// newBucket creates a fresh file-backed bucket that keeps history, so that
// watching from an old revision sees every later write.
func newBucket(t testing.TB, js jetstream.JetStream, cfg jetstream.KeyValueConfig) jetstream.KeyValue {
	t.Helper()
	if cfg.Bucket == "" {
		cfg.Bucket = fmt.Sprintf("t%d", bucketSeq.Add(1))
	}
	if cfg.History == 0 {
		cfg.History = 64
	}
	cfg.Storage = jetstream.FileStorage
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, cfg)
	if err != nil {
		t.Fatalf("create bucket %q: %v", cfg.Bucket, err)
	}
	return kv
}

func put(ctx context.Context, kv jetstream.KeyValue, key string, n int) (uint64, error) {
	b, _ := json.Marshal(item{N: n})
	return kv.Put(ctx, key, b)
}

// putAfterRestart is put for a write right after the server restarted:
// a publish written to the old connection just as the server went away is
// lost, and its request would wait for the whole of ctx for an ack; each
// try waits 5s at most. A retried put whose first try did land writes the
// value twice, which no caller minds.
func putAfterRestart(t testing.TB, ctx context.Context, kv jetstream.KeyValue, key string, n int) uint64 {
	t.Helper()
	return afterRestart(t, ctx, fmt.Sprintf("put %q", key), func(ctx context.Context) (uint64, error) {
		return put(ctx, kv, key, n)
	})
}

// afterRestart runs the request f right after the server restarted, as
// putAfterRestart does: each try waits 5s at most (a request written to
// the old connection as the server went away is lost, and would wait for
// the whole of ctx), until one succeeds or ctx ends. f must be safe to
// repeat.
func afterRestart[V any](t testing.TB, ctx context.Context, what string, f func(context.Context) (V, error)) V {
	t.Helper()
	for {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		v, err := f(tctx)
		cancel()
		if err == nil {
			return v
		}
		if ctx.Err() != nil {
			t.Fatalf("%s after the restart: %v", what, err)
		}
		t.Logf("%s after the restart, trying again: %v", what, err)
	}
}

var streamSeq atomic.Int64

// newStream creates a fresh file-backed stream "T<n>" on subjects "t<n>.>"
// and returns it with its subject root.
func newStream(t testing.TB, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, string) {
	t.Helper()
	n := streamSeq.Add(1)
	root := fmt.Sprintf("t%d", n)
	cfg.Name = fmt.Sprintf("T%d", n)
	cfg.Subjects = []string{root + ".>"}
	cfg.Storage = jetstream.FileStorage
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.CreateStream(ctx, cfg)
	if err != nil {
		t.Fatalf("create stream %q: %v", cfg.Name, err)
	}
	return st, root
}

// servedJetStream returns a JetStream context on nc whose API requests go
// through the prefix "TEST.API", served by the test: serve gets each
// request (m) and the same request to the real API (fwd, replying to m's
// requester) and reports whether it answered; if not, fwd is sent and the
// server answers the client itself.
func servedJetStream(t *testing.T, nc *nats.Conn, serve func(m, fwd *nats.Msg) bool) jetstream.JetStream {
	t.Helper()
	sub, err := nc.Subscribe("TEST.API.>", func(m *nats.Msg) {
		fwd := &nats.Msg{Subject: "$JS.API." + strings.TrimPrefix(m.Subject, "TEST.API."), Reply: m.Reply, Data: m.Data, Header: m.Header}
		if !serve(m, fwd) {
			_ = nc.PublishMsg(fwd)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	js, err := jetstream.NewWithAPIPrefix(nc, "TEST.API")
	if err != nil {
		t.Fatal(err)
	}
	return js
}

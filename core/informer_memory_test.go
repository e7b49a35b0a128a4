package core_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/clock"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/core/memory"
)

type versioned struct {
	Key string
	V   int // strictly growing per write, so order is checkable
}

// orderChecker is a handler that fails the test if any key's versions go
// backwards, and counts calls.
type orderChecker struct {
	t    *testing.T
	mu   sync.Mutex
	last map[string]int
	errs []string
}

func (c *orderChecker) see(key string, v int, what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev, ok := c.last[key]; ok && v < prev {
		c.errs = append(c.errs, fmt.Sprintf("%s %s: version %d after %d", what, key, v, prev))
	}
	c.last[key] = v
}

func (c *orderChecker) OnAdd(key string, o versioned, _ bool) { c.see(key, o.V, "add") }
func (c *orderChecker) OnUpdate(key string, old, o versioned) {
	if o.V < old.V {
		c.mu.Lock()
		c.errs = append(c.errs, fmt.Sprintf("update %s: %d -> %d", key, old.V, o.V))
		c.mu.Unlock()
	}
	c.see(key, o.V, "update")
}
func (c *orderChecker) OnDelete(key string, o versioned, _ bool) { c.see(key, o.V, "delete") }

// pump steps the fake clock (backoff, watch timeouts, WaitFor's progress
// requests) until cond holds, with a generous deadline.
func pump(t *testing.T, fc *clock.Fake, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		fc.Step(time.Second)
		time.Sleep(time.Millisecond)
	}
}

// The informer's cache converges to the source through broken watches,
// compaction (relist) and undecodable values, and no handler sees a key's
// versions go backwards.
func TestInformerConvergesThroughFaults(t *testing.T) {
	for _, deltaFIFO := range []bool{false, true} {
		t.Run(fmt.Sprintf("DeltaFIFO=%v", deltaFIFO), func(t *testing.T) {
			src := memory.New[versioned](memory.Options{Name: "mem", MaxBatch: 7})
			spy := informertest.Wrap[versioned](src)
			fc := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			var decodeErrs sync.Map
			inf := core.NewSharedIndexInformer[versioned](spy, core.InformerOptions[versioned]{
				Name:      "mem",
				DeltaFIFO: deltaFIFO,
				Clock:     fc,
				ErrorHandler: func(err error) {
					var de *driver.DecodeError
					if errors.As(err, &de) {
						decodeErrs.Store(de.Key, de.RV)
					}
				},
			})
			chk := &orderChecker{t: t, last: map[string]int{}}
			reg, err := inf.AddEventHandler(chk)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan struct{})
			go func() { _ = inf.Run(ctx); close(done) }()

			seq := 0
			write := func(n int) {
				for range n {
					seq++
					k := fmt.Sprintf("k%d", rand.IntN(20))
					if rand.IntN(4) == 0 {
						src.Delete(k)
					} else {
						src.Put(k, versioned{Key: k, V: seq})
					}
				}
			}
			write(50)
			pump(t, fc, "initial sync", reg.HasSynced)
			write(50)
			// The reflector backs off on the fake clock, which stands
			// still while more is written and the history is compacted:
			// the resumed watch finds its version expired and relists.
			spy.Break(errors.New("connection reset by peer"))
			write(50)
			if err := src.Compact(src.HeadRV()); err != nil {
				t.Fatal(err)
			}
			write(50)
			head := src.HeadRV()
			pump(t, fc, "version "+head.String(), func() bool { return inf.AppliedVersion() >= head })
			if n := spy.Lists(); n < 2 {
				t.Fatalf("%d lists: compaction did not relist", n)
			}
			badRV := src.InjectDecodeError("k3", errors.New("bad utf8"))
			write(50)
			src.Advance() // a version no watched key has
			head = src.HeadRV()
			// Only WaitFor's progress request can reach the Advance.
			pump(t, fc, "WaitFor "+head.String(), func() bool {
				wctx, wcancel := context.WithTimeout(ctx, 5*time.Millisecond)
				defer wcancel()
				return inf.WaitFor(wctx, head) == nil
			})
			if v, ok := decodeErrs.Load("k3"); !ok || v.(core.ResourceVersion) != badRV {
				t.Fatalf("decode error at %v, injected at %d", v, badRV)
			}

			want, _ := src.Items()
			got := inf.Lister().List(nil)
			if len(got) != len(want) {
				t.Fatalf("cache has %d keys, source %d", len(got), len(want))
			}
			for _, o := range got {
				if want[o.Key] != o {
					t.Fatalf("cache %+v, source %+v", o, want[o.Key])
				}
			}
			pump(t, fc, "handler drained", func() bool { return reg.Pending() == 0 })
			chk.mu.Lock()
			if len(chk.errs) > 0 {
				t.Fatalf("out of order: %v", chk.errs)
			}
			chk.mu.Unlock()
			cancel()
			<-done
		})
	}
}

// WaitFor reaches a version that touched no watched key by asking the
// watch for progress.
func TestWaitForQuietVersionWithMemorySource(t *testing.T) {
	src := memory.New[versioned](memory.Options{})
	src.Put("a", versioned{Key: "a", V: 1})
	spy := informertest.Wrap[versioned](src)
	inf := core.NewSharedIndexInformer[versioned](spy, core.InformerOptions[versioned]{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = inf.Run(runCtx); close(done) }()
	if err := inf.WaitForCacheSync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := spy.WaitOpen(ctx, 1); err != nil {
		t.Fatal(err)
	}
	rv := src.Advance()
	if err := inf.WaitFor(ctx, rv); err != nil {
		t.Fatal(err)
	}
	if inf.AppliedVersion() < rv {
		t.Fatalf("applied %d < %d", inf.AppliedVersion(), rv)
	}
	stop()
	<-done
}

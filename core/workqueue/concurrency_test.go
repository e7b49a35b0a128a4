package workqueue

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core/clock"
)

// TestConcurrentProducersConsumers checks the two promises that matter under
// load: every Add is followed by a processing that starts after it, and no
// key is ever processed by two workers at once. It runs with the lock-light
// paths, and with every TryLock failing so that the fallbacks race too;
// idle key states are swept as often as possible in both.
func TestConcurrentProducersConsumers(t *testing.T) {
	for _, noTryLock := range []bool{false, true} {
		t.Run(map[bool]string{false: "trylock", true: "fallback"}[noTryLock], func(t *testing.T) {
			testConcurrentProducersConsumers(t, noTryLock)
		})
	}
}

func testConcurrentProducersConsumers(t *testing.T, noTryLock bool) {
	const (
		producers = 8
		consumers = 8
		keys      = 64
		perProd   = 2000
	)
	clk := clock.NewFake(epoch)
	q := New(Options[int]{Clock: clk})
	q.slack, q.sweepAt, q.noTryLock = 0, 0, noTryLock

	var stamp atomic.Int64
	var lastAdd, lastStart [keys]atomic.Int64
	var inFlight [keys]atomic.Bool
	var reAdds [keys]int // only touched by the worker holding the key
	var processed atomic.Int64

	var workers sync.WaitGroup
	for range consumers {
		workers.Go(func() {
			for {
				k, shutdown := q.Get()
				if shutdown {
					return
				}
				if !inFlight[k].CompareAndSwap(false, true) {
					t.Errorf("key %d handed to two workers at once", k)
				}
				lastStart[k].Store(stamp.Add(1))
				processed.Add(1)
				if k%7 == 0 && reAdds[k] < 20 {
					// A worker that re-adds its own key must see it again.
					reAdds[k]++
					lastAdd[k].Store(stamp.Add(1))
					q.Add(k)
				}
				inFlight[k].Store(false)
				q.Done(k)
			}
		})
	}

	var prod sync.WaitGroup
	for p := range producers {
		prod.Go(func() {
			r := rand.New(rand.NewPCG(uint64(p), 1))
			for range perProd {
				k := r.IntN(keys)
				s := stamp.Add(1)
				// Raise lastAdd to s; other producers may race on the same key.
				for {
					old := lastAdd[k].Load()
					if old >= s || lastAdd[k].CompareAndSwap(old, s) {
						break
					}
				}
				switch r.IntN(4) {
				case 0:
					q.Add(k)
				case 1:
					q.AddWithOpts(AddOpts{Priority: r.IntN(3)}, k)
				case 2:
					q.AddAfter(k, time.Duration(r.IntN(3))*time.Second)
				case 3:
					q.AddWithOpts(AddOpts{After: time.Second, Priority: 1}, k)
				}
			}
		})
	}
	// Move time on while producers run so delayed items fire mid-stream.
	stepping := make(chan struct{})
	go func() {
		defer close(stepping)
		for i := 0; i < 200; i++ {
			clk.Step(100 * time.Millisecond)
		}
	}()
	prod.Wait()
	<-stepping
	clk.Step(time.Hour) // every delayed add is now due
	// Wait for quiescence rather than shutting down at once: Adds made by
	// workers after shutdown would be ignored, by design.
	for {
		q.mu.Lock()
		q.promoteLocked()
		idle := q.queued == 0 && q.processingLocked() == 0 && len(q.waiting) == 0
		q.mu.Unlock()
		if idle {
			break
		}
		runtime.Gosched()
	}
	if err := q.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	q.ShutDownWithDrain()
	workers.Wait()

	for k := range keys {
		if a, s := lastAdd[k].Load(), lastStart[k].Load(); a != 0 && s < a {
			t.Errorf("key %d: last added at %d, last processing started at %d", k, a, s)
		}
	}
	if processed.Load() == 0 {
		t.Fatal("nothing processed")
	}
	t.Logf("%d processings for %d adds", processed.Load(), producers*perProd)
}

// TestConcurrentGetContextAndShutDown races cancellation, Gets and shutdown.
func TestConcurrentGetContextAndShutDown(t *testing.T) {
	q := New(Options[int]{})
	var wg sync.WaitGroup
	var got atomic.Int64
	for i := range 8 {
		wg.Go(func() {
			ctx, cancel := contextWithCancel(t)
			defer cancel()
			for j := 0; ; j++ {
				if i%2 == 1 && j == i*10 {
					// Half the workers give up early; the rest must drain.
					cancel()
				}
				k, err := q.GetContext(ctx)
				if err != nil {
					return
				}
				got.Add(1)
				q.Done(k)
			}
		})
	}
	for k := range 1000 {
		q.Add(k)
	}
	q.ShutDownWithDrain()
	wg.Wait()
	if got.Load() == 0 {
		t.Fatal("no GetContext returned an item")
	}
}

func contextWithCancel(t *testing.T) (context.Context, context.CancelFunc) {
	return context.WithCancel(t.Context())
}

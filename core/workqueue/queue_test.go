package workqueue

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core/clock"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// run executes a script of space-separated commands, one per entry:
//
//	add K [prio]      Add, or AddWithOpts with a priority
//	after K D [prio]  AddAfter, or AddWithOpts with After and a priority
//	step D            move the fake clock
//	get K             Get must return K (only after len says an item is ready,
//	                  so a failing script fails instead of blocking)
//	done K            Done
//	len N             Len must be N
//	down              ShutDown
//	closed            Get must report shutdown
func run(t *testing.T, q *Queue[string], clk *clock.Fake, script []string) {
	t.Helper()
	for i, line := range script {
		f := strings.Fields(line)
		prio := 0
		switch {
		case f[0] == "add" && len(f) == 3, f[0] == "after" && len(f) == 4:
			prio, _ = strconv.Atoi(f[len(f)-1])
		}
		switch f[0] {
		case "add":
			if len(f) == 3 {
				q.AddWithOpts(AddOpts{Priority: prio}, f[1])
			} else {
				q.Add(f[1])
			}
		case "after":
			d, err := time.ParseDuration(f[2])
			if err != nil {
				t.Fatal(err)
			}
			if len(f) == 4 {
				q.AddWithOpts(AddOpts{After: d, Priority: prio}, f[1])
			} else {
				q.AddAfter(f[1], d)
			}
		case "step":
			d, _ := time.ParseDuration(f[1])
			clk.Step(d)
		case "get":
			if q.Len() == 0 {
				t.Fatalf("step %d %q: queue empty", i, line)
			}
			got, shut := q.Get()
			if shut || got != f[1] {
				t.Fatalf("step %d %q: Get = %q, %v", i, line, got, shut)
			}
		case "done":
			q.Done(f[1])
		case "len":
			want, _ := strconv.Atoi(f[1])
			if got := q.Len(); got != want {
				t.Fatalf("step %d %q: Len = %d", i, line, got)
			}
		case "down":
			q.ShutDown()
		case "closed":
			if got, shut := q.Get(); !shut {
				t.Fatalf("step %d %q: Get = %q, want shutdown", i, line, got)
			}
		default:
			t.Fatalf("bad script line %q", line)
		}
	}
}

func newFake(t *testing.T) (*Queue[string], *clock.Fake) {
	clk := clock.NewFake(epoch)
	q := New(Options[string]{Clock: clk})
	t.Cleanup(q.ShutDown)
	return q, clk
}

func TestSemantics(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script []string
	}{
		{"fifo", []string{"add a", "add b", "add c", "len 3", "get a", "get b", "get c", "len 0"}},
		{"dedup before get", []string{"add a", "add b", "add a", "add a", "len 2", "get a", "get b", "len 0"}},
		{"dedup keeps first position", []string{"add a", "add b", "add a", "get a", "get b"}},
		{"not handed out twice while processing", []string{"add a", "get a", "add a", "len 0", "done a", "len 1", "get a", "done a", "len 0"}},
		{"re-add while processing is deduplicated", []string{"add a", "get a", "add a", "add a", "done a", "len 1", "get a", "done a", "len 0"}},
		{"requeued at done goes to the back", []string{"add a", "get a", "add a", "add b", "done a", "get b", "get a"}},
		{"done without add finishes", []string{"add a", "get a", "done a", "len 0", "add a", "len 1"}},
		{"done of unknown item is ignored", []string{"done x", "add a", "done a", "len 1", "get a"}},
		{"done twice does not duplicate", []string{"add a", "get a", "add a", "done a", "done a", "len 1", "get a", "len 0"}},
		{"add after shutdown ignored", []string{"add a", "down", "add b", "after c 0s", "len 1", "get a", "closed"}},
		{"queued items drain after shutdown", []string{"add a", "add b", "down", "get a", "get b", "closed", "closed"}},
		{"dirty item requeued at done after shutdown", []string{"add a", "get a", "add a", "down", "done a", "get a", "done a", "closed"}},

		{"after zero adds now", []string{"after a 0s", "len 1", "get a"}},
		{"after negative adds now", []string{"after a -1s", "len 1", "get a"}},
		{"after waits", []string{"after a 1s", "len 0", "step 999ms", "len 0", "step 1ms", "len 1", "get a"}},
		{"after keeps earliest", []string{"after a 5s", "after a 1s", "after a 3s", "step 1s", "get a", "done a", "step 10s", "len 0"}},
		{"after later does not postpone", []string{"after a 1s", "after a 5s", "step 1s", "get a"}},
		{"after of queued item dedups", []string{"add a", "after a 1s", "step 1s", "len 1", "get a", "len 0"}},
		{"after while processing requeues at done", []string{"add a", "get a", "after a 1s", "step 1s", "len 0", "done a", "get a"}},
		{"delayed ready together keep order", []string{"after b 2s", "after a 1s", "after c 2s", "step 2s", "get a", "get b", "get c"}},
		{"delayed enter queue behind earlier adds", []string{"after a 1s", "add b", "step 1s", "add c", "get b", "get a", "get c"}},
		{"shutdown drops delayed", []string{"after a 1s", "down", "step 1s", "len 0", "closed"}},

		{"higher priority first", []string{"add a", "add b 5", "add c -1", "add d 5", "get b", "get d", "get a", "get c"}},
		{"raise moves up", []string{"add a", "add b", "add c", "add c 3", "len 3", "get c", "get a", "get b", "len 0"}},
		{"raise goes to back of level", []string{"add x 3", "add a", "add a 3", "get x", "get a"}},
		{"lower priority re-add keeps place", []string{"add a 3", "add b 3", "add a 1", "get a", "get b"}},
		{"raise while processing applies at done", []string{"add a", "add b 1", "get b", "add b 5", "add c 2", "done b", "get b", "get c", "get a"}},
		{"raise then process then re-add low is fifo", []string{"add a", "add b", "add a 2", "get a", "done a", "add a", "get b", "get a", "len 0"}},
		{"delayed with priority", []string{"add a", "after b 1s 4", "step 1s", "get b", "get a"}},
		{"many priority levels", []string{"add a 1", "add b 2", "add c 3", "add d 4", "add e 5", "add f 6", "add g 7", "add h 8", "add i 9", "add j 10",
			"get j", "get i", "get h", "get g", "get f", "get e", "get d", "get c", "get b", "get a", "add k 11", "add l 0", "get k", "get l"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, clk := newFake(t)
			run(t, q, clk, tc.script)
		})
	}
}

func TestGetBlocksUntilAdd(t *testing.T) {
	q, _ := newFake(t)
	got := make(chan string)
	go func() {
		item, _ := q.Get()
		got <- item
	}()
	q.Add("a")
	if item := <-got; item != "a" {
		t.Fatalf("Get = %q", item)
	}
}

func TestShutDownReleasesGet(t *testing.T) {
	q, _ := newFake(t)
	var wg sync.WaitGroup
	shut := make(chan bool, 4)
	for range 4 {
		wg.Go(func() {
			_, s := q.Get()
			shut <- s
		})
	}
	q.ShutDown()
	wg.Wait()
	for range 4 {
		if !<-shut {
			t.Fatal("Get returned an item from an empty queue")
		}
	}
	if !q.ShuttingDown() {
		t.Fatal("ShuttingDown = false")
	}
}

func TestDelayedItemWakesBlockedGet(t *testing.T) {
	q, clk := newFake(t)
	q.AddAfter("a", time.Second)
	got := make(chan string)
	go func() {
		item, _ := q.Get()
		got <- item
	}()
	// The delay goroutine arms its timer asynchronously: step only once a
	// timer exists, until the item arrives. No sleeps, no timing assumptions.
	for {
		select {
		case item := <-got:
			if item != "a" {
				t.Fatalf("Get = %q", item)
			}
			return
		default:
		}
		if clk.HasWaiters() {
			clk.Step(time.Second)
		} else {
			runtime.Gosched()
		}
	}
}

func TestShutDownWithDrainWaitsForDone(t *testing.T) {
	q, _ := newFake(t)
	q.Add("a")
	q.Add("b")
	a, _ := q.Get()
	drained := make(chan struct{})
	go func() {
		q.ShutDownWithDrain()
		close(drained)
	}()
	// b is still queued: a worker that keeps calling Get gets it.
	b, shut := q.Get()
	if shut || b != "b" {
		t.Fatalf("Get = %q, %v", b, shut)
	}
	q.Done(a)
	select {
	case <-drained:
		t.Fatal("drain returned with b still processing")
	default:
	}
	q.Done(b)
	<-drained
	if _, shut := q.Get(); !shut {
		t.Fatal("Get after drain did not report shutdown")
	}
}

func TestShutDownWithDrainWaitsForQueued(t *testing.T) {
	q, _ := newFake(t)
	q.Add("a")
	drained := make(chan struct{})
	go func() {
		q.ShutDownWithDrain()
		close(drained)
	}()
	for !q.ShuttingDown() {
		// Wait for the drain to have begun; it cannot finish without us.
		runtime.Gosched()
	}
	select {
	case <-drained:
		t.Fatal("drain returned with a still queued")
	default:
	}
	a, _ := q.Get()
	q.Done(a)
	<-drained
}

func TestShutDownWithDrainRequeuesDirty(t *testing.T) {
	q, _ := newFake(t)
	q.Add("a")
	a, _ := q.Get()
	q.Add("a")
	drained := make(chan struct{})
	go func() {
		q.ShutDownWithDrain()
		close(drained)
	}()
	for !q.ShuttingDown() {
		runtime.Gosched()
	}
	q.Done(a)
	again, shut := q.Get()
	if shut || again != "a" {
		t.Fatalf("Get = %q, %v; want the dirty item again", again, shut)
	}
	q.Done(again)
	<-drained
	if _, shut := q.Get(); !shut {
		t.Fatal("want shutdown")
	}
}

func TestShutDownForcesDrainToReturn(t *testing.T) {
	q, _ := newFake(t)
	q.Add("a")
	q.Get()
	drained := make(chan struct{})
	go func() {
		q.ShutDownWithDrain()
		close(drained)
	}()
	for !q.ShuttingDown() {
		runtime.Gosched()
	}
	q.ShutDown()
	<-drained
}

func TestGetContext(t *testing.T) {
	q, _ := newFake(t)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() {
		_, err := q.GetContext(ctx)
		errc <- err
	}()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("GetContext = %v, want context.Canceled", err)
	}

	q.Add("a")
	if item, err := q.GetContext(context.Background()); err != nil || item != "a" {
		t.Fatalf("GetContext = %q, %v", item, err)
	}
	q.Add("b")
	if item, err := q.GetContext(t.Context()); err != nil || item != "b" {
		t.Fatalf("GetContext = %q, %v", item, err)
	}
	q.ShutDown()
	if _, err := q.GetContext(t.Context()); !errors.Is(err, ErrShutDown) {
		t.Fatalf("GetContext after shutdown = %v", err)
	}
	if _, err := q.GetContext(context.Background()); !errors.Is(err, ErrShutDown) {
		t.Fatalf("GetContext after shutdown = %v", err)
	}
}

// Take hands out an item as Get does; Done through the Taken is Done of
// the item: a re-add while processing queues it again, a second Done and
// the zero Taken do nothing, and a Taken outliving a ShutDown that emptied
// the queue's states is harmless.
func TestTake(t *testing.T) {
	q, _ := newFake(t)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	q.Add("a")
	if _, err := q.Take(cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("Take with a done context = %v, want context.Canceled", err)
	}
	a, err := q.Take(t.Context())
	if err != nil || a.Item != "a" {
		t.Fatalf("Take = %q, %v", a.Item, err)
	}
	q.Add("a") // while processing: queued again at Done
	if n := q.Len(); n != 0 {
		t.Fatalf("Len while a is processing = %d, want 0", n)
	}
	a.Done()
	if n := q.Len(); n != 1 {
		t.Fatalf("Len after Done of a re-added item = %d, want 1", n)
	}
	a.Done() // not processing: nothing
	Taken[string]{}.Done()
	again, err := q.Take(context.Background())
	if err != nil || again.Item != "a" {
		t.Fatalf("Take = %q, %v", again.Item, err)
	}
	again.Done()
	q.Add("b")
	b, _ := q.Take(t.Context())
	b.Done()
	q.ShutDown() // nothing processing: every state is dropped
	b.Done()
	if _, err := q.Take(t.Context()); !errors.Is(err, ErrShutDown) {
		t.Fatalf("Take after shutdown = %v", err)
	}
}

func TestZeroOptionsUsesRealClockAndDefaultLimiter(t *testing.T) {
	q := New(Options[int]{})
	defer q.ShutDown()
	q.AddRateLimited(1)
	q.AddRateLimited(1)
	if n := q.NumRequeues(1); n != 2 {
		t.Fatalf("NumRequeues = %d, want 2", n)
	}
	q.Forget(1)
	if n := q.NumRequeues(1); n != 0 {
		t.Fatalf("NumRequeues after Forget = %d", n)
	}
	// 5 ms then 10 ms: a real-clock wait that Get absorbs.
	if item, _ := q.Get(); item != 1 {
		t.Fatalf("Get = %d", item)
	}
}

// TestIdleKeyStatesAreSwept: a key that is done and no longer delayed keeps
// its state for its next Add, but once such idle states pile up they are
// swept and reused, so memory follows the keys in use, not every key ever
// seen. Ten rounds of 3000 fresh keys, each delayed, added, then taken.
func TestIdleKeyStatesAreSwept(t *testing.T) {
	q, clk := newFake(t)
	const n, rounds = 3000, 10
	for round := range rounds {
		for i := range n {
			k := strconv.Itoa(round*n + i)
			q.AddAfter(k, time.Second)
			q.Add(k)
		}
		clk.Step(time.Second)
		for i := range n {
			k, _ := q.Get()
			if want := strconv.Itoa(round*n + i); k != want {
				t.Fatalf("round %d: Get = %s, want %s", round, k, want)
			}
			q.Done(k)
		}
		q.mu.Lock()
		q.lockShards()
		keys, w, queued := 0, len(q.waiting), q.queued
		for i := range q.shards {
			keys += q.shards[i].index.len()
		}
		states, free := q.states, len(q.free)
		q.unlockShards()
		q.mu.Unlock()
		if w != 0 || queued != 0 {
			t.Fatalf("round %d: %d delayed entries, %d queued left", round, w, queued)
		}
		if keys != states {
			t.Fatalf("round %d: %d keys indexed, %d states in use", round, keys, states)
		}
		// At most the keys of this round and the last, and a sweep's slack.
		if limit := 2*(2*n) + sweepSlack; states > limit {
			t.Fatalf("round %d: %d states in use, want at most %d", round, states, limit)
		}
		if round == rounds-1 && free == 0 {
			t.Fatalf("no state was ever freed")
		}
	}
}

func TestStaleDelayedEntriesAreCompacted(t *testing.T) {
	q, _ := newFake(t)
	// Each AddAfter moves the item earlier, leaving one stale entry behind.
	for i := range 5000 {
		q.AddAfter("a", time.Duration(10000-i)*time.Second)
	}
	q.mu.Lock()
	n := len(q.waiting)
	q.mu.Unlock()
	if n > 2100 {
		t.Fatalf("%d delayed entries for one item", n)
	}
}

func TestAddWithOptsBatch(t *testing.T) {
	q, clk := newFake(t)
	q.AddWithOpts(AddOpts{}, "a", "b")
	q.AddWithOpts(AddOpts{Priority: 1}, "c", "a")
	q.AddWithOpts(AddOpts{After: time.Second, Priority: 2}, "d", "e")
	clk.Step(time.Second)
	var got []string
	for q.Len() > 0 {
		k, _ := q.Get()
		got = append(got, k)
		q.Done(k)
	}
	want := []string{"d", "e", "c", "a", "b"}
	if !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

// TestNeverConcurrentWithPriorityRaises hammers one key with priority
// raises from producers while workers hold it, the case where a stale
// ready-queue slot could otherwise hand the key out twice.
func TestNeverConcurrentWithPriorityRaises(t *testing.T) {
	for _, noTryLock := range []bool{false, true} {
		t.Run(map[bool]string{false: "trylock", true: "fallback"}[noTryLock], func(t *testing.T) {
			testNeverConcurrentWithPriorityRaises(t, noTryLock)
		})
	}
}

func testNeverConcurrentWithPriorityRaises(t *testing.T, noTryLock bool) {
	q := New(Options[int]{})
	q.slack, q.sweepAt, q.noTryLock = 0, 0, noTryLock
	var busy [4]atomic.Bool
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				k, shutdown := q.Get()
				if shutdown {
					return
				}
				if !busy[k].CompareAndSwap(false, true) {
					t.Errorf("key %d handed out twice at once", k)
				}
				runtime.Gosched()
				busy[k].Store(false)
				q.Done(k)
			}
		})
	}
	var prod sync.WaitGroup
	for p := range 4 {
		prod.Go(func() {
			for i := range 5000 {
				q.AddWithOpts(AddOpts{Priority: (i + p) % 5}, i%4)
			}
		})
	}
	prod.Wait()
	q.ShutDownWithDrain()
	wg.Wait()
}

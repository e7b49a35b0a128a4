package controller_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/controller"
	"github.com/dbinformer/dbinformer/core/clock"
	"github.com/dbinformer/dbinformer/core/workqueue"
)

// TestPerKeyExclusivity: eight workers, four writers hammering twenty
// keys of a real etcd: no key is ever reconciled by two workers at once,
// and every key ends reconciled against its last write.
func TestPerKeyExclusivity(t *testing.T) {
	_, cli := startEtcd(t)
	inf := etcdItems(t, cli)
	const keys, writes = 20, 25
	var mu sync.Mutex
	inflight := map[string]bool{}
	seen := map[string]int{}
	overlaps, reconciles := 0, 0
	r := controller.Func[string](func(ctx context.Context, key string) (controller.Result, error) {
		mu.Lock()
		if inflight[key] {
			overlaps++
		}
		inflight[key] = true
		mu.Unlock()
		time.Sleep(200 * time.Microsecond) // widen the window an overlap would need
		it, ok := inf.Lister().Get(key)
		mu.Lock()
		inflight[key] = false
		reconciles++
		if ok {
			seen[key] = it.Spec
		}
		mu.Unlock()
		return controller.Result{}, nil
	})
	c := controller.New("exclusive", r, controller.Options[string]{Workers: 8})
	if err := controller.Watch(c, inf, controller.ObjectKey[Item](), controller.WatchOptions[Item]{}); err != nil {
		t.Fatal(err)
	}
	stopInf := run(t, inf.Run)
	stopC := run(t, c.Run)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for n := 1; n <= writes; n++ {
				for k := w; k < keys; k += 4 {
					put(t, cli, keyName(k), Item{Spec: n})
				}
			}
		})
	}
	wg.Wait()
	eventually(t, "every key reconciled at its last write", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for k := range keys {
			if seen[keyName(k)] != writes {
				return false
			}
		}
		return true
	})
	if err := stopC(); err != nil {
		t.Fatal(err)
	}
	c.ShutDown()
	_ = stopInf()
	mu.Lock()
	defer mu.Unlock()
	if overlaps != 0 {
		t.Errorf("%d reconciles overlapped another of the same key", overlaps)
	}
	t.Logf("%d writes, %d reconciles", keys*writes, reconciles)
}

// TestRetriesBackoffTerminalDropped: failures are retried through the
// rate limiter with doubling delays, Forget on success resets the
// backoff, a terminal error is not retried, and MaxRetries gives a key up.
func TestRetriesBackoffTerminalDropped(t *testing.T) {
	_, cli := startEtcd(t)
	inf := etcdItems(t, cli)
	var mu sync.Mutex
	attempts := map[string]int{}
	failLeft := map[string]int{"flaky": 3}
	var errs []error
	cm := newCountingMetrics()
	r := controller.Func[string](func(ctx context.Context, key string) (controller.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		attempts[key]++
		switch key {
		case "bad":
			return controller.Result{}, controller.Terminal(errors.New("spec cannot be met"))
		case "doomed":
			return controller.Result{}, errors.New("backend down")
		case "flaky":
			if failLeft[key] > 0 {
				failLeft[key]--
				return controller.Result{}, fmt.Errorf("attempt %d failed", attempts[key])
			}
		}
		return controller.Result{}, nil
	})
	c := controller.New("retries", r, controller.Options[string]{
		Workers:     2,
		RateLimiter: workqueue.NewItemExponentialFailureRateLimiter[string](time.Millisecond, time.Second),
		MaxRetries:  3,
		Metrics:     cm,
		ErrorHandler: func(err error) {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		},
	})
	if err := controller.Watch(c, inf, controller.ObjectKey[Item](), controller.WatchOptions[Item]{}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"flaky", "bad", "doomed"} {
		put(t, cli, k, Item{Spec: 1})
	}
	stopInf := run(t, inf.Run)
	stopC := run(t, c.Run)
	defer func() { _ = stopC(); c.ShutDown(); _ = stopInf() }()

	eventually(t, "flaky succeeded and doomed given up", func() bool {
		return cm.get(controller.ResultSuccess) >= 1 && cm.get(controller.ResultDropped) == 1
	})
	retries := func(key string) (out []string) {
		mu.Lock()
		defer mu.Unlock()
		for _, err := range errs {
			var re *controller.RetryError
			if errors.As(err, &re) && strings.Contains(err.Error(), "reconcile "+key+":") {
				out = append(out, fmt.Sprintf("%d@%v", re.Retry, re.After))
			}
		}
		return out
	}
	if got, want := strings.Join(retries("flaky"), " "), "1@1ms 2@2ms 3@4ms"; got != want {
		t.Errorf("retries of flaky = %s, want %s (exponential backoff per key)", got, want)
	}
	if n := c.Queue().NumRequeues("flaky"); n != 0 {
		t.Errorf("NumRequeues(flaky) = %d after success, want 0 (Forget)", n)
	}
	mu.Lock()
	if attempts["bad"] != 1 || attempts["doomed"] != 4 {
		t.Errorf("attempts: bad %d (want 1: terminal), doomed %d (want 4: MaxRetries 3)", attempts["bad"], attempts["doomed"])
	}
	var terminal, dropped int
	for _, err := range errs {
		if errors.Is(err, controller.ErrTerminal) {
			terminal++
			if !strings.Contains(err.Error(), `controller "retries": reconcile bad: terminal: spec cannot be met (not retried)`) {
				t.Errorf("terminal error %q does not name controller and key", err)
			}
		}
		if strings.Contains(err.Error(), "giving the key up after 3 retries") {
			dropped++
		}
	}
	mu.Unlock()
	if terminal != 1 || dropped != 1 || cm.get(controller.ResultTerminal) != 1 {
		t.Errorf("terminal errors %d (metric %d), dropped %d; want 1 each", terminal, cm.get(controller.ResultTerminal), dropped)
	}

	// After Forget, the next failures start from the first delay again.
	mu.Lock()
	failLeft["flaky"] = 2
	mu.Unlock()
	put(t, cli, "flaky", Item{Spec: 2})
	eventually(t, "flaky succeeded again", func() bool { return cm.get(controller.ResultSuccess) >= 2 })
	if got, want := strings.Join(retries("flaky"), " "), "1@1ms 2@2ms 3@4ms 1@1ms 2@2ms"; got != want {
		t.Errorf("retries of flaky = %s, want %s", got, want)
	}
}

// TestPanicRecovered: a panicking reconcile is recovered, reported with
// its key and stack, counted, and retried; the other keys go on.
func TestPanicRecovered(t *testing.T) {
	_, cli := startEtcd(t)
	inf := etcdItems(t, cli)
	var mu sync.Mutex
	booms := 0
	var panics []*controller.PanicError
	cm := newCountingMetrics()
	r := controller.Func[string](func(ctx context.Context, key string) (controller.Result, error) {
		if key == "boom" {
			mu.Lock()
			defer mu.Unlock()
			if booms < 2 {
				booms++
				var m map[string]int
				m["nil map"]++ // a real runtime panic
			}
		}
		return controller.Result{}, nil
	})
	c := controller.New("panics", r, controller.Options[string]{
		RateLimiter: workqueue.NewItemExponentialFailureRateLimiter[string](time.Millisecond, time.Second),
		Metrics:     cm,
		ErrorHandler: func(err error) {
			var pe *controller.PanicError
			if errors.As(err, &pe) {
				mu.Lock()
				panics = append(panics, pe)
				mu.Unlock()
			}
		},
	})
	if err := controller.Watch(c, inf, controller.ObjectKey[Item](), controller.WatchOptions[Item]{}); err != nil {
		t.Fatal(err)
	}
	put(t, cli, "boom", Item{Spec: 1})
	put(t, cli, "calm", Item{Spec: 1})
	stopInf := run(t, inf.Run)
	stopC := run(t, c.Run)
	eventually(t, "both keys reconciled", func() bool { return cm.get(controller.ResultSuccess) == 2 })
	_ = stopC()
	c.ShutDown()
	_ = stopInf()
	if n := cm.get(controller.ResultPanic); n != 2 {
		t.Errorf("panic metric %d, want 2", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(panics) != 2 || panics[0].Key != "boom" || !strings.Contains(string(panics[0].Stack), "controller_test.go") ||
		!strings.Contains(panics[0].Error(), `controller "panics": reconcile of boom panicked: assignment to entry in nil map`) {
		t.Fatalf("panics reported: %v", panics)
	}
}

// TestShutdownDrain: at the stop, no new key is taken, a reconcile in
// flight finishes with a live context, and one that outlasts the drain
// timeout has its context cancelled with a cause naming the controller.
func TestShutdownDrain(t *testing.T) {
	_, cli := startEtcd(t)
	inf := etcdItems(t, cli)
	fake := clock.NewFake(time.Now())
	started := make(chan string, 4)
	release := make(chan struct{}, 4)
	ends := make(chan error, 4)
	var mu sync.Mutex
	done := map[string]int{}
	r := controller.Func[string](func(ctx context.Context, key string) (controller.Result, error) {
		if key == "slow" {
			started <- key
			select {
			case <-release:
			case <-ctx.Done():
			}
			ends <- context.Cause(ctx)
		}
		mu.Lock()
		done[key]++
		mu.Unlock()
		return controller.Result{}, nil
	})
	c := controller.New("drain", r, controller.Options[string]{Workers: 1, DrainTimeout: time.Minute, Clock: fake})
	if err := controller.Watch(c, inf, controller.ObjectKey[Item](), controller.WatchOptions[Item]{}); err != nil {
		t.Fatal(err)
	}
	put(t, cli, "slow", Item{Spec: 1})
	stopInf := run(t, inf.Run)
	defer func() { c.ShutDown(); _ = stopInf() }()

	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()
	<-started
	c.Enqueue("queued") // the only worker is busy: it stays queued
	cancel()
	release <- struct{}{}
	if err := <-ends; err != nil {
		t.Errorf("the reconcile in flight saw its context end (%v) during the drain", err)
	}
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if done["slow"] != 1 || done["queued"] != 0 {
		t.Errorf("reconciled %v; want slow once and queued not at all (intake stopped)", done)
	}
	mu.Unlock()
	if n := c.Queue().Len(); n != 1 {
		t.Errorf("queue holds %d keys after the stop, want 1 (kept for the next run)", n)
	}

	// The next run takes the queued key; a reconcile that outlasts the
	// drain timeout is cancelled when it expires.
	ctx, cancel = context.WithCancel(context.Background())
	go func() { ran <- c.Run(ctx) }()
	eventually(t, "queued reconciled by the next run", func() bool { mu.Lock(); defer mu.Unlock(); return done["queued"] == 1 })
	c.Enqueue("slow")
	<-started
	waiters := fake.Waiters()
	cancel()
	eventually(t, "the drain timer", func() bool { return fake.Waiters() > waiters })
	fake.Step(time.Minute)
	err := <-ends
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), `controller "drain": reconciles still running 1m0s after the stop`) {
		t.Errorf("cause seen by the reconcile past the drain timeout: %v", err)
	}
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
}

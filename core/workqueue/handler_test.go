package workqueue_test

import (
	"context"
	"sync"
	"testing"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/memory"
	"github.com/dbinformer/dbinformer/core/workqueue"
)

var _ core.ResourceEventHandler[int] = workqueue.EnqueueKeys[int](nil)

// TestEnqueueKeysEveryChange: adds (initial or not), updates (changed or
// a resync's unchanged object) and deletes (known or inferred) all enqueue
// the key, and changes before a worker takes the key cost one Get.
func TestEnqueueKeysEveryChange(t *testing.T) {
	q := workqueue.New(workqueue.Options[string]{})
	defer q.ShutDown()
	h := workqueue.EnqueueKeys[int](q)
	for _, tc := range []struct {
		name string
		call func(key string)
	}{
		{"add", func(k string) { h.OnAdd(k, 1, false) }},
		{"initial add", func(k string) { h.OnAdd(k, 1, true) }},
		{"update", func(k string) { h.OnUpdate(k, 1, 2) }},
		{"resync", func(k string) { h.OnUpdate(k, 1, 1) }},
		{"delete", func(k string) { h.OnDelete(k, 1, false) }},
		{"inferred delete", func(k string) { h.OnDelete(k, 1, true) }},
	} {
		tc.call("a")
		tc.call("a")
		if n := q.Len(); n != 1 {
			t.Fatalf("%s: Len = %d, want 1", tc.name, n)
		}
		if k, _ := q.Get(); k != "a" {
			t.Fatalf("%s: Get = %q", tc.name, k)
		}
		q.Done("a")
	}
}

// TestEnqueueKeysFromInformer: registered on a running informer, the
// handler queues the initial list and later changes, deletes included.
func TestEnqueueKeysFromInformer(t *testing.T) {
	src := memory.New[int](memory.Options{})
	src.Put("a", 1)
	src.Put("b", 2)
	inf := core.NewSharedIndexInformer[int](src, core.InformerOptions[int]{})
	q := workqueue.New(workqueue.Options[string]{})
	defer q.ShutDown()
	if _, err := inf.AddEventHandler(workqueue.EnqueueKeys[int](q)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { _ = inf.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()

	take := func(want string) {
		t.Helper()
		k, err := q.GetContext(ctx)
		if err != nil || k != want {
			t.Fatalf("Get = %q, %v; want %q", k, err, want)
		}
		q.Done(k)
	}
	take("a") // the initial list, in key order
	take("b")
	src.Put("c", 3)
	take("c")
	src.Put("a", 10)
	take("a")
	src.Delete("b")
	take("b")
}

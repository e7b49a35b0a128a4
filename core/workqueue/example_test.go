package workqueue_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/memory"
	"github.com/dbinformer/dbinformer/core/workqueue"
)

// A worker loop with retries: failed keys go back with AddRateLimited,
// succeeded ones are forgotten so their next failure starts from the
// shortest delay again. Done is always called.
func Example() {
	q := workqueue.New(workqueue.Options[string]{
		Name:        "reconcile",
		RateLimiter: workqueue.NewItemExponentialFailureRateLimiter[string](time.Millisecond, time.Second),
	})

	attempts := map[string]int{}
	reconcile := func(key string) error {
		attempts[key]++
		if attempts[key] < 3 {
			return fmt.Errorf("backend unavailable")
		}
		return nil
	}

	finished := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			key, shutdown := q.Get()
			if shutdown {
				return
			}
			func() {
				defer q.Done(key)
				if err := reconcile(key); err != nil {
					fmt.Printf("%s: %v (retry %d)\n", key, err, q.NumRequeues(key)+1)
					q.AddRateLimited(key)
					return
				}
				q.Forget(key)
				fmt.Printf("%s: reconciled after %d attempts\n", key, attempts[key])
				close(finished)
			}()
		}
	})

	q.Add("orders/42")
	<-finished
	q.ShutDownWithDrain()
	wg.Wait()
	// Output:
	// orders/42: backend unavailable (retry 1)
	// orders/42: backend unavailable (retry 2)
	// orders/42: reconciled after 3 attempts
}

// Priorities: the urgent key is taken first even though it was added last.
func ExampleQueue_AddWithOpts() {
	q := workqueue.New(workqueue.Options[string]{})
	defer q.ShutDown()
	q.Add("routine-1")
	q.Add("routine-2")
	q.AddWithOpts(workqueue.AddOpts{Priority: 10}, "urgent")
	for q.Len() > 0 {
		key, _ := q.Get()
		fmt.Println(key)
		q.Done(key)
	}
	// Output:
	// urgent
	// routine-1
	// routine-2
}

// A controller's informer feeds its queue through EnqueueKeys; the worker
// reads each key's current state back from the cache, and a key missing
// from it was deleted.
func ExampleEnqueueKeys() {
	type app struct{ Replicas int }
	src := memory.New[app](memory.Options{})
	src.Put("api", app{Replicas: 2})
	src.Put("web", app{Replicas: 3})

	inf := core.NewSharedIndexInformer[app](src, core.InformerOptions[app]{Name: "apps"})
	q := workqueue.New(workqueue.Options[string]{Name: "apps"})
	defer q.ShutDown()
	inf.AddEventHandler(workqueue.EnqueueKeys[app](q))

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { inf.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()

	reconcile := func() {
		key, _ := q.Get()
		defer q.Done(key)
		if a, ok := inf.Lister().Get(key); ok {
			fmt.Println(key, "wants", a.Replicas, "replicas")
		} else {
			fmt.Println(key, "deleted: clean up")
		}
	}
	reconcile() // the initial list
	reconcile()
	src.Put("web", app{Replicas: 5})
	reconcile()
	src.Delete("api")
	reconcile()
	// Output:
	// api wants 2 replicas
	// web wants 3 replicas
	// web wants 5 replicas
	// api deleted: clean up
}

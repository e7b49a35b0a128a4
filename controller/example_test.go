package controller_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/dbinformer/dbinformer/controller"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/memory"
)

type Order struct {
	Customer string
	Total    int
}

// A controller of customers that keeps each customer's order total: it
// watches orders and reconciles the customer of each changed order (an
// owner field), reading the customer's orders from the orders cache's
// index.
func Example() {
	src := memory.New[Order](memory.Options{})
	orders := core.NewSharedIndexInformer[Order](src, core.InformerOptions[Order]{
		Name: "orders",
		Indexers: core.Indexers[Order]{
			"customer": func(o Order) ([]string, error) { return []string{o.Customer}, nil },
		},
	})
	var mu sync.Mutex
	totals := map[string]int{}
	done := make(chan struct{}, 10)
	c := controller.New("customer-totals", controller.Func[string](func(ctx context.Context, customer string) (controller.Result, error) {
		os, err := orders.Lister().ByIndex("customer", customer)
		if err != nil {
			return controller.Result{}, err
		}
		sum := 0
		for _, o := range os {
			sum += o.Total
		}
		mu.Lock()
		totals[customer] = sum
		mu.Unlock()
		done <- struct{}{}
		return controller.Result{}, nil
	}), controller.Options[string]{Workers: 2})
	_ = controller.Watch(c, orders, controller.Owner(func(o Order) string { return o.Customer }), controller.WatchOptions[Order]{})

	src.Put("o1", Order{Customer: "c7", Total: 30})
	src.Put("o2", Order{Customer: "c7", Total: 12})
	src.Put("o3", Order{Customer: "c9", Total: 5})

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = orders.Run(ctx) })
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()
	<-done // c7
	<-done // c9
	cancel()
	<-ran
	c.ShutDown()
	wg.Wait()

	var out []string
	for k, v := range totals {
		out = append(out, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(out)
	fmt.Println(strings.Join(out, " "))
	// Output: c7=42 c9=5
}

// Read-your-writes: a reconcile that writes to the source records the
// version the write returned; its next read of the cache, and the next
// reconcile of the same key, see the write.
func ExampleWrote() {
	src := memory.New[Order](memory.Options{})
	orders := core.NewSharedIndexInformer[Order](src, core.InformerOptions[Order]{Name: "orders"})
	done := make(chan string, 1)
	c := controller.New("ryw", controller.Func[string](func(ctx context.Context, key string) (controller.Result, error) {
		o, _, err := controller.Get(ctx, orders, key)
		if err != nil || o.Total >= 100 {
			return controller.Result{}, err
		}
		rv := src.Put(key, Order{Customer: o.Customer, Total: 100}) // the write, and its version
		controller.Wrote(ctx, orders, rv)
		o, _, err = controller.Get(ctx, orders, key) // waits for the cache to apply rv
		done <- fmt.Sprintf("%s total after my write: %d", key, o.Total)
		return controller.Result{}, err
	}), controller.Options[string]{})
	_ = controller.Watch(c, orders, controller.ObjectKey[Order](), controller.WatchOptions[Order]{})
	src.Put("o1", Order{Customer: "c7", Total: 1})

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = orders.Run(ctx) })
	wg.Go(func() { _ = c.Run(ctx) })
	fmt.Println(<-done)
	cancel()
	wg.Wait()
	c.ShutDown()
	// Output: o1 total after my write: 100
}

// A Manager runs the informers, the controllers and (with a Listener or
// Addr) /healthz, /readyz, /metrics and the status page; with an Elector
// (leader.NewEtcd, NewPostgres, NewKube) it runs the controllers only while
// it leads, keeping the caches and queues of a standby warm.
func ExampleManager() {
	src := memory.New[Order](memory.Options{})
	src.Put("o1", Order{Customer: "c7", Total: 30})
	mgr := controller.NewManager(controller.ManagerOptions{Name: "shop"})
	orders := controller.Informer(mgr, "orders", src, core.InformerOptions[Order]{})
	done := make(chan string, 1)
	_, err := controller.For(mgr, orders, controller.Func[string](func(ctx context.Context, key string) (controller.Result, error) {
		o, _ := orders.Lister().Get(key)
		done <- fmt.Sprintf("reconciled %s: %s spent %d", key, o.Customer, o.Total)
		return controller.Result{}, nil
	}), controller.Options[string]{})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- mgr.Run(ctx) }()
	fmt.Println(<-done)
	cancel() // what Ctrl-C does: intake stops, reconciles drain, informers stop
	fmt.Println("run:", <-ran)
	// Output:
	// reconciled o1: c7 spent 30
	// run: <nil>
}

package filter_test

import (
	"context"
	"fmt"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/memory"
	"github.com/dbinformer/dbinformer/filter"
)

type Ticket struct {
	ID     int64  `db:"id"`
	Tenant string `db:"tenant"`
	State  string `db:"state"`
}

// An informer that caches one tenant's open tickets: a ticket that is
// closed leaves the cache as a delete carrying its last open state.
func Example() {
	f, err := filter.New[Ticket](filter.And(
		filter.Eq("tenant", "acme"),
		filter.In("state", "open", "pending"),
	))
	if err != nil {
		fmt.Println(err)
		return
	}
	src := memory.New[Ticket](memory.Options{})
	src.Put("1", Ticket{ID: 1, Tenant: "acme", State: "open"})
	src.Put("2", Ticket{ID: 2, Tenant: "other", State: "open"})

	// Adapters take the filter in their options; Wrap filters any other
	// ListerWatcher.
	inf := core.NewSharedIndexInformer(filter.Wrap[Ticket](src, f), core.InformerOptions[Ticket]{})
	done := make(chan struct{})
	if _, err := inf.AddEventHandler(core.ResourceEventHandlerFuncs[Ticket]{
		AddFunc: func(key string, t Ticket, _ bool) { fmt.Println("add", key, t.State) },
		DeleteFunc: func(key string, t Ticket, _ bool) {
			fmt.Println("delete", key, t.State)
			close(done)
		},
	}); err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = inf.Run(ctx) }()
	if err := inf.WaitForCacheSync(ctx); err != nil {
		fmt.Println(err)
	}
	src.Put("1", Ticket{ID: 1, Tenant: "acme", State: "closed"})
	<-done
	cancel()
	<-stopped
	fmt.Println(f)
	// Output:
	// add 1 open
	// delete 1 open
	// tenant = "acme" AND state IN ("open", "pending")
}

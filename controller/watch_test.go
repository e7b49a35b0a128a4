package controller_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	"github.com/dbinformer/dbinformer/controller"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/clock"
)

// recorder counts reconciles per key.
type recorder struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *recorder) reconciler() controller.Reconciler[string] {
	r.n = map[string]int{}
	return controller.Func[string](func(_ context.Context, key string) (controller.Result, error) {
		r.mu.Lock()
		r.n[key]++
		r.mu.Unlock()
		return controller.Result{}, nil
	})
}

func (r *recorder) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[key]
}

// TestMappersPredicatesResync on a real etcd: an owner field (orders →
// their customer, both customers when an order moves), an index lookup
// (a customer → its orders, from the orders cache), a predicate on a
// chosen field, and a periodic resync.
func TestMappersPredicatesResync(t *testing.T) {
	_, cli := startEtcd(t)
	ordersLW, err := etcdinformer.NewPrefix(context.Background(), cli, "/orders/", etcdinformer.Options[Order]{})
	if err != nil {
		t.Fatal(err)
	}
	orders := core.NewSharedIndexInformer[Order](ordersLW, core.InformerOptions[Order]{Name: "orders",
		Indexers: core.Indexers[Order]{"customer": func(o Order) ([]string, error) { return []string{o.Customer}, nil }}})
	customers := etcdItems(t, cli) // Items under /items/: the customers
	putJSON := func(key string, v any) {
		b, _ := json.Marshal(v)
		if _, err := cli.Put(context.Background(), key, string(b)); err != nil {
			t.Fatal(err)
		}
	}

	fake := clock.NewFake(time.Now())
	var byCustomer, byOrder recorder
	cust := controller.New("customers", byCustomer.reconciler(), controller.Options[string]{Workers: 1, Clock: fake})
	ord := controller.New("orders", byOrder.reconciler(), controller.Options[string]{Workers: 1})
	for _, err := range []error{
		controller.Watch(cust, orders, controller.Owner(func(o Order) string { return o.Customer }), controller.WatchOptions[Order]{}),
		controller.Watch(cust, customers, controller.ObjectKey[Item](), controller.WatchOptions[Item]{
			Predicates: []controller.Predicate[Item]{controller.FieldChanged(func(it Item) int { return it.Spec })},
			Resync:     time.Hour,
		}),
		controller.Watch(ord, customers, controller.IndexKeys(orders.Lister(), "customer", func(key string, _ Item) string { return key }),
			controller.WatchOptions[Item]{}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	putJSON("/orders/o1", Order{Customer: "c7", Total: 1})
	putJSON("/orders/o2", Order{Customer: "c7", Total: 2})
	putJSON("/orders/o3", Order{Customer: "c9", Total: 3})
	stops := []func() error{run(t, orders.Run), run(t, customers.Run)}
	tickers := fake.Waiters()
	stops = append(stops, run(t, cust.Run), run(t, ord.Run))
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			_ = stops[i]()
		}
		cust.ShutDown()
		ord.ShutDown()
	}()
	eventually(t, "customers of the listed orders", func() bool { return byCustomer.count("c7") == 1 && byCustomer.count("c9") == 1 })

	// A customer's change reconciles its orders, found through the index.
	put(t, cli, "c7", Item{Spec: 1})
	eventually(t, "orders of c7", func() bool { return byOrder.count("o1") == 1 && byOrder.count("o2") == 1 })
	if byOrder.count("o3") != 0 {
		t.Errorf("o3 (of c9) reconciled on a change of c7")
	}
	eventually(t, "c7 on its add", func() bool { return byCustomer.count("c7") == 2 })

	// A change outside the chosen field passes no predicate. One worker
	// and one handler: had it passed, c7 would come before c9.
	put(t, cli, "c7", Item{Spec: 1, Observed: 5})
	put(t, cli, "c9", Item{Spec: 1})
	eventually(t, "c9 on its add", func() bool { return byCustomer.count("c9") == 2 })
	if n := byCustomer.count("c7"); n != 2 {
		t.Errorf("c7 reconciled %d times, want 2: a change of Observed only passed FieldChanged(Spec)", n)
	}

	// An order that moves reconciles its old and its new customer.
	putJSON("/orders/o2", Order{Customer: "c9", Total: 2})
	eventually(t, "both owners of o2", func() bool { return byCustomer.count("c7") == 3 && byCustomer.count("c9") == 3 })

	// The resync reconciles every customer in the cache again.
	eventually(t, "the resync ticker", func() bool { return fake.Waiters() > tickers })
	fake.Step(time.Hour)
	eventually(t, "the resync", func() bool { return byCustomer.count("c7") == 4 && byCustomer.count("c9") == 4 })
}

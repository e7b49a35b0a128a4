package controller_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/dbinformer/dbinformer/controller"
	"github.com/dbinformer/dbinformer/core"
)

// TestReadYourWrites: a reconcile writes the object it reconciles (its
// observed field) and asks for itself again at once. Its read right after
// the write, and the next reconcile's first read, both see the write —
// so each spec change is written exactly once, never twice by a reconcile
// acting on the cache from before its own write.
func TestReadYourWrites(t *testing.T) {
	_, cli := startEtcd(t)
	inf := etcdItems(t, cli)
	const keys, specs = 10, 5
	var mu sync.Mutex
	writes := map[string]int{}
	stale := 0
	var c *controller.Controller[string]
	r := controller.Func[string](func(ctx context.Context, key string) (controller.Result, error) {
		it, ok, err := controller.Get(ctx, inf, key)
		if err != nil || !ok {
			return controller.Result{}, err
		}
		if it.Observed == it.Spec {
			return controller.Result{}, nil
		}
		b, _ := json.Marshal(Item{Spec: it.Spec, Observed: it.Spec})
		resp, err := cli.Put(ctx, prefix+key, string(b))
		if err != nil {
			return controller.Result{}, err
		}
		controller.Wrote(ctx, inf, core.ResourceVersion(resp.Header.Revision))
		again, _, err := controller.Get(ctx, inf, key)
		if err != nil {
			return controller.Result{}, err
		}
		mu.Lock()
		writes[key]++
		if again.Observed != it.Spec {
			stale++
		}
		mu.Unlock()
		c.Enqueue(key) // the next reconcile of key must see this write too
		return controller.Result{}, nil
	})
	c = controller.New("ryw", r, controller.Options[string]{Workers: 4})
	// Only spec changes are reasons: the controller's own writes of
	// observed are not, so only Enqueue brings the key back.
	if err := controller.Watch(c, inf, controller.ObjectKey[Item](), controller.WatchOptions[Item]{
		Predicates: []controller.Predicate[Item]{controller.FieldChanged(func(it Item) int { return it.Spec })},
	}); err != nil {
		t.Fatal(err)
	}
	stopInf := run(t, inf.Run)
	stopC := run(t, c.Run)
	defer func() { _ = stopC(); c.ShutDown(); _ = stopInf() }()
	for s := 1; s <= specs; s++ {
		for k := range keys {
			put(t, cli, keyName(k), Item{Spec: s})
		}
		eventually(t, "every key observed", func() bool {
			for k := range keys {
				if it, _ := inf.Lister().Get(keyName(k)); it.Observed != s {
					return false
				}
			}
			return c.Queue().Len() == 0
		})
	}
	_ = stopC()
	mu.Lock()
	defer mu.Unlock()
	if stale != 0 {
		t.Errorf("%d reads right after a write missed it", stale)
	}
	for k := range keys {
		// A spec overwritten before its reconcile is written fewer times,
		// never more.
		if n := writes[keyName(k)]; n > specs || n == 0 {
			t.Errorf("key %s written %d times for %d spec changes: a reconcile acted on its own stale state", keyName(k), n, specs)
		}
	}
}

package core_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/memory"
)

type User struct {
	Name string
	Org  string
}

// An informer over an in-memory source: handlers see typed changes, the
// lister reads the cache, and WaitFor gives read-your-writes.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	src := memory.New[User](memory.Options{})
	src.Put("1", User{Name: "ada", Org: "eng"})

	inf := core.NewSharedIndexInformer[User](src, core.InformerOptions[User]{
		Name: "users",
		Indexers: core.Indexers[User]{
			"org": func(u User) ([]string, error) { return []string{u.Org}, nil },
		},
	})
	seen := make(chan string, 10)
	_, _ = inf.AddEventHandler(core.ResourceEventHandlerFuncs[User]{
		AddFunc: func(key string, u User, initial bool) {
			seen <- fmt.Sprintf("add %s %s initial=%v", key, u.Name, initial)
		},
		UpdateFunc: func(key string, old, u User) { seen <- fmt.Sprintf("update %s %s->%s", key, old.Org, u.Org) },
		DeleteFunc: func(key string, u User, unknown bool) { seen <- fmt.Sprintf("delete %s %s", key, u.Name) },
	})
	done := make(chan struct{})
	go func() { _ = inf.Run(ctx); close(done) }()
	if err := inf.WaitForCacheSync(ctx); err != nil {
		fmt.Println(err)
	}
	fmt.Println(<-seen)

	src.Put("2", User{Name: "bob", Org: "ops"})
	src.Put("1", User{Name: "ada", Org: "ops"})
	rv, _ := src.Delete("2")
	if err := inf.WaitFor(ctx, rv); err != nil {
		fmt.Println(err)
	}
	for range 3 {
		fmt.Println(<-seen)
	}
	ops, _ := inf.Lister().ByIndex("org", "ops")
	fmt.Println("in ops:", len(ops), ops[0].Name)

	cancel()
	<-done
	// Output:
	// add 1 ada initial=true
	// add 2 bob initial=false
	// update 1 eng->ops
	// delete 2 bob
	// in ops: 1 ada
}

// The Indexer on its own: a typed, thread-safe map with secondary indexes.
func ExampleIndexer() {
	idx := core.NewIndexer(core.Indexers[User]{
		"org": func(u User) ([]string, error) { return []string{u.Org}, nil },
	})
	_ = idx.Add("1", User{Name: "ada", Org: "eng"})
	_ = idx.Add("2", User{Name: "bob", Org: "eng"})
	_ = idx.Add("3", User{Name: "cy", Org: "ops"})
	keys, _ := idx.IndexKeys("org", "eng")
	fmt.Println(keys, idx.ListIndexFuncValues("org"))
	// Output: [1 2] [eng ops]
}

// DeltaFIFO on its own: deltas grouped per key, typed tombstones on Replace.
func ExampleDeltaFIFO() {
	known := core.NewIndexer[string](nil)
	_ = known.Add("old", "o1")
	q := core.NewDeltaFIFO[string](known)
	_ = q.Add([]core.Delta[string]{
		{Type: core.DeltaAdded, Key: "a", Object: "a1", HasObject: true, RV: 1},
		{Type: core.DeltaUpdated, Key: "a", Object: "a2", HasObject: true, RV: 2},
	}, 2)
	// A list streams in through put; the deletes it implies follow it.
	_ = q.Replace(context.Background(), func(put func(core.Delta[string]) error) (core.ResourceVersion, error) {
		return 3, put(core.Delta[string]{Type: core.DeltaReplaced, Key: "a", Object: "a3"})
	})
	for q.Len() > 0 {
		_ = q.Pop(context.Background(), func(ds []core.Delta[string], _ bool) error {
			var parts []string
			for _, d := range ds {
				parts = append(parts, fmt.Sprintf("%v(%s unknown=%v)", d.Type, d.Object, d.FinalStateUnknown))
			}
			fmt.Println(ds[0].Key+":", strings.Join(parts, " "))
			return nil
		})
	}
	// Output:
	// a: Added(a1 unknown=false) Updated(a2 unknown=false) Replaced(a3 unknown=false)
	// old: Deleted(o1 unknown=true)
}

// A factory shares one informer per source and type.
func ExampleInformerFor() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := memory.New[User](memory.Options{})
	src.Put("1", User{Name: "ada"})
	var f core.Factory // the zero Factory is ready to use
	a := core.InformerFor[User](&f, "users", src, core.InformerOptions[User]{})
	b := core.InformerFor[User](&f, "users", src, core.InformerOptions[User]{})
	f.Start(ctx)
	if err := f.WaitForCacheSync(ctx); err != nil {
		fmt.Println(err)
	}
	names := []string{}
	for _, u := range b.Lister().List(nil) {
		names = append(names, u.Name)
	}
	sort.Strings(names)
	fmt.Println(a == b, names)
	f.Shutdown()
	// Output: true [ada]
}

// Waiting for the initial sync at startup: a time limit of its own, and an
// interrupted start (ctx cancelled, e.g. by Ctrl-C) told apart from a
// failure.
func ExampleWaitForCacheSyncTimeout() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := memory.New[User](memory.Options{})
	src.Put("1", User{Name: "ada", Org: "eng"})
	src.Put("2", User{Name: "bob", Org: "eng"})
	inf := core.NewSharedIndexInformer[User](src, core.InformerOptions[User]{
		Indexers: core.Indexers[User]{"org": func(u User) ([]string, error) { return []string{u.Org}, nil }},
	})
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()

	if err := core.WaitForCacheSyncTimeout(ctx, time.Minute, inf); err != nil {
		if ctx.Err() != nil {
			return // interrupted: not an error
		}
		fmt.Println(err) // errors.Is(err, core.ErrSyncTimeout): says why each cache is not synced
		return
	}
	l := inf.Lister()
	keys, _ := l.IndexKeys("org", "eng")
	fmt.Println(l.Len(), keys, l.ListIndexFuncValues("org"))
	cancel()
	fmt.Println(<-done)
	// Output:
	// 2 [1 2] [eng]
	// <nil>
}

package statuspage_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/memory"
	"github.com/dbinformer/dbinformer/core/workqueue"
	"github.com/dbinformer/dbinformer/statuspage"
)

// The page mounted like net/http/pprof, fed by an informer and a work
// queue; a readiness probe reads it.
func ExamplePage() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	src := memory.New[string](memory.Options{})
	src.Put("alice", "admin")
	src.Put("bob", "viewer")

	page := statuspage.New(statuspage.Options{Title: "example"})
	inf := core.NewSharedIndexInformer[string](src, core.InformerOptions[string]{
		Name:         "users",
		Metrics:      page, // or core.MultiMetrics(page, prometheusProvider)
		ErrorHandler: page.ErrorHandler("users", nil),
	})
	page.Add(inf) // its name, kind, head (for the lag) and checkpoints come from the informer
	queue := workqueue.New(workqueue.Options[string]{Name: "reconcile", MetricsProvider: page})
	defer queue.ShutDown()

	mux := http.NewServeMux()
	mux.Handle("/debug/informers/", page) // HTML, ?format=json, readyz, livez
	mux.Handle("/readyz", page.ReadyHandler())
	srv := httptest.NewServer(mux)
	defer srv.Close()

	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = inf.Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	if err := inf.WaitForCacheSync(ctx); err != nil {
		fmt.Println(err)
		return
	}

	resp, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Print(resp.StatusCode, "\n", string(body))
	// Output:
	// 200
	// [+] users synced
	// readyz check passed
}

// Through a Factory: InformerFor puts each informer on the page.
func ExampleInformerFor() {
	ctx, cancel := context.WithCancel(context.Background())
	src := memory.New[int](memory.Options{})
	src.Put("a", 1)

	page := statuspage.New(statuspage.Options{})
	f := core.NewFactory()
	inf := statuspage.InformerFor(page, f, "counters", src, core.InformerOptions[int]{})
	f.Start(ctx)
	defer f.Shutdown()
	defer cancel()
	if err := f.WaitForCacheSync(ctx); err != nil {
		fmt.Println(err)
		return
	}
	st := page.Snapshot(ctx)
	is := st.Informers[0]
	fmt.Println(is.Name, is.Kind, is.Synced, is.Lists.ListedObjects, inf.Lister().Len())
	// Output: counters memory.Source true 1 1
}

// A terminal progress line per informer while it syncs; it returns once
// every informer on the page has synced.
func ExamplePage_PrintProgress() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := memory.New[string](memory.Options{})
	src.Put("k", "v")
	page := statuspage.New(statuspage.Options{})
	inf := core.NewSharedIndexInformer[string](src, core.InformerOptions[string]{Name: "config", Metrics: page})
	page.Add(inf)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = inf.Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	if err := page.PrintProgress(ctx, os.Stdout, time.Second); err != nil {
		fmt.Println(err)
	}
}

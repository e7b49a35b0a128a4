package core_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/core/memory"
)

// The consistency audit finds a change the watch lost (here an
// informertest.Lossy drops it on purpose), names the key, and heals it:
// the handler hears of that key only.
func ExampleSharedIndexInformer_AuditNow() {
	src := memory.New[string](memory.Options{})
	src.Put("users/1", "ada")
	lossy := informertest.NewLossy[string](src, informertest.LossyOptions[string]{})
	inf := core.NewSharedIndexInformer[string](lossy, core.InformerOptions[string]{
		Name:   "users",
		Logger: slog.New(slog.DiscardHandler),
		// Every 10 minutes by default; AuditNow runs one at once.
		Audit: &core.AuditOptions[string]{Period: time.Hour},
	})
	told := make(chan string, 10)
	reg, _ := inf.AddEventHandler(core.ResourceEventHandlerFuncs[string]{
		AddFunc:    func(key, obj string, initial bool) { told <- fmt.Sprintf("add %s %s (initial %v)", key, obj, initial) },
		UpdateFunc: func(key, old, obj string) { told <- fmt.Sprintf("update %s %s -> %s", key, old, obj) },
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = inf.Run(ctx) }()
	_ = reg.WaitForCacheSync(ctx)
	fmt.Println(<-told)

	lossy.Arm(informertest.LossDrop) // the watch loses the next change
	rv := src.Put("users/1", "grace")
	_ = inf.WaitFor(ctx, rv)
	cached, _ := inf.Lister().Get("users/1")
	fmt.Println("cached:", cached)

	r := inf.AuditNow(ctx)
	fmt.Println(r.Outcome, r.DifferingKeys, "healed:", r.Healed)
	fmt.Println(<-told)
	// Output:
	// add users/1 ada (initial true)
	// cached: ada
	// divergent [users/1] healed: 1
	// update users/1 ada -> grace
}

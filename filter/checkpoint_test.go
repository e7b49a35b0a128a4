package filter_test

import (
	"context"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/checkpoint"
	"github.com/dbinformer/dbinformer/core/codec"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/core/memory"
	"github.com/dbinformer/dbinformer/filter"
)

// TestEnterLeaveAcrossWarmRestart: an informer over a filtered source
// saves a checkpoint; while it is down one cached object leaves the filter
// and another enters. The next run starts warm from the checkpoint and its
// handler sees the leave as a delete carrying the last matching state and
// the enter as an add.
func TestEnterLeaveAcrossWarmRestart(t *testing.T) {
	store, err := checkpoint.NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	src := memory.New[Order](memory.Options{})
	src.Put("a", Order{Status: "paid", V: 1})
	src.Put("b", Order{Status: "new", V: 2})
	f := filter.MustNew[Order](filter.Eq("status", "paid"))
	opts := core.InformerOptions[Order]{
		Name:       "orders",
		Checkpoint: &core.CheckpointOptions[Order]{Store: store, Codec: codec.JSON[Order]{}, Interval: -1},
	}

	rec1 := informertest.NewRecorder(t, func(o Order) int64 { return o.V })
	stop := runUntilStopped(t, filter.Wrap[Order](src, f), opts, rec1)
	rec1.Expect("add a v=1 initial")
	stop() // saves the final checkpoint

	src.Put("a", Order{Status: "new", V: 3})  // leaves
	src.Put("b", Order{Status: "paid", V: 4}) // enters

	spy := informertest.Wrap(filter.Wrap[Order](src, f))
	rec2 := informertest.NewRecorder(t, func(o Order) int64 { return o.V })
	inf, _ := informertest.Run[Order](t, spy, opts, rec2)
	rec2.Expect("add a v=1 initial", "delete a v=1", "add b v=4")
	if spy.Lists() != 0 {
		t.Errorf("the second run listed %d times: not a warm start", spy.Lists())
	}
	if _, ok := inf.Lister().Get("a"); ok {
		t.Error("a is still cached after it left the filter")
	}
}

// runUntilStopped runs an informer over lw until the returned stop is
// called (informertest.Run stops only when the test ends).
func runUntilStopped(t *testing.T, lw driver.ListerWatcher[Order], opts core.InformerOptions[Order], h core.ResourceEventHandler[Order]) (stop func()) {
	t.Helper()
	inf := core.NewSharedIndexInformer(lw, opts)
	if _, err := inf.AddEventHandler(h); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = inf.Run(ctx) }()
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	defer scancel()
	if err := inf.WaitForCacheSync(sctx); err != nil {
		t.Fatal(err)
	}
	return func() { cancel(); <-done }
}

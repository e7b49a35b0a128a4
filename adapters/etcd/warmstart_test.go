package etcdinformer_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/dbinformer/dbinformer/adapters/etcd/etcdtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/checkpoint"
	"github.com/dbinformer/dbinformer/core/codec"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// TestWarmStartAtIdleHead: an informer restarted from a checkpoint saved at
// etcd's head, with nothing written since, syncs without a write. Its first
// watch starts past etcd's revision, and etcd answers no progress request
// on such a watch; the watch must answer the warm start's bookmark request
// itself instead of ending as a frozen member (found by TestKillRestart,
// etcd seed 5).
func TestWarmStartAtIdleHead(t *testing.T) {
	h := etcdtest.New(t, harness.StartEtcd(t), etcdtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), converge)
	defer cancel()
	if _, err := h.Put(ctx, "a", 1); err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for run := range 2 {
		var mu sync.Mutex
		var errs []string
		inf := core.NewSharedIndexInformer[etcdtest.Item](h.ListerWatcher(), core.InformerOptions[etcdtest.Item]{
			Name:    "warm",
			Backoff: fastBackoff,
			ErrorHandler: func(err error) {
				mu.Lock()
				defer mu.Unlock()
				errs = append(errs, err.Error())
			},
			// Saved when a run ends: the first run's checkpoint is at the head.
			Checkpoint: &core.CheckpointOptions[etcdtest.Item]{Store: store, Codec: codec.JSON[etcdtest.Item]{}, Interval: -1},
		})
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- inf.Run(rctx) }()
		synced := inf.WaitForCacheSync(ctx)
		loaded := inf.SyncStatus().Checkpoint
		stop()
		<-done
		mu.Lock()
		reported := strings.Join(errs, "\n")
		mu.Unlock()
		if synced != nil {
			t.Fatalf("run %d did not sync: %v\nreported:\n%s", run, synced, reported)
		}
		if run == 1 {
			if loaded == 0 {
				t.Fatal("the second run did not load the checkpoint")
			}
			if reported != "" {
				t.Errorf("the warm start reported errors:\n%s", reported)
			}
			if obj, ok := inf.Lister().Get("a"); !ok || obj.Version != 1 {
				t.Errorf("the warm start's cache has a = %+v (present %v), want version 1", obj, ok)
			}
		}
	}
}

package etcdinformer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	"github.com/dbinformer/dbinformer/adapters/etcd/etcdtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// TestProgressIntervalOption: a Prefix declares a progress interval
// (driver.ProgressIntervaler), one second unless Options says otherwise, and
// none when Options.ProgressInterval is negative.
func TestProgressIntervalOption(t *testing.T) {
	c := harness.StartEtcd(t).Client(t)
	for _, tc := range []struct {
		opt, want time.Duration
	}{
		{0, etcdinformer.DefaultProgressInterval},
		{250 * time.Millisecond, 250 * time.Millisecond},
		{-1, 0},
	} {
		lw, err := etcdinformer.NewPrefix(context.Background(), c, "/p", etcdinformer.Options[item]{ProgressInterval: tc.opt})
		if err != nil {
			t.Fatal(err)
		}
		var pi driver.ProgressIntervaler = lw
		if got := pi.ProgressInterval(); got != tc.want {
			t.Errorf("Options.ProgressInterval %v: ProgressInterval() = %v, want %v", tc.opt, got, tc.want)
		}
	}
	if etcdinformer.DefaultProgressInterval != time.Second {
		t.Errorf("DefaultProgressInterval = %v, documented as 1s", etcdinformer.DefaultProgressInterval)
	}
}

// TestWatchFrozenServerSaysWhy freezes the only server under a synced
// informer (its connections stay open, no byte passes, as with SIGSTOP):
// the watch, asked for progress and silent, reads the head revision to
// find out why, and ends with that read's failure, reported through the
// error handler and the sync status, again and again while the freeze
// lasts; without it the watch would wait silently for the client's gRPC
// keepalive (10s at the least). Once the server thaws, the cache catches
// up with what was written meanwhile.
func TestWatchFrozenServerSaysWhy(t *testing.T) {
	h := etcdtest.New(t, harness.StartEtcd(t), etcdtest.Options{Faults: true})
	ctx, cancel := context.WithTimeout(context.Background(), converge)
	defer cancel()
	if _, err := h.Put(ctx, "a", 1); err != nil {
		t.Fatal(err)
	}
	inf, errs := informertest.Run(t, h.ListerWatcher(), core.InformerOptions[etcdtest.Item]{Backoff: fastBackoff})
	end, _ := h.Inject(t, ctx, conformance.Freeze)
	rv, err := h.Put(ctx, "a", 2)
	if err != nil {
		t.Fatal(err)
	}
	silent := func(err error) bool {
		return strings.Contains(err.Error(), "etcd sent nothing for") &&
			strings.Contains(err.Error(), "a read of the head revision failed")
	}
	got := errs.Wait(t, "the watch to report its silence and why", silent)
	t.Logf("reported while frozen: %v", got)
	informertest.Eventually(t, "the sync status to name the silent watch", func() bool {
		return strings.Contains(inf.SyncStatus().String(), "etcd sent nothing for")
	})
	end()
	informertest.WaitFor(t, inf, rv)
	if obj, ok := inf.Lister().Get("a"); !ok || obj.Version != 2 {
		t.Fatalf("after the thaw the cache has a = %+v (present %v), want version 2", obj, ok)
	}
}

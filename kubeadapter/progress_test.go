package kubeinformer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	kubeinformer "github.com/dbinformer/dbinformer/kubeadapter"
	"github.com/dbinformer/dbinformer/kubeadapter/kubetest"
)

// TestProgressIntervalOption: a Resource declares a progress interval
// (driver.ProgressIntervaler), DefaultProgressInterval unless Options says
// otherwise, and none when Options.ProgressInterval is negative.
func TestProgressIntervalOption(t *testing.T) {
	for _, tc := range []struct {
		opt, want time.Duration
	}{
		{0, kubeinformer.DefaultProgressInterval},
		{3 * time.Second, 3 * time.Second},
		{-1, 0},
	} {
		r, err := kubeinformer.NewResource[*corev1.ConfigMap](context.Background(), &scripted{}, kubeinformer.Options{ProgressInterval: tc.opt})
		if err != nil {
			t.Fatal(err)
		}
		var pi driver.ProgressIntervaler = r
		if got := pi.ProgressInterval(); got != tc.want {
			t.Errorf("Options.ProgressInterval %v: ProgressInterval() = %v, want %v", tc.opt, got, tc.want)
		}
	}
}

// TestWatchFrozenApiserverSaysWhy freezes the path to the apiserver under
// a synced informer (connections open, no byte passes, as with SIGSTOP or
// a half-open connection): the informer asks the silent watch for
// progress, the request's head read (or the short watch it opens) gives up
// after its bound, and the watch ends saying so, through the error handler and the sync status,
// long before HTTP/2's health check (45s) would notice. Once the path
// thaws, the cache catches up with what was written meanwhile.
func TestWatchFrozenApiserverSaysWhy(t *testing.T) {
	h := kubetest.NewConfigMaps(t, harness.StartKube(t), kubetest.Options{Logger: debugLogger(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := h.Put(ctx, "a", 1); err != nil {
		t.Fatal(err)
	}
	// 4s: the request comes after 4s of silence, and its head read, or the
	// short watch it opens, gives up 5s later, before the informer's own
	// limit (3 intervals, 12s) is reached.
	inf, errs := informertest.Run(t, h.ListerWatcher(), core.InformerOptions[*corev1.ConfigMap]{
		ProgressInterval: 4 * time.Second,
		Backoff:          core.Backoff{Initial: 50 * time.Millisecond, Max: time.Second},
	})
	end, _ := h.Inject(t, ctx, conformance.Freeze)
	rv, err := h.Put(ctx, "a", 2)
	if err != nil {
		t.Fatal(err)
	}
	says := func(s string) bool {
		return strings.Contains(s, "did not answer within") ||
			strings.Contains(s, "progress request") && strings.Contains(s, "deadline exceeded")
	}
	got := errs.Wait(t, "the silent watch to be ended, saying why", func(err error) bool { return says(err.Error()) })
	t.Logf("reported while frozen: %v", got)
	informertest.Eventually(t, "the sync status to name the silent apiserver", func() bool {
		return says(inf.SyncStatus().String())
	})
	end()
	informertest.WaitFor(t, inf, rv)
	obj, ok := inf.Lister().Get(h.EventKey("a"))
	if !ok || h.Version(obj) != 2 {
		t.Fatalf("after the thaw the cache has a at version %v (present %v), want 2", obj, ok)
	}
}

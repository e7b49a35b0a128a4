package prommetrics

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/memory"
)

// Regression: the pending gauge was reported after unlocking, so an add's
// "1" could land after the delivery goroutine's "0" and stick.
func TestPendingGaugeNotStale(t *testing.T) {
	reg := prometheus.NewRegistry()
	pm, _ := New(reg, Options{})
	src := memory.New[string](memory.Options{})
	inf := core.NewSharedIndexInformer[string](src, core.InformerOptions[string]{Name: "r", Metrics: pm})
	reg1, _ := inf.AddEventHandlerWithOptions(core.ResourceEventHandlerFuncs[string]{}, core.HandlerOptions{Name: "h"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	defer func() { cancel(); <-done }()
	inf.WaitForCacheSync(ctx)
	for i := 0; i < 3000; i++ {
		inf.WaitFor(ctx, src.Put("k", "v"))
		for reg1.Pending() != 0 {
			time.Sleep(time.Microsecond)
		}
		deadline := time.Now().Add(2 * time.Second)
		for {
			v, _ := sample(t, reg, "dbinformer_informer_pending_notifications", map[string]string{"handler": "h"})
			if v == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("iteration %d: Registration.Pending() is 0 but the gauge stays at %v", i, v)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

package prommetrics

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestListRateAndETA: while a list runs, its rate and the time left at
// that rate to the estimate are exported, consistent with each other; a
// finished list shows no time left, and the next list starts its own rate.
func TestListRateAndETA(t *testing.T) {
	reg := prometheus.NewRegistry()
	p, err := New(reg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := p.InformerMetrics("orders")
	lbl := map[string]string{"informer": "orders"}
	m.ListProgress(0, 10_000) // the estimate arrives first: the list starts
	time.Sleep(2 * time.Millisecond)
	m.ListProgress(4_000, 10_000)
	rate, ok := sample(t, reg, "dbinformer_informer_list_objects_per_second", lbl)
	if !ok || rate <= 0 {
		t.Fatalf("rate %v (present %v), want > 0", rate, ok)
	}
	eta, _ := sample(t, reg, "dbinformer_informer_list_remaining_seconds", lbl)
	if left := eta * rate; math.Abs(left-6_000) > 1 {
		t.Errorf("remaining %vs at %v objects/s covers %v objects, want the 6000 left", eta, rate, left)
	}
	m.ListProgress(12_000, 10_000) // past the estimate: nothing left to predict
	want(t, reg, "dbinformer_informer_list_remaining_seconds", lbl, 0)
	m.Listed(false, 12_000, nil)
	want(t, reg, "dbinformer_informer_list_remaining_seconds", lbl, 0)
	// A relist measures from its own start.
	m.ListProgress(0, 100)
	time.Sleep(2 * time.Millisecond)
	m.ListProgress(50, 100)
	eta, _ = sample(t, reg, "dbinformer_informer_list_remaining_seconds", lbl)
	rate, _ = sample(t, reg, "dbinformer_informer_list_objects_per_second", lbl)
	if left := eta * rate; math.Abs(left-50) > 0.01 {
		t.Errorf("relist: remaining %vs at %v objects/s covers %v objects, want 50", eta, rate, left)
	}
}

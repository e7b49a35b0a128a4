package conformance

import (
	"context"
	"iter"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/codec"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/memory"
)

// fullSource is the memory source with every optional capability, so
// that the case checks all seven.
type fullSource struct{ *memory.Source[obj] }

func (fullSource) ProgressInterval() time.Duration      { return time.Minute }
func (fullSource) WaitHealed(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
func (fullSource) Codec() codec.Codec[obj]              { return codec.JSON[obj]{} }
func (fullSource) Restore(context.Context, core.ResourceVersion, iter.Seq2[string, obj]) error {
	return nil
}
func (fullSource) GateAcknowledgements(bool)               {}
func (fullSource) AcknowledgeDurable(core.ResourceVersion) {}

var (
	_ driver.ProgressReporter    = fullSource{}
	_ driver.ProgressIntervaler  = fullSource{}
	_ driver.HealWaiter          = fullSource{}
	_ driver.HeadReader          = fullSource{}
	_ driver.CodecProvider[obj]  = fullSource{}
	_ driver.Restorer[obj]       = fullSource{}
	_ driver.DurableAcknowledger = fullSource{}
)

func TestCapabilitiesSurviveWrappers(t *testing.T) {
	c := caseNamed(t, "CapabilitiesSurviveWrappers")
	for _, name := range []string{"every capability", "only the memory source's"} {
		s := memory.New[obj](memory.Options{})
		var lw driver.ListerWatcher[obj] = s
		if name == "every capability" {
			lw = fullSource{s}
		}
		if rec := runRecorded(controlCaps, memHarness{s: s, lw: lw}, c); rec.Failed() {
			t.Errorf("%s: %s", name, rec.failures())
		}
	}
}

// hiding keeps the ListerWatcher in a named field and has no Unwrap: it
// hides every capability, which the check must report, one by one.
type hiding struct{ lw driver.ListerWatcher[obj] }

func (h hiding) List(ctx context.Context, sink driver.ListSink[obj]) (core.ResourceVersion, error) {
	return h.lw.List(ctx, sink)
}
func (h hiding) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[obj]) error {
	return h.lw.Watch(ctx, from, opts)
}

// standIn implements every capability itself over a full source, so a
// lookup finds its methods, not the source's.
type standIn struct{ fullSource }

func (standIn) ReportsProgress() bool { return false }

func TestCapabilityCheckCatchesLosses(t *testing.T) {
	s := fullSource{memory.New[obj](memory.Options{})}
	rec := &recorder{}
	checkCapabilities[obj](rec, s, []namedLW[obj]{{"a hiding wrapper", hiding{s}}})
	if got := len(rec.errs); got != 7 {
		t.Errorf("a wrapper hiding seven capabilities: %d failures, want 7: %s", got, rec.failures())
	}
	rec = &recorder{}
	checkCapabilities[obj](rec, s, []namedLW[obj]{{"a stand-in", standIn{s}}})
	if got := len(rec.errs); got != 7 {
		t.Errorf("a wrapper answering for the source: %d failures, want 7: %s", got, rec.failures())
	}
	rec = &recorder{}
	checkCapabilities[obj](rec, memory.New[obj](memory.Options{}), []namedLW[obj]{{"a stand-in", standIn{s}}})
	if !rec.Failed() {
		t.Error("capabilities found behind a wrapper that the source lacks went unreported")
	}
}

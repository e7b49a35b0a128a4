package core_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/clock"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/memory"
)

type item struct{ N int }

// named keeps the ListerWatcher in a named field and has no Unwrap: the
// informer sees none of what it wraps can do.
type named struct{ lw driver.ListerWatcher[item] }

func (h named) List(ctx context.Context, sink driver.ListSink[item]) (core.ResourceVersion, error) {
	return h.lw.List(ctx, sink)
}
func (h named) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[item]) error {
	return h.lw.Watch(ctx, from, opts)
}

// headCounter is a memory source whose head reads are counted.
type headCounter struct {
	*memory.Source[item]
	reads atomic.Int32
}

func (h *headCounter) Head(ctx context.Context) (core.ResourceVersion, error) {
	h.reads.Add(1)
	return h.Source.Head(ctx)
}

// The informer's Head reads its source's head through wrappers, and its
// observers share one read within a second.
func TestInformerHeadIsShared(t *testing.T) {
	src := &headCounter{Source: memory.New[item](memory.Options{})}
	src.Put("a", item{1})
	fc := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	inf := core.NewSharedIndexInformer[item](struct{ driver.ListerWatcher[item] }{src}, core.InformerOptions[item]{Clock: fc})
	ctx := context.Background()
	for range 3 {
		if rv, err := inf.Head(ctx); err != nil || rv != 1 {
			t.Fatalf("Head = %d, %v", rv, err)
		}
	}
	if n := src.reads.Load(); n != 1 {
		t.Fatalf("%d reads of the source for three Heads within a second, want 1", n)
	}
	src.Put("b", item{2})
	fc.Step(time.Second)
	if rv, err := inf.Head(ctx); err != nil || rv != 2 || src.reads.Load() != 2 {
		t.Fatalf("Head a second later = %d, %v (%d reads); want 2 from a second read", rv, err, src.reads.Load())
	}
	if inf.Source() != "core_test.headCounter" {
		t.Errorf("Source = %q, want the kind beneath the embedding wrapper", inf.Source())
	}
	headless := core.NewSharedIndexInformer[item](named{src.Source}, core.InformerOptions[item]{})
	if _, err := headless.Head(ctx); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Head of a source without one = %v, want errors.ErrUnsupported", err)
	}
}

// A handler is named by HandlerOptions.Name, else by its own Name.
func TestHandlerNames(t *testing.T) {
	inf := core.NewSharedIndexInformer[item](memory.New[item](memory.Options{}), core.InformerOptions[item]{})
	for _, c := range []struct {
		h    core.ResourceEventHandler[item]
		opts core.HandlerOptions
		want string
	}{
		{core.ResourceEventHandlerFuncs[item]{Name: "mailer"}, core.HandlerOptions{}, "mailer"},
		{core.ResourceEventHandlerFuncs[item]{Name: "mailer"}, core.HandlerOptions{Name: "override"}, "override"},
		{core.ResourceEventHandlerFuncs[item]{}, core.HandlerOptions{}, "core.ResourceEventHandlerFuncs[github.com/dbinformer/dbinformer/core_test.item]#3"},
	} {
		reg, err := inf.AddEventHandlerWithOptions(c.h, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		if reg.Name() != c.want {
			t.Errorf("handler name %q, want %q", reg.Name(), c.want)
		}
	}
}

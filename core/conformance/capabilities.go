package conformance

import (
	"fmt"
	"reflect"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/filter"
)

// embedded is the wrapper a user writes by default: a struct that embeds
// the ListerWatcher and adds nothing the core can see.
type embedded[T any] struct{ core.ListerWatcher[T] }

// wrappers returns lw behind each wrapper a capability must survive.
func wrappers[T any](lw core.ListerWatcher[T]) []namedLW[T] {
	return []namedLW[T]{
		{"filter.Wrap", filter.Wrap(lw, nil)},
		{"informertest.Spy", informertest.Wrap(lw)},
		{"a struct embedding the ListerWatcher", embedded[T]{lw}},
		{"a pointer to a struct embedding the ListerWatcher", &embedded[T]{lw}},
		{"filter.Wrap of a Spy of an embedding struct", filter.Wrap[T](informertest.Wrap[T](embedded[T]{lw}), nil)},
	}
}

type namedLW[T any] struct {
	name string
	lw   core.ListerWatcher[T]
}

// capabilitiesSurviveWrappers: every optional capability the ListerWatcher
// has (progress, head, heal wait, stuck-watch interval, codec, restore,
// durable acknowledgement) is found by core.Capability behind filter.Wrap,
// informertest.Spy and a plain embedding struct, and it is the
// ListerWatcher's own, not a stand-in; none is found that the
// ListerWatcher lacks.
func capabilitiesSurviveWrappers[T any](e *env[T]) {
	checkCapabilities(e.t, e.lw, wrappers(e.lw))
	if e.t.Failed() {
		return
	}
	// What is found also answers as the ListerWatcher's own does.
	ctx, cancel := e.opCtx()
	defer cancel()
	h, ok := core.Capability[core.HeadReader](e.lw)
	if !ok {
		return
	}
	before, err := h.Head(ctx)
	if err != nil {
		e.t.Fatalf("Head of the bare ListerWatcher: %v", err)
	}
	for _, w := range wrappers(e.lw) {
		wh, _ := core.Capability[core.HeadReader](w.lw)
		head, err := wh.Head(ctx)
		if err != nil || head < before {
			e.t.Errorf("Head through %s = %d, %v; want at least %d, as the bare ListerWatcher said", w.name, head, err, before)
		}
	}
}

// checkCapabilities checks each capability of bare against each wrapper.
func checkCapabilities[T any](t tb, bare core.ListerWatcher[T], ws []namedLW[T]) {
	t.Helper()
	for _, w := range ws {
		sameCapability[core.ProgressReporter](t, "core.ProgressReporter", bare, w)
		sameCapability[core.ProgressIntervaler](t, "core.ProgressIntervaler", bare, w)
		sameCapability[core.HealWaiter](t, "core.HealWaiter", bare, w)
		sameCapability[core.HeadReader](t, "core.HeadReader", bare, w)
		sameCapability[core.CodecProvider[T]](t, "core.CodecProvider", bare, w)
		sameCapability[core.Restorer[T]](t, "core.Restorer", bare, w)
		sameCapability[core.DurableAcknowledger](t, "core.DurableAcknowledger", bare, w)
		sameCapability[core.SupersededSkipper](t, "core.SupersededSkipper", bare, w)
	}
}

func sameCapability[C any, T any](t tb, name string, bare core.ListerWatcher[T], w namedLW[T]) {
	t.Helper()
	b, has := core.Capability[C](bare)
	got, found := core.Capability[C](w.lw)
	switch {
	case has && !found:
		t.Errorf("%s: the ListerWatcher (%T) implements it, but core.Capability does not find it behind %s: an informer over the wrapper would run without it", name, bare, w.name)
	case !has && found:
		t.Errorf("%s: core.Capability finds %T behind %s, but the ListerWatcher (%T) does not implement it", name, got, w.name, bare)
	case has && !sameValue(b, got):
		t.Errorf("%s: behind %s core.Capability finds %s, not the ListerWatcher's own %s", name, w.name, fmt.Sprintf("%T", got), fmt.Sprintf("%T", b))
	}
}

// sameValue reports whether a and b are the same implementation: equal
// when their type is comparable, else of one type.
func sameValue(a, b any) bool {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	if ta != tb {
		return false
	}
	if ta != nil && ta.Comparable() {
		return a == b
	}
	return true
}

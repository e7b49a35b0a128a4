package conformance

import (
	"fmt"
	"reflect"

	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/filter"
)

// embedded is the wrapper a user writes by default: a struct that embeds
// the ListerWatcher and adds nothing the core can see.
type embedded[T any] struct{ driver.ListerWatcher[T] }

// wrappers returns lw behind each wrapper a capability must survive.
func wrappers[T any](lw driver.ListerWatcher[T]) []namedLW[T] {
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
	lw   driver.ListerWatcher[T]
}

// capabilitiesSurviveWrappers: every optional capability the ListerWatcher
// has (progress, head, heal wait, stuck-watch interval, codec, restore,
// durable acknowledgement) is found by driver.Capability behind filter.Wrap,
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
	h, ok := driver.Capability[driver.HeadReader](e.lw)
	if !ok {
		return
	}
	before, err := h.Head(ctx)
	if err != nil {
		e.t.Fatalf("Head of the bare ListerWatcher: %v", err)
	}
	for _, w := range wrappers(e.lw) {
		wh, _ := driver.Capability[driver.HeadReader](w.lw)
		head, err := wh.Head(ctx)
		if err != nil || head < before {
			e.t.Errorf("Head through %s = %d, %v; want at least %d, as the bare ListerWatcher said", w.name, head, err, before)
		}
	}
}

// checkCapabilities checks each capability of bare against each wrapper.
func checkCapabilities[T any](t tb, bare driver.ListerWatcher[T], ws []namedLW[T]) {
	t.Helper()
	for _, w := range ws {
		sameCapability[driver.ProgressReporter](t, "driver.ProgressReporter", bare, w)
		sameCapability[driver.ProgressIntervaler](t, "driver.ProgressIntervaler", bare, w)
		sameCapability[driver.HealWaiter](t, "driver.HealWaiter", bare, w)
		sameCapability[driver.HeadReader](t, "driver.HeadReader", bare, w)
		sameCapability[driver.CodecProvider[T]](t, "driver.CodecProvider", bare, w)
		sameCapability[driver.Restorer[T]](t, "driver.Restorer", bare, w)
		sameCapability[driver.DurableAcknowledger](t, "driver.DurableAcknowledger", bare, w)
		sameCapability[driver.SupersededSkipper](t, "driver.SupersededSkipper", bare, w)
	}
}

func sameCapability[C any, T any](t tb, name string, bare driver.ListerWatcher[T], w namedLW[T]) {
	t.Helper()
	b, has := driver.Capability[C](bare)
	got, found := driver.Capability[C](w.lw)
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
